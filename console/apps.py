from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    label = "console"
