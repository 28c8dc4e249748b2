"""Outbound webhooks: notify subscribed URLs when a task opens or is decided, or a thread completes or fails.

Events are written as OutboundDelivery rows inside the transaction that makes the
change (an outbox: no event for a change that rolled back, none lost for one that
committed), and a Celery task is dispatched after commit. The sender signs each
attempt per Standard Webhooks (same ``webhook-id`` on every attempt, so receivers
can dedupe) and retries with exponential backoff, a bounded number of times.
"""

from __future__ import annotations

import json
import logging
import os
import secrets as pysecrets
import urllib.error
import urllib.request
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.utils import timezone

from approvals import permissions
from approvals.audit import audit_record
from approvals.errors import Conflict, InvalidInput, NotFound
from approvals.models import (
    ApprovalTask,
    Decision,
    OutboundDelivery,
    OutboundStatus,
    WebhookSubscription,
)
from approvals.payloads import payload_kind
from approvals.webhooks import secret_check, secret_generate, webhook_sign
from runtime import signals
from runtime.models import Run

log = logging.getLogger(__name__)

EVENT_TYPES = ("task.opened", "task.decided", "thread.completed", "thread.failed")
MAX_ATTEMPTS = 6
TIMEOUT_SECONDS = 10.0


def _backoff_base() -> float:
    # Seconds before the 2nd attempt; doubles after each failure (base, 2·base, 4·base, …).
    return float(
        getattr(
            settings, "GATEHOUSE_WEBHOOK_BACKOFF_SECONDS", os.environ.get("GATEHOUSE_WEBHOOK_BACKOFF_SECONDS", "10")
        )
    )


def backoff_delay(attempts: int) -> float:
    return _backoff_base() * (2 ** max(attempts - 1, 0))


# --- subscriptions -------------------------------------------------------------------------


@transaction.atomic
def subscription_create(
    *, actor: Any, url: str, graph: str = "*", event_types: list[str], secret: str | None = None
) -> WebhookSubscription:
    if actor is not None:
        permissions.require(actor, "runtime.retry_thread", "manage webhooks")
        if graph != "*" and not permissions.graph_visible(actor, graph):
            raise NotFound(f"graph {graph!r} not found", field="graph")
        if graph == "*" and permissions.graphs_visible(actor) is not None:
            raise InvalidInput("only principals who see every graph may subscribe to all of them", field="graph")
    if not url.startswith(("http://", "https://")):
        raise InvalidInput("the url must be http(s)", field="url")
    unknown = [e for e in event_types if e not in EVENT_TYPES]
    if unknown or not event_types:
        raise InvalidInput(f"event types must be among {', '.join(EVENT_TYPES)}", field="event_types")
    subscription = WebhookSubscription.objects.create(
        url=url,
        graph=graph,
        event_types=list(dict.fromkeys(event_types)),
        secret=secret_check(secret) if secret else secret_generate(),
        created_by=actor,
    )
    audit_record(
        actor=actor,
        actor_label=None if actor else "manage.py",
        action="webhook.subscription_created",
        subject_type="subscription",
        subject_id=subscription.pk,
        graph="" if graph == "*" else graph,
        details={"url": url, "graph": graph, "event_types": subscription.event_types},
    )
    return subscription


def subscriptions_visible(user: Any) -> Any:
    if not (permissions.can(user, "runtime.retry_thread") or permissions.can(user, "approvals.view_audit")):
        return WebhookSubscription.objects.none()
    visible = permissions.graphs_visible(user)
    qs = WebhookSubscription.objects.all()
    return qs if visible is None else qs.filter(graph__in=visible)


def deliveries_visible(user: Any) -> Any:
    return OutboundDelivery.objects.filter(subscription__in=subscriptions_visible(user))


# --- events → outbox rows ----------------------------------------------------------------------


def event_emit(event_type: str, *, graph: str, data: dict[str, Any]) -> list[OutboundDelivery]:
    """Queue ``event_type`` for every matching subscription; call inside the change's transaction."""
    subscriptions = [
        s
        for s in WebhookSubscription.objects.filter(active=True, graph__in=[graph, "*"])
        if event_type in (s.event_types or [])
    ]
    if not subscriptions:
        return []
    event_id = f"evt_{pysecrets.token_hex(12)}"
    now = timezone.now()
    payload = {"type": event_type, "timestamp": now.isoformat(), "data": {"graph": graph, **data}}
    rows = [
        OutboundDelivery.objects.create(
            subscription=s, event_id=event_id, event_type=event_type, graph=graph, payload=payload, next_attempt_at=now
        )
        for s in subscriptions
    ]
    for row in rows:
        transaction.on_commit(partial(_dispatch, row.pk))
    return rows


def _dispatch(delivery_id: int, countdown: float = 0) -> None:
    from approvals.tasks import deliver_webhook

    try:
        deliver_webhook.apply_async(args=[delivery_id], countdown=countdown)
    except Exception:  # the broker is down: the row stays pending with its next_attempt_at
        log.exception("could not dispatch outbound webhook %s", delivery_id)


