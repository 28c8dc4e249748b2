"""Inbound webhooks: a signed delivery (Standard Webhooks) decides a waiting task as a service principal.

The path of one delivery:
1. verify the signature on the raw bytes with ``standardwebhooks`` (any of the
   endpoint's secrets, so a rotation has no gap; the library's 5-minute tolerance);
2. under a lock on the endpoint, return the recorded outcome if this webhook-id was
   accepted before with the same body, refuse it (409) with another body (deliveries
   of one endpoint are serialised: that makes dedupe and event ordering exact without
   a race window);
3. refuse an event older than the last accepted one for the same correlation key;
4. find the pending gate whose payload carries the correlation key, map the body to
   a decision and call ``services.task_decide`` — the same path as a reviewer.

Every delivery is recorded with the response it got; refused signatures are also
audited as security events.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Max, QuerySet
from django.utils import timezone
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from approvals import permissions, services
from approvals.audit import audit_record, audit_task
from approvals.errors import Conflict, DomainError, InvalidInput, NotFound
from approvals.gate_policy import CORRELATION_KEY_MAX
from approvals.inputs import json_kind, json_loads_strict
from approvals.models import (
    ApprovalTask,
    AuditAction,
    AuditEvent,
    DeliveryStatus,
    GraphAssignment,
    InboundDelivery,
    TaskStatus,
    WebhookEndpoint,
)
from approvals.outbound.signing import secret_check, secret_generate
from approvals.payloads import DecisionRequest
from runtime.registry import UnknownGraph, graph_gates, graph_get, graph_names

SERVICE_ROLE = "service"
DEFAULT_DECISION_MAP: dict[str, Any] = {
    "field": "status",
    "approve": ["verified", "approved"],
    "reject": ["failed", "rejected"],
}


# --- registration ------------------------------------------------------------------------


def _path_check(path: str, field: str, *, required: bool = False) -> None:
    """A dotted path into a delivery's body (``path_get``): names, or list indexes, between single dots, after
    an optional ``$.``. An empty part (``a..b``, ``.``, a trailing dot) matches nothing in any body, so an
    endpoint registered with one refused every delivery."""
    if not path:
        if required:
            raise InvalidInput(f"{field} may not be empty", field=field)
        return
    parts = path.removeprefix("$.").split(".")
    if not all(parts):
        raise InvalidInput(
            f"{field} {path!r} has an empty part: a dotted path such as data.reference or items.0.id", field=field
        )


def _decision_map_check(mapping: dict[str, Any]) -> dict[str, Any]:
    if "field" not in mapping or mapping["field"] == "":
        raise InvalidInput("decision_map needs a 'field' (dotted path to the status)", field="decision_map.field")
    if not isinstance(mapping["field"], str):
        raise InvalidInput(
            f"decision_map.field is a dotted path to the status (a string), not {type(mapping['field']).__name__}",
            field="decision_map.field",
        )
    _path_check(mapping["field"], "decision_map.field")
    for key in ("approve", "reject"):
        values = mapping.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str | int | bool) for v in values):
            raise InvalidInput(f"decision_map.{key} must be a list of values", field=f"decision_map.{key}")
    if not mapping.get("approve") and not mapping.get("reject"):
        raise InvalidInput("decision_map maps no value to a decision", field="decision_map")
    return {
        "field": mapping["field"],
        "approve": list(mapping.get("approve", [])),
        "reject": list(mapping.get("reject", [])),
    }


def endpoint_graph_choices(user: Any) -> list[tuple[str, list[str]]]:
    """The graphs ``user`` may create endpoints for, each with its gates (for the console's form)."""
    if not permissions.can(user, "approvals.manage_webhooks"):
        return []
    return [(name, graph_gates(name)) for name in graph_names() if permissions.graph_visible(user, name)]


def _gates_check(graph: str, gates: Any) -> list[str]:
    if not isinstance(gates, list) or not gates or not all(isinstance(g, str) and g for g in gates):
        raise InvalidInput(
            f"declare the gates this endpoint may decide: a non-empty list of gate names of {graph!r}", field="gates"
        )
    entry = graph_get(graph)
    known = entry.gate_names()
    unknown = [g for g in gates if g not in known]
    if unknown:
        where = f"declared in gatehouse.gates.{graph}" if entry.declared_gates is not None else "its nodes"
        raise InvalidInput(
            f"{', '.join(map(repr, unknown))} {'is not a gate' if len(unknown) == 1 else 'are not gates'} "
            f"of {graph!r} (its gates, {where}: {', '.join(known)})",
            field="gates",
        )
    return sorted(set(gates))


def _manage_require(actor: User | None, graph: str) -> None:
    """``actor`` None is the command line (trusted); otherwise an admin who sees ``graph``.

    An endpoint's secret decides tasks, so handing one out is granting a decision
    right: operators (who may not decide) must not be able to mint one.
    """
    if actor is None:
        return
    permissions.require(actor, "approvals.manage_webhooks", "manage inbound webhook endpoints")
    if not permissions.graph_visible(actor, graph):
        raise NotFound(f"graph {graph!r} not found", field="graph")


def _principal_scope(endpoint: WebhookEndpoint) -> None:
    """The principal may decide exactly the endpoint's gates: one gate-scoped assignment each.

    ``permissions.require_decide`` narrows by these on every surface, so even a token
    issued to ``webhook:<name>`` could decide nothing else.
    """
    GraphAssignment.objects.filter(user=endpoint.principal).exclude(
        graph=endpoint.graph, gate__in=endpoint.gates
    ).delete()
    for gate in endpoint.gates:
        GraphAssignment.objects.get_or_create(user=endpoint.principal, graph=endpoint.graph, gate=gate)


def _fingerprints(secrets: list[str]) -> list[str]:
    # What the audit trail keeps of a secret: enough to tell them apart, nothing to sign with.
    return [hashlib.sha256(s.encode()).hexdigest()[:12] for s in secrets]


def _endpoint_locked(actor: User | None, name: str) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.select_for_update().filter(name=name).first()
    if endpoint is None or (actor is not None and not endpoints_visible(actor).filter(pk=endpoint.pk).exists()):
        raise NotFound(f"webhook endpoint {name!r} not found", field="name")
    _manage_require(actor, endpoint.graph)
    return endpoint


def _endpoint_audit(
    actor: User | None, endpoint: WebhookEndpoint, action: AuditAction, details: dict[str, Any]
) -> None:
    audit_record(
        actor=actor,
        actor_label=None if actor else "manage.py",
        action=action,
        subject_type="webhook",
        subject_id=endpoint.name,
        graph=endpoint.graph,
        details={"principal": endpoint.principal.get_username(), **details},
    )


# An endpoint's name is its URL (/api/webhooks/<name>), its principal's username (webhook:<name>) and
# the audit trail's subject_id (AuditEvent.subject_id, 64 characters): one rule for every surface.
NAME_PATTERN = r"^[-a-zA-Z0-9_]+$"
NAME_MAX_LENGTH = 64
WEBHOOK_ID_MAX = 200  # InboundDelivery.webhook_id's length: a longer id is refused, not cut


def _name_check(name: str) -> str:
    if not name:
        raise InvalidInput("name: give the endpoint a name (it is the URL /api/webhooks/<name>)", field="name")
    if len(name) > NAME_MAX_LENGTH:
        raise InvalidInput(f"name: {len(name)} characters; at most {NAME_MAX_LENGTH}", field="name")
    if not re.fullmatch(NAME_PATTERN, name):
        raise InvalidInput(
            "name: only letters a-z and A-Z, digits, '-' and '_' (it is the URL /api/webhooks/<name>)", field="name"
        )
    return name


@transaction.atomic
def webhook_endpoint_create(
    *,
    actor: User | None,
    name: str,
    graph: str,
    gates: list[str],
    secrets: list[str] | None = None,
    correlation_path: str = "correlation_key",
    decision_map: dict[str, Any] | None = None,
    reason_path: str = "reason",
    timestamp_path: str = "",
) -> WebhookEndpoint:
    """Register an endpoint and its service principal ``webhook:<name>`` (role "service"), which may
    decide only ``gates`` of ``graph``. Admins (or the command line) only."""
    _manage_require(actor, graph)
    _name_check(name)  # before anything is written
    try:
        graph_get(graph)
    except UnknownGraph:
        raise InvalidInput(f"unknown graph {graph!r} (registered: {', '.join(graph_names())})", field="graph") from None
    declared = _gates_check(graph, gates)
    if WebhookEndpoint.objects.filter(name=name).exists():
        raise InvalidInput(f"a webhook endpoint named {name!r} exists", field="name")
    _path_check(correlation_path, "correlation_path", required=True)
    _path_check(reason_path, "reason_path")
    _path_check(timestamp_path, "timestamp_path")
    chosen = [secret_check(s, f"secrets[{i}]") for i, s in enumerate(secrets)] if secrets else [secret_generate()]
    mapping = _decision_map_check(decision_map or DEFAULT_DECISION_MAP)
    username = f"webhook:{name}"
    principal, _ = User.objects.get_or_create(username=username)
    principal.set_unusable_password()
    principal.is_active = True
    principal.save()
    group, _ = Group.objects.get_or_create(name=SERVICE_ROLE)
    principal.groups.add(group)
    endpoint = WebhookEndpoint.objects.create(
        name=name,
        graph=graph,
        gates=declared,
        secrets=chosen,
        correlation_path=correlation_path,
        decision_map=mapping,
        reason_path=reason_path,
        timestamp_path=timestamp_path,
        principal=principal,
    )
    _principal_scope(endpoint)
    _endpoint_audit(
        actor,
        endpoint,
        AuditAction.WEBHOOK_ENDPOINT_CREATED,
        {
            "before": None,
            "after": {"gates": declared, "secrets": _fingerprints(chosen), "active": True},
            "correlation_path": correlation_path,
            "decision_map": endpoint.decision_map,
        },
    )
    return endpoint


@transaction.atomic
def webhook_endpoint_rotate(
    *, actor: User | None, name: str, keep_previous: bool = True
) -> tuple[WebhookEndpoint, str]:
    """A new signing secret, returned once. With ``keep_previous`` the newest old secret keeps
    verifying (so the sender can switch without a gap); every older one stops now."""
    endpoint = _endpoint_locked(actor, name)
    if not endpoint.active:
        raise Conflict(f"webhook endpoint {name!r} is deleted; create a new one", field="name")
    before = list(endpoint.secrets)
    secret = secret_generate()
    endpoint.secrets = [secret, *before[:1]] if keep_previous else [secret]
    endpoint.save(update_fields=["secrets"])
    _endpoint_audit(
        actor,
        endpoint,
        AuditAction.WEBHOOK_ENDPOINT_ROTATED,
        {"before": {"secrets": _fingerprints(before)}, "after": {"secrets": _fingerprints(endpoint.secrets)}},
    )
    return endpoint, secret


@transaction.atomic
def webhook_endpoint_gates_set(*, actor: User | None, name: str, gates: list[str]) -> WebhookEndpoint:
    """Change which gates the endpoint (and its principal) may decide."""
    endpoint = _endpoint_locked(actor, name)
    if not endpoint.active:
        raise Conflict(f"webhook endpoint {name!r} is deleted; create a new one", field="name")
    declared = _gates_check(endpoint.graph, gates)
    before = list(endpoint.gates)
    endpoint.gates = declared
    endpoint.save(update_fields=["gates"])
    _principal_scope(endpoint)
    _endpoint_audit(
        actor,
        endpoint,
        AuditAction.WEBHOOK_ENDPOINT_GATES_CHANGED,
        {"before": {"gates": before}, "after": {"gates": declared}},
    )
    return endpoint


@transaction.atomic
def webhook_endpoint_delete(*, actor: User | None, name: str) -> WebhookEndpoint:
    """Retire the endpoint: its secrets are destroyed, its principal disabled and stripped of every
    assignment. The row and its delivery log stay as evidence of what it decided."""
    endpoint = _endpoint_locked(actor, name)
    before = {"gates": list(endpoint.gates), "secrets": _fingerprints(endpoint.secrets), "active": endpoint.active}
    endpoint.secrets, endpoint.gates, endpoint.active = [], [], False
    endpoint.save(update_fields=["secrets", "gates", "active"])
    GraphAssignment.objects.filter(user=endpoint.principal).delete()
    User.objects.filter(pk=endpoint.principal_id).update(is_active=False)
    _endpoint_audit(
        actor,
        endpoint,
        AuditAction.WEBHOOK_ENDPOINT_DELETED,
        {"before": before, "after": {"gates": [], "secrets": [], "active": False}},
    )
    return endpoint


def endpoints_visible(user: Any) -> QuerySet[WebhookEndpoint]:
    if not (permissions.can(user, "runtime.retry_thread") or permissions.can(user, "approvals.view_audit")):
        return WebhookEndpoint.objects.none()
    visible = permissions.graphs_visible(user)
    qs = WebhookEndpoint.objects.all()
    return qs if visible is None else qs.filter(graph__in=visible)


def endpoint_get_for(user: Any, name: str) -> WebhookEndpoint:
    """Operators, admins and auditors (of the endpoint's graph) see an endpoint and its deliveries."""
    endpoint = endpoints_visible(user).filter(name=name).first()
    if endpoint is None:
        raise NotFound(f"webhook endpoint {name!r} not found", field="name")
    return endpoint


# --- receiving ---------------------------------------------------------------------------


@dataclass
class CallbackOutcome:
    """What the receiver answers a sender (status and JSON body), and the delivery row that records it."""

    http_status: int
    body: dict[str, Any]
    delivery: InboundDelivery | None = None

    def content(self) -> bytes:
        """The response's bytes, keys sorted: a replay answers the copy read back from jsonb, which
        reorders keys, and must be the first answer byte for byte (docs/webhooks.md)."""
        return json.dumps(self.body, sort_keys=True).encode()


def _error(status: int, code: str, message: str, field_name: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field_name}, **extra}


