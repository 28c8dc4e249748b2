from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    label = "console"

    def ready(self) -> None:
        from approvals.events import events_subscribe
        from console import checks, logs  # noqa: F401 - registers system checks and the run log-context receiver
        from console.live import on_audit_recorded

        events_subscribe(on_audit_recorded)  # live updates to websocket groups, after commit
