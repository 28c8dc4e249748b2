from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    label = "console"

    def ready(self) -> None:
        from approvals.services import decision_guard_register
        from console import checks, logs  # noqa: F401 - registers system checks and the run log-context receiver
        from console.services import claim_guard

        decision_guard_register(claim_guard)
