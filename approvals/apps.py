from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    label = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import approvals.external  # noqa: F401  (completes external tasks: services.task_completers)
        import approvals.outbound  # noqa: F401  (queues outbound webhook events in the same transaction)
        from approvals import receivers, security  # noqa: F401  (subscribe to runtime and auth events)
        from console import live  # noqa: F401  (publishes audit events to websocket groups after commit)
