"""Sending outbound webhooks: one signed attempt at a time, retried with backoff a bounded number of times.

The sender signs each attempt per Standard Webhooks (same ``webhook-id`` on every
attempt, so receivers can dedupe) and POSTs it to the address that was checked
(``approvals.outbound.destinations``); a failure is retried with exponential
backoff up to ``MAX_ATTEMPTS``, and an operator may retry one that gave up.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from approvals import permissions
from approvals.audit import audit_record
from approvals.errors import Conflict, InvalidInput, NotFound
from approvals.models import AuditAction, OutboundDelivery, OutboundStatus, WebhookSubscription
from approvals.outbound import outbox
from approvals.outbound.destinations import DestinationRefused, DestinationUnresolvable, destination_resolve
from approvals.outbound.signing import webhook_sign
from approvals.outbound.subscriptions import deliveries_stop, deliveries_visible

MAX_ATTEMPTS = 6
TIMEOUT_SECONDS = 10.0
# A claimed attempt owns the row this long (the HTTP call runs outside any transaction).
CLAIM_SECONDS = 4 * TIMEOUT_SECONDS + 30
# What the delivery log keeps of a response: the status code and this much of the body, no headers.
RESPONSE_EXCERPT_CHARS = 256


def _backoff_base() -> float:
    # Seconds before the 2nd attempt; doubles after each failure (base, 2·base, 4·base, …).
    return float(settings.GATEHOUSE_WEBHOOK_BACKOFF_SECONDS)


def backoff_delay(attempts: int) -> float:
    return _backoff_base() * 2.0 ** max(attempts - 1, 0)


def delivery_claim(*, delivery_id: int) -> OutboundDelivery | None:
    """Take one attempt of a due delivery: a conditional UPDATE, so one worker wins and no lock is kept.

    ``next_attempt_at`` becomes the claim's expiry: a duplicate dispatch finds
    the row not due, and if this worker dies the sweeper sends it again later.
    """
    now = timezone.now()
    # Celery may run a countdown a moment early on another machine's clock.
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now + timedelta(seconds=2))
    won = OutboundDelivery.objects.filter(due, pk=delivery_id, status=OutboundStatus.PENDING).update(
        attempts=F("attempts") + 1, next_attempt_at=now + timedelta(seconds=CLAIM_SECONDS)
    )
    if not won:
        return None  # delivered, given up, not due yet, or another worker holds it
    return OutboundDelivery.objects.select_related("subscription").get(pk=delivery_id)


@dataclass(frozen=True)
class SendResult:
    code: int | None = None
    error: str = ""
    refused: bool = False  # by the destination policy: nothing was sent


def delivery_attempt(*, delivery_id: int) -> OutboundDelivery | None:
    """One attempt: claim the row, POST it signed outside any transaction, record the result."""
    delivery = delivery_claim(delivery_id=delivery_id)
    if delivery is None:
        return None
    if delivery.subscription.deactivated_at is not None:
        # Queued by a transaction that read the subscription before its deactivation committed: the
        # deactivation could not give it up (it was not committed yet), so it is given up here, unsent,
        # and the attempt this claim counted is taken back: none was made.
        with transaction.atomic():
            deliveries_stop(delivery.subscription_id)
            OutboundDelivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts).update(
                attempts=F("attempts") - 1
            )
        delivery.refresh_from_db()
        return delivery
    body = json.dumps(delivery.payload, separators=(",", ":")).encode()
    headers = webhook_sign(delivery.subscription.secret, body, msg_id=delivery.event_id)
    result = delivery_send(delivery.subscription.url, body, headers)
    return _delivery_record(delivery, result)


def _delivery_record(claimed: OutboundDelivery, result: SendResult) -> OutboundDelivery:
    with transaction.atomic():
        delivery = OutboundDelivery.objects.select_for_update().get(pk=claimed.pk)
        if delivery.attempts != claimed.attempts:
            return delivery  # our claim lapsed and another attempt took over: its result counts
        # Given up while this attempt was under way, by its subscription's deactivation: this attempt's
        # outcome is still what the log must say, and nothing is retried.
        stopped = delivery.status != OutboundStatus.PENDING
        if stopped and not _deactivated(delivery.subscription_id):
            return delivery
        delivery.response_code = result.code
        now = timezone.now()
        if result.code is not None and 200 <= result.code < 300:
            delivery.status = OutboundStatus.DELIVERED
            delivery.delivered_at = now
            delivery.last_error = ""
            delivery.next_attempt_at = None
        else:
            delivery.last_error = result.error or f"HTTP {result.code}"
            # A manual retry of a delivery that gave up gets exactly one more attempt;
            # a refused destination is not retried (a manual retry checks it again).
            if stopped or result.refused or delivery.attempts >= MAX_ATTEMPTS:
                delivery.status = OutboundStatus.FAILED
                delivery.next_attempt_at = None
            else:
                delay = backoff_delay(delivery.attempts)
                delivery.next_attempt_at = now + timedelta(seconds=delay)
                pk = delivery.pk
                transaction.on_commit(lambda: outbox.delivery_dispatch(delivery_id=pk, countdown=delay))
        delivery.save()
        if result.refused:
            _outcome_audit(delivery, AuditAction.WEBHOOK_DELIVERY_REFUSED)
        elif delivery.status == OutboundStatus.DELIVERED:
            _outcome_audit(delivery, AuditAction.WEBHOOK_DELIVERED, url=claimed.subscription.url)
        elif delivery.status == OutboundStatus.FAILED:
            _outcome_audit(delivery, AuditAction.WEBHOOK_DELIVERY_FAILED, url=claimed.subscription.url)
    return delivery


def _outcome_audit(delivery: OutboundDelivery, action: AuditAction, **details: Any) -> None:
    """A delivery's final outcome, on its thread's trail: "delivered to X at T, HTTP 200" is provable.

    One event per delivery, not per attempt (a retry that will be retried records nothing), written by
    the worker that sent it, in the transaction that records the outcome: never on a decision's path.
    """
    audit_record(
        actor=None,
        actor_label="outbound",
        action=action,
        subject_type="outbound_delivery",
        subject_id=delivery.pk,
        thread_id=delivery.thread_id,
        graph=delivery.graph,
        details={
            "subscription": delivery.subscription_id,
            "event_id": delivery.event_id,
            "event_type": delivery.event_type,
            "audit_event": delivery.audit_event_id,
            "attempts": delivery.attempts,
            "response_code": delivery.response_code,
            **({"error": delivery.last_error} if delivery.last_error else {}),
            **details,
        },
    )


def _deactivated(subscription_id: int) -> bool:
    return WebhookSubscription.objects.filter(pk=subscription_id, deactivated_at__isnull=False).exists()


def _excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")[:RESPONSE_EXCERPT_CHARS]
    return "".join(c if c.isprintable() else " " for c in text).strip()


def delivery_send(url: str, body: bytes, headers: dict[str, str]) -> SendResult:
    """POST to the address that was checked, never to a second lookup of the name (DNS rebinding).

    The URL's host is replaced by the checked IP; the Host header and TLS SNI
    (and certificate check) keep the name. Redirects are not followed, no
    proxy from the environment is used, and only a bounded excerpt of the
    response is kept.
    """
    try:
        addresses = destination_resolve(url)
    except DestinationRefused as exc:
        return SendResult(error=f"refused: {exc}", refused=True)
    except (DestinationUnresolvable, InvalidInput) as exc:
        return SendResult(error=str(exc)[:RESPONSE_EXCERPT_CHARS])
    target = httpx.URL(url)
    host = target.host
    pinned = target.copy_with(host=str(addresses[0]))
    extensions = {"sni_hostname": host} if target.scheme == "https" else {}
    request_headers = {**headers, "Content-Type": "application/json", "Host": target.netloc.decode("ascii")}
    try:
        with (
            # trust_env=False: no proxy from the environment (it would resolve the name itself); the
            # system's CA store (as before, honouring SSL_CERT_FILE) rather than httpx's bundled one.
            httpx.Client(
                follow_redirects=False, trust_env=False, timeout=TIMEOUT_SECONDS, verify=ssl.create_default_context()
            ) as client,
            client.stream("POST", pinned, content=body, headers=request_headers, extensions=extensions) as response,
        ):
            raw = b""
            for chunk in response.iter_raw():  # raw: a compressed body is not inflated
                raw += chunk
                if len(raw) >= RESPONSE_EXCERPT_CHARS * 4:
                    break
            code = response.status_code
    except (httpx.HTTPError, OSError) as exc:
        return SendResult(error=f"{type(exc).__name__}: {_excerpt(str(exc).encode())}")
    if 200 <= code < 300:
        return SendResult(code=code)
    note = " (redirects are not followed)" if 300 <= code < 400 else ""
    excerpt = _excerpt(raw)
    return SendResult(code=code, error=f"HTTP {code}{note}" + (f": {excerpt}" if excerpt else ""))


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
    if _deactivated(delivery.subscription_id):
        raise Conflict("its subscription was deactivated: nothing is sent to it any more", field="delivery_id")
    delivery.status = OutboundStatus.PENDING
    delivery.next_attempt_at = timezone.now()
    delivery.save(update_fields=["status", "next_attempt_at"])
    audit_record(
        actor=actor,
        action=AuditAction.WEBHOOK_DELIVERY_RETRIED,
        subject_type="outbound_delivery",
        subject_id=delivery.pk,
        graph=delivery.graph,
        details={"event_id": delivery.event_id, "event_type": delivery.event_type, "attempts": delivery.attempts},
    )
    pk = delivery.pk
    transaction.on_commit(lambda: outbox.delivery_dispatch(delivery_id=pk))
    return delivery


def deliveries_due(*, now: Any = None) -> list[int]:
    """Pending deliveries whose next attempt is overdue (their dispatch was lost): for a periodic sweep.

    Each one taken is marked due as of now, so the sweeps that follow leave it alone for the same
    grace: when the queue is backed up, a delivery already re-sent is not re-sent again every sweep
    (duplicates that pile up behind the backlog and keep it overdue). Its attempt still finds it due.
    """
    now = now or timezone.now()
    grace = now - timedelta(seconds=60)
    overdue = OutboundDelivery.objects.filter(status=OutboundStatus.PENDING, next_attempt_at__lt=grace)
    with transaction.atomic():
        oldest_first = overdue.order_by("next_attempt_at").select_for_update(skip_locked=True)
        due = list(oldest_first.values_list("pk", flat=True)[:500])
        OutboundDelivery.objects.filter(pk__in=due).update(next_attempt_at=now)
    return due