@receiver(post_save, sender=ApprovalTask, dispatch_uid="outbound.task_opened")
def on_task_saved(sender: Any, instance: ApprovalTask, created: bool, **kwargs: Any) -> None:
    if not created:
        return
    event_emit(
        "task.opened",
        graph=instance.graph,
        data={
            "task_id": str(instance.id),
            "thread_id": str(instance.thread_id),
            "node": instance.node,
            "title": instance.title,
            "payload_kind": payload_kind(instance.payload, instance.kind),
            "correlation_key": instance.payload.get("correlation_key") if isinstance(instance.payload, dict) else None,
        },
    )


@receiver(post_save, sender=Decision, dispatch_uid="outbound.task_decided")
def on_decision_saved(sender: Any, instance: Decision, created: bool, **kwargs: Any) -> None:
    if not created:
        return
    task = instance.task
    event_emit(
        "task.decided",
        graph=task.graph,
        data={
            "task_id": str(task.id),
            "thread_id": str(task.thread_id),
            "decision_id": str(instance.id),
            "outcome": instance.outcome,
            "reason": instance.reason,
            "actor": instance.actor.get_username(),
        },
    )


@receiver(signals.run_completed, dispatch_uid="outbound.thread_completed")
def on_run_completed(sender: Any, run: Run, values: dict[str, Any], **kwargs: Any) -> None:
    # State values are not sent: they may hold what only some roles may see.
    event_emit(
        "thread.completed",
        graph=run.thread.graph,
        data={"thread_id": str(run.thread_id), "run_id": str(run.id), "status": "completed", "keys": sorted(values)},
    )


@receiver(signals.run_failed, dispatch_uid="outbound.thread_failed")
def on_run_failed(sender: Any, run: Run, error: str, **kwargs: Any) -> None:
    event_emit(
        "thread.failed",
        graph=run.thread.graph,
        data={"thread_id": str(run.thread_id), "run_id": str(run.id), "status": "failed", "error": error[:2000]},
    )


# --- sending ---------------------------------------------------------------------------------


def delivery_attempt(*, delivery_id: int) -> OutboundDelivery | None:
    """One attempt: claim the row, POST it signed, record the result, schedule the next try."""
    with transaction.atomic():
        delivery = (
            OutboundDelivery.objects.select_for_update(skip_locked=True)
            .select_related("subscription")
            .filter(pk=delivery_id, status=OutboundStatus.PENDING)
            .first()
        )
        if delivery is None:
            return None  # delivered, given up, or another worker holds it
        delivery.attempts += 1
        body = json.dumps(delivery.payload, separators=(",", ":")).encode()
        headers = webhook_sign(delivery.subscription.secret, body, msg_id=delivery.event_id)
        code, error = _post(delivery.subscription.url, body, headers)
        delivery.response_code = code
        now = timezone.now()
        if code is not None and 200 <= code < 300:
            delivery.status = OutboundStatus.DELIVERED
            delivery.delivered_at = now
            delivery.last_error = ""
            delivery.next_attempt_at = None
        else:
            delivery.last_error = error or f"HTTP {code}"
            # A manual retry of a delivery that gave up gets exactly one more attempt.
            if delivery.attempts >= MAX_ATTEMPTS:
                delivery.status = OutboundStatus.FAILED
                delivery.next_attempt_at = None
            else:
                delay = backoff_delay(delivery.attempts)
                delivery.next_attempt_at = now + timedelta(seconds=delay)
                transaction.on_commit(lambda: _dispatch(delivery.pk, countdown=delay))
        delivery.save()
    return delivery


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={**headers, "Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 - operator-set URL
            return response.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}: {exc.read(500).decode(errors='replace')}"
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


@transaction.atomic
def delivery_retry(*, actor: Any, delivery_id: int) -> OutboundDelivery:
    """A manual retry: one more attempt now, for a delivery that gave up (operators, admins)."""
    permissions.require(actor, "runtime.retry_thread", "retry webhook deliveries")
    delivery = deliveries_visible(actor).select_for_update().filter(pk=delivery_id).first()
    if delivery is None:
        raise NotFound(f"webhook delivery {delivery_id} not found", field="delivery_id")
    if delivery.status == OutboundStatus.DELIVERED:
        raise Conflict("this delivery already succeeded", field="delivery_id")
    if delivery.status == OutboundStatus.PENDING:
        raise Conflict("this delivery is still being retried automatically", field="delivery_id")
    delivery.status = OutboundStatus.PENDING
    delivery.next_attempt_at = timezone.now()
    delivery.save(update_fields=["status", "next_attempt_at"])
    audit_record(
        actor=actor,
        action="webhook.delivery_retried",
        subject_type="outbound_delivery",
        subject_id=delivery.pk,
        graph=delivery.graph,
        details={"event_id": delivery.event_id, "event_type": delivery.event_type, "attempts": delivery.attempts},
    )
    pk = delivery.pk
    transaction.on_commit(lambda: _dispatch(pk))
    return delivery


def deliveries_due(*, now: Any = None) -> list[int]:
    """Pending deliveries whose next attempt is overdue (their dispatch was lost): for a periodic sweep."""
    now = now or timezone.now()
    grace = now - timedelta(seconds=60)
    return list(
        OutboundDelivery.objects.filter(status=OutboundStatus.PENDING, next_attempt_at__lt=grace).values_list(
            "pk", flat=True
        )[:500]
    )
