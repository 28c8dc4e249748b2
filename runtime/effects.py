"""The effect ledger: side effects in action nodes that happen once, however often the node runs.

Usage in an action node::

    def open_account(state):
        account = perform_effect(
            "open_account",
            lambda key: bank.open_account(state["applicant"], idempotency_key=key),
        )
        return {"account": account}

The intent is recorded before the call and the result after it. A node that
runs again (a retry, a redelivered run) gets the recorded result back without
calling the outside world. If the process dies between the call and the
record, the next attempt calls again *with the same key*, so a provider that
honours idempotency keys (Stripe, Adyen, most banking APIs) answers with the
first result instead of acting twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from langgraph.config import get_config

from runtime import signals
from runtime.models import Effect, EffectStatus, Run, Thread

T = TypeVar("T")


def effect_key(name: str, *parts: object) -> str:
    """The default idempotency key: stable per thread and effect name (plus any parts you add)."""
    thread_id = get_config()["configurable"]["thread_id"]
    return ":".join(["gh", str(thread_id), name, *(str(p) for p in parts)])


def perform_effect(name: str, call: Callable[[str], T], *, key: str | None = None) -> T:
    """Run ``call(idempotency_key)`` at most once per key and return its (recorded) result.

    The result must be JSON-serialisable: it is what a replay returns.
    """
    configurable = get_config().get("configurable", {})
    key = key or effect_key(name)
    thread = Thread.objects.filter(pk=str(configurable.get("thread_id"))).first()
    run_id = configurable.get("gatehouse_run_id")
    run = Run.objects.filter(pk=run_id).first() if run_id else None
    effect, _ = Effect.objects.get_or_create(key=key, defaults={"name": name, "thread": thread, "run": run})
    if effect.status == EffectStatus.DONE:
        return effect.result  # type: ignore[return-value]
    Effect.objects.filter(pk=effect.pk).update(calls=F("calls") + 1, run=run)
    try:
        result = call(key)
    except Exception as exc:
        Effect.objects.filter(pk=effect.pk).update(status=EffectStatus.FAILED, error=repr(exc)[:2000])
        raise
    with transaction.atomic():
        Effect.objects.filter(pk=effect.pk).update(
            status=EffectStatus.DONE, result=result, error="", completed_at=timezone.now()
        )
        effect.refresh_from_db()
        signals.effect_executed.send(sender=Effect, effect=effect)
    return result
