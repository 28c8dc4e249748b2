from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    label = "runtime"
    default_auto_field = "django.db.models.BigAutoField"
    # The graph registry is not loaded here: migrate and collectstatic must not import graph
    # modules. The worker and the web server load it as they start (runtime.registry).

    def ready(self) -> None:
        from runtime import notify  # noqa: F401  (connects the NOTIFY receivers)
