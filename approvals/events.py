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


# --- Bulk actions (issue 14): progress steps are events too, but not audit rows ----------------------
# A bulk action's per-task step is recorded by the task's own decision (or nothing, for a skip); the
# progress is a hint for screens, so it goes to the after-commit subscribers only, as an unsaved
# event (id None) of the action ``bulk.progress``: outboxes never see it, live updates do.

BULK_PROGRESS = "bulk.progress"


def events_step_publish(*, action: str, subject_type: str, subject_id: str, graph: str = "") -> None:
    """Publish a step that has no audit row of its own; call inside the transaction that made the step."""
    event = AuditEvent(action=action, subject_type=subject_type, subject_id=subject_id, graph=graph, details={})
    for handler in _after_commit:
        transaction.on_commit(partial(handler, event), robust=True)
