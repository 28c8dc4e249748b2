"""Domain events leave the domain in one place: ``audit_record`` publishes every event it records.

Adapters subscribe here (from their app's ``ready()``) instead of hanging
receivers off model saves, so an event exists only for a change the domain
recorded, with what the audit row says about it. Two kinds of subscriber:

- in the transaction (``in_transaction=True``): writes that must commit or roll
  back with the change, such as the outbound webhook outbox;
- after commit (the default): hints that must never announce a change that
  rolled back, such as live updates. A failing one is logged, never raised:
  the change has committed already.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from django.db import transaction

from approvals.models import AuditEvent

Handler = Callable[[AuditEvent], None]

_in_transaction: list[Handler] = []
_after_commit: list[Handler] = []


def events_subscribe(handler: Handler, *, in_transaction: bool = False) -> None:
    """Call ``handler`` with each recorded audit event; subscribing twice is a no-op."""
    handlers = _in_transaction if in_transaction else _after_commit
    if handler not in handlers:
        handlers.append(handler)


def events_publish(event: AuditEvent) -> None:
    """Hand ``event`` to the subscribers; call inside the transaction that recorded it."""
    for handler in _in_transaction:
        handler(event)
    for handler in _after_commit:
        transaction.on_commit(partial(handler, event), robust=True)
