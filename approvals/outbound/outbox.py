"""The outbound webhook outbox: domain events become delivery rows in the change's own transaction.

Events are written as OutboundDelivery rows inside the transaction that makes the
change (an outbox: no event for a change that rolled back, none lost for one that
committed), and the sending task is dispatched after commit, by name
(``approvals.deliver_webhook``, ``approvals.outbound.tasks``). Sending, signing
and retrying are ``approvals.outbound.sending``.
"""

from __future__ import annotations

import functools
import logging
import secrets as pysecrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any

from celery import current_app
from django.db import connection, transaction
from django.dispatch import receiver
from django.utils import timezone

from approvals.audit import subscriptions_generation
from approvals.gate_policy import gate_policy
from approvals.models import ApprovalTask, AuditAction, AuditEvent, OutboundDelivery, WebhookSubscription
from approvals.payloads import payload_kind
from runtime import rows, signals
from runtime.models import Run

log = logging.getLogger(__name__)

# task.signed: one signature recorded (a quorum may still be open); task.decided: the task is decided.
EVENT_TYPES = (
    "task.opened",
    "task.signed",
    "task.decided",
    "thread.completed",
    "thread.failed",
    # deadlines (approvals.deadlines): the reminder before, the escalation after the deadline
    "task.reminded",
    "task.escalated",
)
# The Celery task that sends one delivery (approvals.outbound.tasks.deliver_webhook).
DELIVER_WEBHOOK_TASK = "approvals.deliver_webhook"


def subscriptions_active(graph: str) -> list[WebhookSubscription]:
    """The active subscriptions to ``graph``'s events (named or ``*``), whatever their event types.

    Read in every transaction that emits events (a run's outcome, a decision). On PostgreSQL each
    audit append also reads the subscriptions' generation (``audit.subscriptions_generation``); the
    subscriptions last read for ``graph`` in this process are used again while the generation this
    transaction saw is the one they were read at: no statement, the same rows.
    """
    generation = subscriptions_generation()
    kept = _kept.get(graph)
    if generation is not None and kept is not None and kept[0] == generation:
        return list(kept[1])
    read_at, subscriptions = _subscriptions_read(graph)
    if read_at is not None:
        if len(_kept) >= KEPT_GRAPHS:
            _kept.clear()
        _kept[graph] = (read_at, tuple(subscriptions))
    return subscriptions


# graph → (the generation they were read at, the active subscriptions then). Shared by the process's
# threads: entries are replaced whole, and the rows in them are only read.
_kept: dict[str, tuple[int, tuple[WebhookSubscription, ...]]] = {}
KEPT_GRAPHS = 1000


def _subscriptions_read(graph: str) -> tuple[int | None, list[WebhookSubscription]]:
    """The active subscriptions and, on PostgreSQL, the generation they were read at (one statement);
    written out once per process and prepared (``runtime.rows``), what
    ``filter(active=True, graph__in=[graph, "*"])`` reads."""
    with rows.fixed_cursor() as cursor:
        cursor.execute(_active_sql(connection.vendor), [True, graph, "*"])
        found = cursor.fetchall()
    if connection.vendor != "postgresql":
        return None, [rows.model_from_row(WebhookSubscription, row) for row in found]
    generation = int(found[0][0])  # the generation's row is always there; subscriptions may not be
    return generation, [rows.model_from_row(WebhookSubscription, row[1:]) for row in found if row[1] is not None]


@functools.cache
def _active_sql(vendor: str) -> str:
    q = connection.ops.quote_name
    meta = WebhookSubscription._meta
    active, graph = q(str(meta.get_field("active").column)), q(str(meta.get_field("graph").column))
    if vendor != "postgresql":
        return (
            f"SELECT {rows.columns(WebhookSubscription)} FROM {q(meta.db_table)} "  # noqa: S608 - names from the model
            f"WHERE {active} = %s AND {graph} IN (%s, %s)"
        )
    # The generation's one row, joined to the matching subscriptions (none: one row of NULLs beside it).
    return (
        f"SELECT g.value, {rows.columns(WebhookSubscription, 's')} "  # noqa: S608 - names from the model
        f"FROM gatehouse_webhook_generation g LEFT JOIN {q(meta.db_table)} s "
        f"ON s.{active} = %s AND s.{graph} IN (%s, %s) WHERE g.id = 1"
    )


def event_emit(
    event_type: str,
    *,
    graph: str,
    data: dict[str, Any],
    among: list[WebhookSubscription] | None = None,
    cause: AuditEvent | None = None,
) -> list[OutboundDelivery]:
    """Queue ``event_type`` for every matching subscription; call inside the change's transaction.

    ``among``: ``subscriptions_active(graph)`` already read in this transaction (one change that emits
    several events reads them once). ``cause``: the audit event the deliveries carry; each delivery keeps
    it and its thread (``data["thread_id"]``), so a decision's deliveries can be listed.
    """
    candidates = subscriptions_active(graph) if among is None else among
    subscriptions = [s for s in candidates if event_type in (s.event_types or [])]
    if not subscriptions:
        return []
    event_id = f"evt_{pysecrets.token_hex(12)}"
    now = timezone.now()
    payload = {"type": event_type, "timestamp": now.isoformat(), "data": {"graph": graph, **data}}
    rows = [
        OutboundDelivery.objects.create(
            subscription=s,
            event_id=event_id,
            event_type=event_type,
            graph=graph,
            payload=payload,
            thread_id=data.get("thread_id"),
            audit_event_id=cause.pk if cause is not None else None,
            next_attempt_at=now,
        )
        for s in subscriptions
    ]
    for row in rows:
        transaction.on_commit(partial(delivery_dispatch, delivery_id=row.pk))
    return rows


