from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    label = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from approvals import receivers  # noqa: F401  (subscribes to runtime events)
        from console import live  # noqa: F401  (publishes audit events to websocket groups after commit)