def path_get(body: Any, path: str) -> Any:
    """``a.b.0.c`` into nested objects and lists; a leading ``$.`` is allowed (JSONPath-ish)."""
    if path.startswith("$."):
        path = path[2:]
    value = body
    for part in path.split(".") if path else []:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


# Standard Webhooks' tolerance for the webhook-timestamp header (the library's own).
_TIMESTAMP_TOLERANCE_SECONDS = 5 * 60


def _verify_text(secret: str, raw: bytes, headers: dict[str, str]) -> None:
    Webhook(secret).verify(raw, headers, json_parse=False)


def _verify_bytes(secret: str, raw: bytes, headers: dict[str, str]) -> None:
    """Standard Webhooks' verification on the body's bytes, for a body that is not UTF-8: the library
    decodes the body before signing it again, so such a body, correctly signed, was refused as a bad
    signature (and audited as a security event) instead of being a sender's malformed body."""
    msg_id, stamp, signatures = (headers.get(h) for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not (msg_id and stamp and signatures):
        raise WebhookVerificationError("Missing required headers")
    try:
        sent_at = math.floor(float(stamp))
    except (ValueError, OverflowError):
        raise WebhookVerificationError("Invalid Signature Headers") from None
    if sent_at < time.time() - _TIMESTAMP_TOLERANCE_SECONDS:
        raise WebhookVerificationError("Message timestamp too old")
    if sent_at > time.time() + _TIMESTAMP_TOLERANCE_SECONDS:
        raise WebhookVerificationError("Message timestamp too new")
    key = Webhook(secret)._whsecret  # the decoded secret, as the library signs with it
    expected = hmac.new(key, f"{msg_id}.{sent_at}.".encode() + raw, hashlib.sha256).digest()
    for versioned in signatures.split(" "):
        version, signature = versioned.split(",")  # a malformed header raises ValueError, as in the library
        if version == "v1" and hmac.compare_digest(expected, base64.b64decode(signature)):
            return
    raise WebhookVerificationError("No matching signature found")


def _signature_check(endpoint: WebhookEndpoint, raw: bytes, headers: dict[str, str]) -> str | None:
    """None when one of the endpoint's secrets verifies the delivery; else why not. Verified on the bytes
    as sent: a body that is not UTF-8 is the sender's mistake (400 naming ``body``), not a forgery."""
    try:
        raw.decode()
        verify = _verify_text
    except UnicodeDecodeError:
        verify = _verify_bytes
    last = "no secrets configured"
    for secret in endpoint.secrets:
        try:
            verify(secret, raw, headers)
            return None
        except WebhookVerificationError as exc:
            last = str(exc)
            if "timestamp" in last.lower() or "headers" in last.lower():
                return last  # the same for every secret
        except Exception as exc:  # noqa: BLE001 - a malformed signature header (e.g. no comma) raises ValueError
            last = f"malformed signature header ({type(exc).__name__})"
    return last


def _event_time(endpoint: WebhookEndpoint, body: Any, headers: dict[str, str]) -> datetime | None:
    raw: Any = path_get(body, endpoint.timestamp_path) if endpoint.timestamp_path else None
    if raw is None:
        raw = headers.get("webhook-timestamp")
    try:
        if isinstance(raw, int | float) or (isinstance(raw, str) and raw.replace(".", "", 1).isdigit()):
            return datetime.fromtimestamp(float(raw), tz=UTC)
        if isinstance(raw, str):
            parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        return None
    return None


def delivery_receive(*, name: str, raw: bytes, headers: dict[str, str]) -> CallbackOutcome:
    headers = {k.lower(): v for k, v in headers.items()}
    sent_id = headers.get("webhook-id", "")
    webhook_id = sent_id[:WEBHOOK_ID_MAX]  # what a refusal of a longer one records
    digest = hashlib.sha256(raw).hexdigest()
    endpoint = WebhookEndpoint.objects.filter(name=name).first()
    if endpoint is None:
        return CallbackOutcome(404, _error(404, "not_found", f"no webhook endpoint named {name!r}", "name"))

    problem = _signature_check(endpoint, raw, headers)
    if problem is not None:
        return _refuse_signature(endpoint, webhook_id, digest, problem)
    if len(sent_id) > WEBHOOK_ID_MAX:
        # Cut to fit, two events whose ids share their first characters were one id: the second was dropped
        # as a repeat of the first, or refused as its id reused.
        with transaction.atomic():
            return _delivery_record(
                {"endpoint": endpoint, "webhook_id": webhook_id, "verified": True, "body_digest": digest},
                400,
                _error(
                    400,
                    "webhook_id_too_long",
                    f"webhook-id has {len(sent_id)} characters; at most {WEBHOOK_ID_MAX} tell one event from another",
                    "webhook-id",
                ),
                f"webhook-id of {len(sent_id)} characters; nothing done",
            )

    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        # Only an accepted delivery claims its id. A refused one (no task waits yet, the thread busy) is
        # what the sender retries, with the same id: replaying the refusal made every retry fail.
        first = InboundDelivery.objects.filter(
            endpoint=endpoint, webhook_id=webhook_id, verified=True, status=DeliveryStatus.ACCEPTED
        ).first()
        if first is not None and first.body_digest != digest:
            # Another event under a used id: replaying the first answer told the sender it had been acted on.
            return _delivery_record(
                {"endpoint": endpoint, "webhook_id": webhook_id, "verified": True, "body_digest": digest},
                409,
                _error(
                    409,
                    "delivery_id_reused",
                    f"webhook-id {webhook_id!r} was used for another body (delivery {first.pk}): "
                    "a new event needs a webhook-id of its own, and a retry the same bytes",
                    "webhook-id",
                ),
                f"webhook-id of delivery {first.pk} with another body; nothing done",
            )
        if first is not None:
            InboundDelivery.objects.create(
                endpoint=endpoint,
                webhook_id=webhook_id,
                verified=True,
                status=DeliveryStatus.DUPLICATE,
                http_status=first.http_status,
                reason=f"repeat of delivery {first.pk}; first outcome returned, nothing done",
                body_digest=digest,
                correlation_key=first.correlation_key,
                task=first.task,
                decision=first.decision,
                response=first.response,
            )
            return CallbackOutcome(first.http_status, first.response, first)
        return _process(endpoint, webhook_id, raw, digest, headers)


# An unsigned request costs its sender nothing: each refusal is a delivery row, but the hash-chained trail (never
# pruned, its chain locked per append) records an endpoint's refusals once per this many seconds, counting those
# since (an outside tester wrote 20 audit rows a second with junk signatures, anonymously).
REFUSALS_AUDITED_EVERY_SECONDS = 60


def _refuse_signature(endpoint: WebhookEndpoint, webhook_id: str, digest: str, problem: str) -> CallbackOutcome:
    body = _error(401, "bad_signature", f"webhook signature refused: {problem}", "webhook-signature")
    with transaction.atomic():
        delivery = InboundDelivery.objects.create(
            endpoint=endpoint,
            webhook_id=webhook_id,
            verified=False,
            status=DeliveryStatus.REFUSED,
            http_status=401,
            reason=problem,
            body_digest=digest,
            response=body,
        )
        last = (
            AuditEvent.objects.filter(
                action=AuditAction.WEBHOOK_REFUSED, subject_type="webhook", subject_id=endpoint.name
            )
            .order_by("-id")
            .values_list("at", flat=True)
            .first()
        )
        if last is not None and (delivery.received_at - last).total_seconds() < REFUSALS_AUDITED_EVERY_SECONDS:
            return CallbackOutcome(401, body, delivery)  # in the delivery log; the next audited refusal counts it
        since = InboundDelivery.objects.filter(endpoint=endpoint, verified=False, status=DeliveryStatus.REFUSED)
        unaudited = since.filter(received_at__gt=last, pk__lt=delivery.pk).count() if last is not None else 0
        audit_record(
            actor=None,
            actor_label=f"webhook:{endpoint.name}",
            action=AuditAction.WEBHOOK_REFUSED,
            subject_type="webhook",
            subject_id=endpoint.name,
            graph=endpoint.graph,
            details={
                "delivery": delivery.pk,
                "webhook_id": webhook_id,
                "reason": problem,
                "body_sha256": digest,
                # Refused since the last audited refusal and not audited one by one (the delivery log has each).
                "refused_before_unaudited": unaudited,
            },
        )
    return CallbackOutcome(401, body, delivery)


def _delivery_record(
    record: dict[str, Any], status: int, body: dict[str, Any], reason: str, accepted: bool = False, **fields: Any
) -> CallbackOutcome:
    """Record a verified delivery and the answer it gets, which names the delivery."""
    delivery = InboundDelivery.objects.create(
        **record,
        **fields,
        status=DeliveryStatus.ACCEPTED if accepted else DeliveryStatus.REFUSED,
        http_status=status,
        reason=reason,
        response=body,
    )
    body = {**body, "delivery": delivery.pk}
    InboundDelivery.objects.filter(pk=delivery.pk).update(response=body)
    delivery.response = body
    return CallbackOutcome(status, body, delivery)


def _correlation_key_problem(key: Any, path: str) -> str | None:
    """Why ``key`` (found at ``path``) can name no task, or None. Gates index string keys of 1 to
    ``CORRELATION_KEY_MAX`` characters (``GatePolicy.correlation_key_indexed``): 5 was looked up as '5',
    and a 100,000-character key was a 404 echoing all of it."""
    if key is None:
        return f"no correlation key at {path!r}"
    if not isinstance(key, str):
        return f"the correlation key at {path!r} must be a string, not {json_kind(key)}"
    if not key:
        return f"the correlation key at {path!r} is empty"
    if len(key) > CORRELATION_KEY_MAX:
        return f"the correlation key at {path!r} is {len(key)} characters; at most {CORRELATION_KEY_MAX}"
    return None


def _process(
    endpoint: WebhookEndpoint, webhook_id: str, raw: bytes, digest: str, headers: dict[str, str]
) -> CallbackOutcome:
    record: dict[str, Any] = {"endpoint": endpoint, "webhook_id": webhook_id, "verified": True, "body_digest": digest}

    def done(status: int, body: dict[str, Any], reason: str, accepted: bool = False, **fields: Any) -> CallbackOutcome:
        return _delivery_record(record, status, body, reason, accepted, **fields)

    def refuse(status: int, code: str, message: str, field_name: str | None = None, **fields: Any) -> CallbackOutcome:
        return done(status, _error(status, code, message, field_name), message, **fields)

    if not endpoint.active:
        return refuse(404, "not_found", f"webhook endpoint {endpoint.name!r} is disabled", "name")
    try:
        raw.decode()
    except UnicodeDecodeError as exc:
        return refuse(400, "bad_request", f"the body is not UTF-8 JSON (byte {exc.start})", "body")
    try:
        body = json_loads_strict(raw)
    except DomainError as exc:  # not JSON (400), or NUL bytes, non-finite numbers, too deep (422)
        return refuse(exc.status, exc.code, exc.message, exc.field)
    if not isinstance(body, dict):
        return refuse(422, "invalid", "the body must be a JSON object", "body")

    key = path_get(body, endpoint.correlation_path)
    problem = _correlation_key_problem(key, endpoint.correlation_path)
    if problem is not None:
        return refuse(422, "invalid", problem, endpoint.correlation_path)
    event_at = _event_time(endpoint, body, headers)
    record.update(correlation_key=key, event_at=event_at)

    mapping = endpoint.decision_map or DEFAULT_DECISION_MAP
    status_value = path_get(body, mapping["field"])
    outcome = next((o for o in ("approve", "reject") if status_value in (mapping.get(o) or [])), None)

    latest = InboundDelivery.objects.filter(
        endpoint=endpoint, correlation_key=key, status=DeliveryStatus.ACCEPTED, verified=True
    ).aggregate(latest=Max("event_at"))["latest"]
    if event_at is not None and latest is not None and event_at < latest:
        return refuse(
            409,
            "out_of_order",
            f"event at {event_at.isoformat()} is older than the last accepted event for {key!r} "
            f"({latest.isoformat()}); ignored so the thread never moves backwards",
            "webhook-timestamp",
        )

    # The indexed copy of each gate's key (GatePolicy.correlation_key_indexed), which a key checked above can be.
    pending = list(ApprovalTask.objects.filter(status=TaskStatus.PENDING, correlation_key=key))
    mine = [t for t in pending if t.graph == endpoint.graph]
    if not mine:
        if pending:
            return refuse(
                409,
                "wrong_graph",
                f"correlation key {key!r} belongs to a task of another graph; this endpoint serves {endpoint.graph!r}",
                endpoint.correlation_path,
            )
        earlier = ApprovalTask.objects.filter(graph=endpoint.graph, correlation_key=key).order_by("-created_at").first()
        if earlier is not None:
            return refuse(
                409,
                "already_decided",
                f"the task for {key!r} is {earlier.status} and can no longer be decided",
                endpoint.correlation_path,
                task=earlier,
            )
        return refuse(404, "unknown_correlation", f"no task waits for {key!r}", endpoint.correlation_path)
    if len(mine) > 1:
        return refuse(409, "ambiguous", f"{len(mine)} pending tasks carry {key!r}", endpoint.correlation_path)
    task = mine[0]
    if task.node not in endpoint.gates:
        # Separation of duties: the endpoint was granted some gates, not the graph. Refused,
        # logged on the delivery, and audited: a sender aiming at another gate is a signal.
        message = (
            f"this endpoint may decide the gates {', '.join(endpoint.gates) or '(none)'}; "
            f"the task for {key!r} waits at {task.node!r}"
        )
        refused = refuse(403, "gate_not_allowed", message, endpoint.correlation_path, task=task)
        audit_task(
            task=task,
            actor=endpoint.principal,
            action=AuditAction.WEBHOOK_GATE_REFUSED,
            details={
                "endpoint": endpoint.name,
                "delivery": refused.delivery.pk if refused.delivery else None,
                "webhook_id": webhook_id,
                "gate": task.node,
                "allowed": list(endpoint.gates),
            },
        )
        return refused

    if outcome is None:
        # A non-final status ("processing"): recorded and acknowledged; it still orders later events.
        return done(
            202,
            {"status": "acknowledged", "task_id": str(task.id), "decision": None},
            f"{mapping['field']}={status_value!r} maps to no decision",
            accepted=True,
            task=task,
        )
    reason_value = path_get(body, endpoint.reason_path) if endpoint.reason_path else None
    reason = str(reason_value) if reason_value not in (None, "") else f"{mapping['field']}={status_value}"
    request = DecisionRequest(outcome=outcome, reason=f"[webhook {endpoint.name}] {reason}"[:2000])
    try:
        signer = _signature_signer()
        decision = services.task_decide(actor=endpoint.principal, task_id=task.id, request=request, signer=signer)
    except DomainError as exc:
        return done(exc.status, _error(exc.status, exc.code, exc.message, exc.field), exc.message, task=task)
    return done(
        202,
        {"status": "accepted", "task_id": str(task.id), "decision_id": str(decision.id), "decision": outcome},
        f"{mapping['field']}={status_value!r} → {outcome}",
        accepted=True,
        task=task,
        decision=decision,
        outcome=outcome,
    )


def _signature_signer() -> services.Signer:
    # The verified signature is this principal's authentication, made just now; it has no password
    # to re-enter.
    return services.Signer(authenticated_at=timezone.now())


def deliveries_for(*, user: Any, name: str, limit: int = 100) -> list[InboundDelivery]:
    endpoint = endpoint_get_for(user, name)
    return list(endpoint.deliveries.order_by("-received_at", "-id")[:limit])
