"""Outbound webhooks: notify subscribed URLs when a task opens or is decided, or a thread completes or fails.

Events are written as OutboundDelivery rows inside the transaction that makes the
change (an outbox: no event for a change that rolled back, none lost for one that
committed), and a Celery task is dispatched after commit. The sender signs each
attempt per Standard Webhooks (same ``webhook-id`` on every attempt, so receivers
can dedupe) and retries with exponential backoff, a bounded number of times.

Destinations are checked at subscription and again at send time: internal,
private and cloud-metadata addresses are refused unless allowlisted, and the
request goes to the address that was checked (docs/security-audit.md).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import secrets as pysecrets
import socket
import ssl
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import httpx
from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.dispatch import receiver
from django.utils import timezone

from approvals import permissions
from approvals.audit import audit_record
from approvals.errors import Conflict, InvalidInput, NotFound
from approvals.gate_policy import gate_policy
from approvals.inbound.webhooks import secret_check, secret_generate, webhook_sign
from approvals.models import (
    ApprovalTask,
    AuditAction,
    AuditEvent,
    OutboundDelivery,
    OutboundStatus,
    WebhookSubscription,
)
from approvals.payloads import payload_kind
from runtime import signals
from runtime.models import Run
from runtime.registry import graph_names

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
MAX_ATTEMPTS = 6
TIMEOUT_SECONDS = 10.0
# A claimed attempt owns the row this long (the HTTP call runs outside any transaction).
CLAIM_SECONDS = 4 * TIMEOUT_SECONDS + 30
# What the delivery log keeps of a response: the status code and this much of the body, no headers.
RESPONSE_EXCERPT_CHARS = 256
# The Celery task that sends one delivery (approvals.outbound.tasks.deliver_webhook).
DELIVER_WEBHOOK_TASK = "approvals.deliver_webhook"


def _backoff_base() -> float:
    # Seconds before the 2nd attempt; doubles after each failure (base, 2·base, 4·base, …).
    return float(
        getattr(
            settings, "GATEHOUSE_WEBHOOK_BACKOFF_SECONDS", os.environ.get("GATEHOUSE_WEBHOOK_BACKOFF_SECONDS", "10")
        )
    )


def backoff_delay(attempts: int) -> float:
    return _backoff_base() * (2 ** max(attempts - 1, 0))


# --- where webhooks may go ---------------------------------------------------------------------

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance metadata services (AWS/GCP/Azure/OpenStack, ECS task credentials, Alibaba, Azure wire
# server, AWS over IPv6): refused even when an allowlisted network contains them.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "168.63.129.16", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class DestinationRefused(Exception):
    """The URL resolves to an address outbound webhooks may not reach."""


class DestinationUnresolvable(Exception):
    pass


@dataclass(frozen=True)
class OutboundPolicy:
    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = frozenset()


def outbound_policy() -> OutboundPolicy:
    """GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS: CIDRs and host names that may be reached although internal."""
    networks: list[Network] = []
    hosts: set[str] = set()
    for entry in settings.GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            hosts.add(entry.lower().rstrip("."))
    return OutboundPolicy(tuple(networks), frozenset(hosts))


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64), which is where it leads."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_refusal(address: Address, *, host: str, policy: OutboundPolicy) -> str | None:
    """Why ``address`` may not be reached (None: it may)."""
    candidates = [address] + [a for a in [_embedded_ipv4(address)] if a is not None]
    if any(a in METADATA_ADDRESSES for a in candidates):
        return "a cloud metadata address"
    if host in policy.hosts or any(a in n for a in candidates for n in policy.networks):
        return None
    for a in candidates:
        for refused, label in (
            (a.is_loopback, "loopback"),
            (a.is_link_local, "link-local"),
            (a.is_multicast, "multicast"),
            (a.is_unspecified, "unspecified"),
            (isinstance(a, ipaddress.IPv6Address) and a.is_site_local, "site-local"),
            (a.is_private, "private"),
            (a.is_reserved, "reserved"),
            (not a.is_global, "not publicly routable"),
        ):
            if refused:
                return label
    return None


def url_parts(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, or InvalidInput naming ``url``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"the url is not valid: {exc}", field="url") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidInput("the url must be http(s)", field="url")
    if not parts.hostname:
        raise InvalidInput("the url has no host", field="url")
    return parts.scheme, parts.hostname.lower().rstrip("."), port or (443 if parts.scheme == "https" else 80)


def destination_resolve(url: str, *, policy: OutboundPolicy | None = None) -> list[Address]:
    """Every address ``url``'s host resolves to, each one checked; DestinationRefused if any may not be reached.

    Checking every address (not only the first) matters: a name with one public
    and one internal address would otherwise reach the internal one on a retry.
    """
    policy = policy or outbound_policy()
    _, host, port = url_parts(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise DestinationUnresolvable(f"{host} does not resolve: {exc}") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not addresses:
        raise DestinationUnresolvable(f"{host} does not resolve")
    for address in addresses:
        reason = address_refusal(address, host=host, policy=policy)
        if reason is not None:
            raise DestinationRefused(
                f"{host} resolves to {address} ({reason}); outbound webhooks may not reach it "
                "unless GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS allows it"
            )
    return addresses


def destination_check(url: str) -> None:
    """For a subscription being saved: InvalidInput naming ``url`` unless it is a reachable public address."""
    try:
        destination_resolve(url)
    except (DestinationRefused, DestinationUnresolvable) as exc:
        raise InvalidInput(str(exc), field="url") from None


# --- subscriptions -------------------------------------------------------------------------


def subscription_create(
    *, actor: Any, url: str, graph: str = "*", event_types: list[str], secret: str | None = None
) -> WebhookSubscription:
    if actor is not None:
        permissions.require(actor, "runtime.retry_thread", "manage webhooks")
    if graph != "*" and graph not in graph_names():
        raise InvalidInput(f"unknown graph {graph!r}", field="graph")
    if actor is not None:
        if graph != "*" and not permissions.graph_visible(actor, graph):
            raise NotFound(f"graph {graph!r} not found", field="graph")
        if graph == "*" and permissions.graphs_visible(actor) is not None:
            raise InvalidInput("only principals who see every graph may subscribe to all of them", field="graph")
    unknown = [e for e in event_types if e not in EVENT_TYPES]
    if unknown or not event_types:
        raise InvalidInput(f"event types must be among {', '.join(EVENT_TYPES)}", field="event_types")
    checked_secret = secret_check(secret) if secret else secret_generate()
    destination_check(url)  # resolves the host: before the transaction, not while holding it
    with transaction.atomic():
        subscription = WebhookSubscription.objects.create(
            url=url,
            graph=graph,
            event_types=list(dict.fromkeys(event_types)),
            secret=checked_secret,
            created_by=actor,
        )
        audit_record(
            actor=actor,
            actor_label=None if actor else "manage.py",
            action=AuditAction.WEBHOOK_SUBSCRIPTION_CREATED,
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
    # Sent by task name: approvals.outbound.tasks imports this module.
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
    )


def _task_opened(event: AuditEvent) -> None:
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
    event_emit(
        "task.signed",
        graph=instance.graph,
        data={
            **data,
            "meaning": details.get("meaning"),
            "approvals": quorum.get("approvals"),
            "required": quorum.get("required"),
        },
    )
    if instance.action == AuditAction.DECISION_MADE:
        event_emit("task.decided", graph=instance.graph, data=data)


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
    body = json.dumps(delivery.payload, separators=(",", ":")).encode()
    headers = webhook_sign(delivery.subscription.secret, body, msg_id=delivery.event_id)
    result = delivery_send(delivery.subscription.url, body, headers)
    return _delivery_record(delivery, result)


def _delivery_record(claimed: OutboundDelivery, result: SendResult) -> OutboundDelivery:
    with transaction.atomic():
        delivery = OutboundDelivery.objects.select_for_update().get(pk=claimed.pk)
        if delivery.status != OutboundStatus.PENDING or delivery.attempts != claimed.attempts:
            return delivery  # our claim lapsed and another attempt took over: its result counts
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
            if result.refused or delivery.attempts >= MAX_ATTEMPTS:
                delivery.status = OutboundStatus.FAILED
                delivery.next_attempt_at = None
            else:
                delay = backoff_delay(delivery.attempts)
                delivery.next_attempt_at = now + timedelta(seconds=delay)
                pk = delivery.pk
                transaction.on_commit(lambda: _dispatch(pk, countdown=delay))
        delivery.save()
        if result.refused:
            audit_record(
                actor=None,
                actor_label="outbound",
                action=AuditAction.WEBHOOK_DELIVERY_REFUSED,
                subject_type="outbound_delivery",
                subject_id=delivery.pk,
                graph=delivery.graph,
                details={"subscription": delivery.subscription_id, "error": delivery.last_error},
            )
    return delivery


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