def delivery_dispatch(*, delivery_id: int, countdown: float = 0) -> None:
    """Send the delivery to a worker (by task name: approvals.outbound.tasks imports this module)."""
    try:
        current_app.send_task(DELIVER_WEBHOOK_TASK, args=[delivery_id], countdown=countdown)
    except Exception:  # the broker is down: the row stays pending with its next_attempt_at
        log.exception("could not dispatch outbound webhook %s", delivery_id)


def on_audit_recorded(event: AuditEvent) -> None:
    """Subscribed in the transaction (approvals.events): the outbox rows commit or roll back with the change."""
    if event.action == AuditAction.TASK_OPENED:
        _task_opened(event)
    elif event.action in (AuditAction.DECISION_MADE, AuditAction.DECISION_RECORDED):
        _decision_recorded(event)
    elif event.action == AuditAction.THREAD_COMPLETED:
        _thread_completed(event)
    elif event.action in _DEADLINE_EVENTS:  # deadlines
        _deadline_step(event)


_DEADLINE_EVENTS = {AuditAction.DEADLINE_REMINDED: "task.reminded", AuditAction.DEADLINE_ESCALATED: "task.escalated"}


def _deadline_step(event: AuditEvent) -> None:
    details = event.details
    event_emit(
        _DEADLINE_EVENTS[AuditAction(event.action)],
        graph=event.graph,
        data={
            "task_id": event.subject_id,
            "thread_id": str(event.thread_id),
            "node": details.get("node"),
            "due_at": details.get("due_at"),
            "escalated_to": details.get("escalated_to"),
            "reason": details.get("reason", ""),
        },
        cause=event,
    )


# The tasks whose opening is being recorded, by id, when the service that opens them says so
# (``task_opening``): their ``task.opened`` events are described from them instead of reading the rows
# just inserted.
_opening: ContextVar[dict[str, ApprovalTask] | None] = ContextVar("outbox_task_opening", default=None)


@contextmanager
def task_opening(*tasks: ApprovalTask) -> Iterator[None]:
    """Around the audit of ``tasks``' opening: the outbox describes each task from its object."""
    token = _opening.set({str(task.pk): task for task in tasks})
    try:
        yield
    finally:
        _opening.reset(token)


def _task_opened(event: AuditEvent) -> None:
    task = (_opening.get() or {}).get(event.subject_id)
    if task is None:
        task = ApprovalTask.objects.filter(pk=event.subject_id).first()
    if task is None:  # an audit row about a task that is not (or no longer) stored: nothing to describe
        return
    event_emit(
        "task.opened",
        graph=task.graph,
        data={
            "task_id": str(task.id),
            "thread_id": str(task.thread_id),
            "node": task.node,
            "title": task.title,
            "payload_kind": payload_kind(task.payload, task.kind),
            "correlation_key": gate_policy(task.payload, task.kind).correlation_key,
        },
        cause=event,
    )


def _decision_recorded(instance: AuditEvent) -> None:
    """A signature is ``task.signed``; only the one that decides the task (quorum met) is also ``task.decided``.

    The audit event, not the Decision row, says whether the signature decided
    the task: on a two-approver gate the first signature leaves it pending.
    """
    details = instance.details
    data = {
        "task_id": instance.subject_id,
        "thread_id": str(instance.thread_id),
        "decision_id": details.get("decision"),
        "outcome": details.get("outcome"),
        "reason": details.get("reason", ""),
        "actor": instance.actor_label,
    }
    quorum = details.get("quorum") or {}
    among = subscriptions_active(instance.graph)
    event_emit(
        "task.signed",
        graph=instance.graph,
        among=among,
        cause=instance,
        data={
            **data,
            "meaning": details.get("meaning"),
            "approvals": quorum.get("approvals"),
            "required": quorum.get("required"),
        },
    )
    if instance.action == AuditAction.DECISION_MADE:
        event_emit("task.decided", graph=instance.graph, data=data, among=among, cause=instance)


def _thread_completed(event: AuditEvent) -> None:
    # State values are not sent: they may hold what only some roles may see.
    details = event.details
    event_emit(
        "thread.completed",
        graph=event.graph,
        data={
            "thread_id": str(event.thread_id),
            "run_id": details.get("run"),
            "status": "completed",
            "keys": details.get("keys", []),
        },
        cause=event,
    )


@receiver(signals.run_failed, dispatch_uid="outbound.thread_failed")
def on_run_failed(sender: Any, run: Run, error: str, **kwargs: Any) -> None:
    event_emit(
        "thread.failed",
        graph=run.thread.graph,
        data={"thread_id": str(run.thread_id), "run_id": str(run.id), "status": "failed", "error": error[:2000]},
    )
