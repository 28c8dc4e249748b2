from collections.abc import Callable
from typing import Any, TypeVar

from django.apps import AppConfig

T = TypeVar("T")


class RuntimeConfig(AppConfig):
    name = "runtime"
    label = "runtime"
    default_auto_field = "django.db.models.BigAutoField"
    # The graph registry is not loaded here: migrate and collectstatic must not import graph
    # modules. The worker and the web server load it as they start (runtime.registry).

    def ready(self) -> None:
        from runtime import notify  # noqa: F401  (connects the NOTIFY receivers)
        from runtime.effects import ledger_install

        ledger_install(_ledger_perform)  # perform_effect records in the ledger (runtime/effects.py)


def _ledger_perform(name: str, call: Callable[[str], T], *, key: str | None, args: dict[str, Any] | None) -> T:
    # Imported at the first effect, not as Django starts: migrate and the commands never need it.
    from runtime.effect_ledger import ledger_perform

    return ledger_perform(name, call, key=key, args=args)
