from django.apps import AppConfig


class LgPlatformConfig(AppConfig):
    """The LangGraph Platform-compatible API (``/lg/``): an adapter over the approvals domain and the runtime."""

    name = "lgplatform"
    label = "lgplatform"
