from django.apps import AppConfig


class AuthCommandsConfig(AppConfig):
    name = "approvals.auth_commands"
    label = "approvals_auth_commands"
    verbose_name = "audited replacements of django.contrib.auth's commands"
