from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    label = "runtime"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Fail at start-up, naming the graph, rather than on the first run.
        from runtime.registry import registry_load

        registry_load()
        from runtime import notify  # noqa: F401  (connects the NOTIFY receivers)
