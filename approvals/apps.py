from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    label = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from approvals.text_search import sqlite_casefold_register

        connection_created.connect(sqlite_casefold_register)  # searches fold case as PostgreSQL's do
        import approvals.external  # noqa: F401  (completes external tasks: services.task_completers)
        from approvals import receivers, security  # noqa: F401  (subscribe to runtime and auth events)
        from approvals.events import events_subscribe
        from approvals.outbound import outbox

        events_subscribe(outbox.on_audit_recorded, in_transaction=True)  # the outbound webhook outbox
        # Inbox columns per gate (issue 14): "gatehouse": {"columns": ...}, checked as the registry loads.
        from approvals.columns import columns_from_config
        from runtime.registry import gatehouse_option_register

        gatehouse_option_register("columns", columns_from_config)
        # Thread metadata the inbox search matches: "gatehouse": {"search_metadata": ...}.
        from approvals.selectors import search_metadata_from_config

        gatehouse_option_register("search_metadata", search_metadata_from_config)
        # Open tasks waiting in a node a graph no longer has: graphs_check and a worker's start say so.
        from approvals.abilities import node_gone_warnings
        from runtime.registry import registry_warning_register

        registry_warning_register(node_gone_warnings)
        # A gate's escalate_to naming no group: said at start-up, not first when a task is overdue.
        from approvals.deadlines import escalation_group_warnings

        registry_warning_register(escalation_group_warnings)
