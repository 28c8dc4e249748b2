"""Inbound webhook verification (approvals/inbound/webhooks.py), as a forger or a replaying attacker would try it.

A delivery decides a task as the endpoint's service principal, so each guard is a way in if it fails: a
signature by another key, a body changed after signing, a delivery replayed outside the time window or under the
same webhook-id, an old event overtaking a newer one, a principal deciding gates it was never given.

In-process (one transaction per test, rolled back), calling ``delivery_receive`` as the API view does: written
against the surviving mutants of ``approvals/inbound/webhooks.py`` (docs/mutation-testing.md).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from approvals import permissions
from approvals.errors import InvalidInput
from approvals.inbound.webhooks import (
    _event_time,
    delivery_receive,
    webhook_endpoint_create,
    webhook_endpoint_delete,
    webhook_endpoint_gates_set,
    webhook_endpoint_rotate,
)
from approvals.models import (
    ApprovalTask,
    AuditAction,
    AuditEvent,
    Decision,
    DeliveryStatus,
    GraphAssignment,
    InboundDelivery,
    TaskStatus,
)
from approvals.outbound.signing import SECRET_PREFIX, secret_check, secret_generate, webhook_sign
from tests.factories import loan_gate, task_make

pytestmark = pytest.mark.django_db

LOAN = "loan_approval"


def endpoint_make(**options: Any):
    name = f"guard-{uuid.uuid4().hex[:8]}"
    return webhook_endpoint_create(actor=None, name=name, graph=LOAN, gates=["human_review"], **options)


def waiting_task(key: str | None = None, *, graph: str = LOAN, node: str = "human_review") -> ApprovalTask:
    return task_make(graph=graph, node=node, payload={**loan_gate(), "correlation_key": key or uuid.uuid4().hex})


def send(endpoint, body: Any, *, secret: str | None = None, at: datetime | None = None, msg_id: str | None = None):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = webhook_sign(secret or endpoint.secrets[0], raw, msg_id=msg_id, at=at)
    return delivery_receive(name=endpoint.name, raw=raw, headers=headers)


def decided(task: ApprovalTask) -> bool:
    task.refresh_from_db()
    return task.status == TaskStatus.DECIDED


# --- secrets ---------------------------------------------------------------------------------------


def test_a_generated_secret_is_a_fresh_standard_webhooks_secret():
    first, second = secret_generate(), secret_generate()
    assert first.startswith(SECRET_PREFIX) and first != second
    assert secret_check(first) == first
    assert len(first) == len(SECRET_PREFIX) + 32  # 24 random bytes in base64


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("", "a webhook secret looks like whsec_<base64>"),
        ("not-a-secret", "a webhook secret looks like whsec_<base64>"),
        ("WHSEC_" + "A" * 32, "a webhook secret looks like whsec_<base64>"),
        ("whsec_not base64!", "the secret after whsec_ must be base64"),
    ],
)
def test_a_malformed_secret_is_refused_naming_the_field(secret, message):
    with pytest.raises(InvalidInput) as error:
        secret_check(secret)
    assert (error.value.field, error.value.message) == ("secret", message)


def test_a_non_string_secret_is_refused():
    with pytest.raises(InvalidInput):
        secret_check(None)  # type: ignore[arg-type]


# --- signatures ----------------------------------------------------------------------------------


def test_a_signed_delivery_decides_the_waiting_task_as_the_endpoints_principal():
    endpoint = endpoint_make()
    task = waiting_task("K-1")
    outcome = send(endpoint, {"correlation_key": "K-1", "status": "verified", "reason": "all checks passed"})
    assert outcome.http_status == 202, outcome.body
    assert outcome.body["decision"] == "approve"
    assert decided(task)
    decision = Decision.objects.get(task=task)
    assert decision.actor_id == endpoint.principal_id
    assert decision.reason == f"[webhook {endpoint.name}] all checks passed"


def test_a_flood_of_unsigned_requests_is_audited_once_a_minute_per_endpoint_and_counted(monkeypatch):
    """An outside tester wrote 20 hash-chained audit rows a second, anonymously, with junk signatures: the
    trail is never pruned and each row takes its chain's lock. Each refusal stays in the delivery log; the
    trail records an endpoint's first, then the next after the window with how many came between."""
    from approvals.inbound import webhooks

    endpoint, other = endpoint_make(), endpoint_make()
    wrong = secret_generate()
    outcomes = [send(endpoint, {"correlation_key": "K"}, secret=wrong) for _ in range(5)]
    assert [o.http_status for o in outcomes] == [401] * 5
    refused = AuditEvent.objects.filter(action=AuditAction.WEBHOOK_REFUSED, subject_id=endpoint.name)
    assert [e.details["delivery"] for e in refused] == [outcomes[0].delivery.pk]
    assert InboundDelivery.objects.filter(endpoint=endpoint, status=DeliveryStatus.REFUSED).count() == 5
    send(other, {"correlation_key": "K"}, secret=wrong)  # each endpoint has its own window
    assert AuditEvent.objects.filter(action=AuditAction.WEBHOOK_REFUSED, subject_id=other.name).count() == 1
    monkeypatch.setattr(webhooks, "REFUSALS_AUDITED_EVERY_SECONDS", 0)  # the window has passed
    last = send(endpoint, {"correlation_key": "K"}, secret=wrong)
    newest = refused.order_by("-id").first()
    assert newest.details["delivery"] == last.delivery.pk and newest.details["refused_before_unaudited"] == 4


def assert_refused(endpoint, outcome, task: ApprovalTask | None, problem: str) -> None:
    assert outcome.http_status == 401, outcome.body
    assert outcome.body["error"]["code"] == "bad_signature"
    assert outcome.body["error"]["field"] == "webhook-signature"
    assert outcome.body["error"]["message"].startswith("webhook signature refused: ")
    assert problem.lower() in outcome.body["error"]["message"].lower()
    delivery = outcome.delivery
    assert delivery is not None and not delivery.verified and delivery.status == DeliveryStatus.REFUSED
    assert (delivery.http_status, delivery.response) == (401, outcome.body)
    assert problem.lower() in delivery.reason.lower()  # the delivery log says why
    # The security event says which endpoint, which delivery and which body: enough to trace the sender.
    audit = AuditEvent.objects.get(action=AuditAction.WEBHOOK_REFUSED, details__delivery=delivery.pk)
    assert audit.actor_label == f"webhook:{endpoint.name}" and audit.graph == LOAN
    assert (audit.subject_type, audit.subject_id) == ("webhook", endpoint.name)
    assert audit.details["webhook_id"] == delivery.webhook_id
    assert audit.details["body_sha256"] == delivery.body_digest
    assert problem.lower() in audit.details["reason"].lower()
    if task is not None:
        assert not decided(task)
        assert not Decision.objects.filter(task=task).exists()


def test_a_delivery_signed_with_another_key_is_refused_and_audited():
    endpoint = endpoint_make()
    task = waiting_task("K-2")
    outcome = send(endpoint, {"correlation_key": "K-2", "status": "verified"}, secret=secret_generate())
    assert_refused(endpoint, outcome, task, "no matching signature")


def test_a_body_changed_after_signing_is_refused():
    endpoint = endpoint_make()
    task = waiting_task("K-3")
    signed = json.dumps({"correlation_key": "K-3", "status": "failed"}).encode()
    forged = json.dumps({"correlation_key": "K-3", "status": "verified"}).encode()
    headers = webhook_sign(endpoint.secrets[0], signed)
    outcome = delivery_receive(name=endpoint.name, raw=forged, headers=headers)
    assert_refused(endpoint, outcome, task, "no matching signature")


@pytest.mark.parametrize("shift", [timedelta(minutes=-6), timedelta(minutes=6)])
def test_a_correctly_signed_delivery_outside_the_time_window_is_refused(shift):
    """A captured delivery cannot be replayed later (nor one dated in the future be kept for later)."""
    endpoint = endpoint_make()
    task = waiting_task("K-4")
    outcome = send(endpoint, {"correlation_key": "K-4", "status": "verified"}, at=datetime.now(tz=UTC) + shift)
    assert_refused(endpoint, outcome, task, "timestamp")


def test_a_delivery_without_the_signature_headers_is_refused():
    endpoint = endpoint_make()
    outcome = delivery_receive(name=endpoint.name, raw=b'{"correlation_key": "x"}', headers={})
    assert_refused(endpoint, outcome, None, "headers")


def test_a_malformed_signature_header_is_refused_not_a_server_error():
    endpoint = endpoint_make()
    raw = b'{"correlation_key": "x"}'
    headers = {**webhook_sign(endpoint.secrets[0], raw), "webhook-signature": "garbage-without-a-version"}
    outcome = delivery_receive(name=endpoint.name, raw=raw, headers=headers)
    assert_refused(endpoint, outcome, None, "malformed signature header")


def test_an_unsigned_body_that_is_not_utf8_is_refused_as_unsigned():
    endpoint = endpoint_make()
    raw = b'{"correlation_key": "\xff"}'
    outcome = delivery_receive(name=endpoint.name, raw=raw, headers={"webhook-id": "x"})
    assert_refused(endpoint, outcome, None, "headers")


def sign_bytes(secret: str, raw: bytes, *, at: datetime | None = None) -> dict[str, str]:
    """Standard Webhooks' scheme on bytes (webhook_sign, like the library, signs text only)."""
    stamp = str(int((at or datetime.now(tz=UTC)).timestamp()))
    key = base64.b64decode(secret.removeprefix("whsec_") + "==")
    digest = hmac.new(key, f"msg_bytes.{stamp}.".encode() + raw, hashlib.sha256).digest()
    return {
        "webhook-id": "msg_bytes",
        "webhook-timestamp": stamp,
        "webhook-signature": f"v1,{base64.b64encode(digest).decode()}",
    }


def test_a_signed_body_that_is_not_utf8_is_a_400_naming_the_body_not_a_bad_signature():
    """The sender signed it: a malformed body, not a forgery (it was a 401 and a security event)."""
    endpoint = endpoint_make()
    task = waiting_task("K-latin1")
    raw = '{"correlation_key": "K-latin1", "status": "verified", "note": "caf\u00e9"}'.encode("latin-1")

    outcome = delivery_receive(name=endpoint.name, raw=raw, headers=sign_bytes(endpoint.secrets[0], raw))

    assert outcome.http_status == 400, outcome.body
    assert outcome.body["error"]["field"] == "body" and "UTF-8" in outcome.body["error"]["message"]
    assert outcome.delivery is not None and outcome.delivery.verified
    assert outcome.delivery.status == DeliveryStatus.REFUSED
    assert not AuditEvent.objects.filter(action=AuditAction.WEBHOOK_REFUSED, subject_id=endpoint.name).exists()
    assert not decided(task)


@pytest.mark.parametrize(
    ("secret", "at", "problem"),
    [
        ("whsec_" + base64.b64encode(b"another-key-of-24-bytes!").decode(), None, "no matching signature"),
        (None, datetime.now(tz=UTC) - timedelta(minutes=10), "timestamp too old"),
    ],
    ids=["another-key", "replayed-late"],
)
def test_a_body_that_is_not_utf8_is_still_refused_when_its_signature_is_bad(secret, at, problem):
    endpoint = endpoint_make()
    raw = b'{"correlation_key": "\xff"}'
    outcome = delivery_receive(
        name=endpoint.name, raw=raw, headers=sign_bytes(secret or endpoint.secrets[0], raw, at=at)
    )
    assert_refused(endpoint, outcome, None, problem)


def test_header_names_are_matched_whatever_their_case():
    endpoint = endpoint_make()
    task = waiting_task("K-5")
    raw = json.dumps({"correlation_key": "K-5", "status": "verified"}).encode()
    headers = {k.title(): v for k, v in webhook_sign(endpoint.secrets[0], raw).items()}
    assert delivery_receive(name=endpoint.name, raw=raw, headers=headers).http_status == 202
    assert decided(task)


def test_after_a_rotation_the_previous_secret_still_verifies_and_older_ones_do_not():
    endpoint = endpoint_make()
    first = endpoint.secrets[0]
    endpoint, second = webhook_endpoint_rotate(actor=None, name=endpoint.name)
    task = waiting_task("K-6")
    assert send(endpoint, {"correlation_key": "K-6", "status": "verified"}, secret=first).http_status == 202
    assert decided(task)
    endpoint, _third = webhook_endpoint_rotate(actor=None, name=endpoint.name)
    outcome = send(endpoint, {"correlation_key": "K-6b", "status": "verified"}, secret=first)
    assert_refused(endpoint, outcome, None, "no matching signature")
    assert send(endpoint, {"correlation_key": "K-6b", "status": "x"}, secret=second).http_status == 404  # verified


def test_a_deleted_endpoint_verifies_nothing():
    endpoint = endpoint_make()
    secret = endpoint.secrets[0]
    task = waiting_task("K-7")
    endpoint = webhook_endpoint_delete(actor=None, name=endpoint.name)
    outcome = send(endpoint, {"correlation_key": "K-7", "status": "verified"}, secret=secret)
    assert_refused(endpoint, outcome, task, "no secrets configured")


def test_an_unknown_endpoint_is_not_found():
    outcome = delivery_receive(name="no-such-endpoint-" + uuid.uuid4().hex[:6], raw=b"{}", headers={})
    assert outcome.http_status == 404
    assert outcome.body["error"]["field"] == "name"


# --- replays: the same webhook-id ----------------------------------------------------------------


def test_a_replayed_delivery_gets_the_first_outcome_and_does_nothing_again():
    endpoint = endpoint_make()
    task = waiting_task("K-8")
    body = {"correlation_key": "K-8", "status": "verified"}
    first = send(endpoint, body, msg_id="msg_replayed")
    again = send(endpoint, body, msg_id="msg_replayed")
    assert (again.http_status, again.body) == (first.http_status, first.body)
    assert Decision.objects.filter(task=task).count() == 1
    statuses = list(
        InboundDelivery.objects.filter(endpoint=endpoint, webhook_id="msg_replayed")
        .order_by("id")
        .values_list("status", flat=True)
    )
    assert statuses == [DeliveryStatus.ACCEPTED, DeliveryStatus.DUPLICATE]
    duplicate = InboundDelivery.objects.filter(endpoint=endpoint, status=DeliveryStatus.DUPLICATE).get()
    assert duplicate.task_id == task.pk and duplicate.decision_id == first.delivery.decision_id


def test_a_refused_delivery_does_not_claim_its_webhook_id_so_the_senders_retry_is_processed():
    """The first outcome was replayed for any verified delivery: a callback that came before its task
    opened got 404 on every retry (senders retry with the same id), and the task waited for ever."""
    endpoint = endpoint_make()
    body = {"correlation_key": "K-8r", "status": "verified"}
    early = send(endpoint, body, msg_id="msg_early")
    assert early.http_status == 404 and early.body["error"]["code"] == "unknown_correlation"
    task = waiting_task("K-8r")
    retried = send(endpoint, body, msg_id="msg_early")
    assert retried.http_status == 202, retried.body
    assert decided(task)
    again = send(endpoint, body, msg_id="msg_early")  # now claimed: the accepted answer, nothing again
    assert (again.http_status, again.body) == (retried.http_status, retried.body)
    assert Decision.objects.filter(task=task).count() == 1


def test_a_forged_delivery_does_not_claim_the_webhook_id_of_a_real_one():
    """A refused signature is no first delivery: otherwise a forger could block the real one by its id."""
    endpoint = endpoint_make()
    task = waiting_task("K-9")
    body = {"correlation_key": "K-9", "status": "verified"}
    assert send(endpoint, body, secret=secret_generate(), msg_id="msg_contested").http_status == 401
    real = send(endpoint, body, msg_id="msg_contested")
    assert real.http_status == 202, real.body
    assert decided(task)


def test_the_same_webhook_id_at_another_endpoint_is_a_different_delivery():
    first, second = endpoint_make(), endpoint_make()
    task_one, task_two = waiting_task("K-10a"), waiting_task("K-10b")
    assert send(first, {"correlation_key": "K-10a", "status": "verified"}, msg_id="msg_shared").http_status == 202
    assert send(second, {"correlation_key": "K-10b", "status": "verified"}, msg_id="msg_shared").http_status == 202
    assert decided(task_one) and decided(task_two)


# --- event order ----------------------------------------------------------------------------------


def test_an_older_event_cannot_overtake_a_newer_one_for_the_same_key():
    endpoint = endpoint_make(timestamp_path="occurred_at")
    task = waiting_task("K-11")
    newer = {"correlation_key": "K-11", "status": "processing", "occurred_at": "2026-01-01T12:00:00Z"}
    assert send(endpoint, newer).http_status == 202  # acknowledged: no decision, but it orders what follows
    older = {"correlation_key": "K-11", "status": "verified", "occurred_at": "2026-01-01T11:59:59Z"}
    outcome = send(endpoint, older)
    assert outcome.http_status == 409 and outcome.body["error"]["code"] == "out_of_order"
    assert outcome.body["error"]["field"] == "webhook-timestamp"
    assert "is older than the last accepted event for 'K-11'" in outcome.body["error"]["message"]
    assert not decided(task)
    same_time = {"correlation_key": "K-11", "status": "verified", "occurred_at": "2026-01-01T12:00:00Z"}
    assert send(endpoint, same_time).http_status == 202
    assert decided(task)


def test_the_order_of_one_key_does_not_hold_back_another():
    endpoint = endpoint_make(timestamp_path="occurred_at")
    task = waiting_task("K-12b")
    waiting_task("K-12a")
    assert send(endpoint, {"correlation_key": "K-12a", "status": "x", "occurred_at": "2026-01-02T00:00:00Z"})
    outcome = send(endpoint, {"correlation_key": "K-12b", "status": "verified", "occurred_at": "2026-01-01T00:00:00Z"})
    assert outcome.http_status == 202
    assert decided(task)


def test_a_refused_delivery_sets_no_order():
    endpoint = endpoint_make(timestamp_path="occurred_at")
    task = waiting_task("K-13", node="final_signoff")  # a gate this endpoint may not decide: refused
    assert (
        send(endpoint, {"correlation_key": "K-13", "status": "x", "occurred_at": "2026-02-01T00:00:00Z"}).http_status
        == 403
    )
    ApprovalTask.objects.filter(pk=task.pk).update(node="human_review")
    outcome = send(endpoint, {"correlation_key": "K-13", "status": "verified", "occurred_at": "2026-01-01T00:00:00Z"})
    assert outcome.http_status == 202, outcome.body


def test_without_a_timestamp_path_the_signed_header_time_orders_events():
    endpoint = endpoint_make()
    task = waiting_task("K-14")
    now = datetime.now(tz=UTC)
    assert send(endpoint, {"correlation_key": "K-14", "status": "x"}, at=now).http_status == 202
    late = send(endpoint, {"correlation_key": "K-14", "status": "verified"}, at=now - timedelta(seconds=30))
    assert late.http_status == 409 and late.body["error"]["code"] == "out_of_order"
    assert not decided(task)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01T12:00:00Z", datetime(2026, 1, 1, 12, tzinfo=UTC)),
        ("2026-01-01T12:00:00", datetime(2026, 1, 1, 12, tzinfo=UTC)),  # no zone: UTC
        ("2026-01-01T14:00:00+02:00", datetime(2026, 1, 1, 12, tzinfo=UTC)),
        (1767268800, datetime(2026, 1, 1, 12, tzinfo=UTC)),
        (1767268800.5, datetime(2026, 1, 1, 12, 0, 0, 500000, tzinfo=UTC)),
        ("1767268800", datetime(2026, 1, 1, 12, tzinfo=UTC)),
        ("1767268800.5", datetime(2026, 1, 1, 12, 0, 0, 500000, tzinfo=UTC)),
        ("yesterday", None),
        ("1.2.3", None),
        (10**30, None),
        ({"nested": 1}, None),
    ],
)
def test_the_event_time_is_read_from_the_body(value, expected):
    endpoint = endpoint_make(timestamp_path="meta.at")
    assert _event_time(endpoint, {"meta": {"at": value}}, {"webhook-timestamp": "1"}) == expected


def test_the_event_time_falls_back_to_the_signed_header():
    with_path, without = endpoint_make(timestamp_path="meta.at"), endpoint_make()
    headers = {"webhook-timestamp": "1767268800"}
    assert _event_time(with_path, {"other": 1}, headers) == datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert _event_time(without, {"meta": {"at": "2020-01-01T00:00:00Z"}}, headers) == datetime(
        2026, 1, 1, 12, tzinfo=UTC
    )
    assert _event_time(without, {}, {}) is None


# --- the principal's scope ----------------------------------------------------------------------


def test_the_principal_may_decide_exactly_the_endpoints_gates():
    endpoint = endpoint_make()
    principal = endpoint.principal
    assert set(GraphAssignment.objects.filter(user=principal).values_list("graph", "gate")) == {(LOAN, "human_review")}
    assert permissions.can_decide(principal, waiting_task())
    assert not permissions.can_decide(principal, waiting_task(node="final_signoff"))
    assert not permissions.can_decide(principal, waiting_task(graph="kyc_onboarding", node="human_review"))


def test_changing_the_gates_takes_the_old_ones_away():
    endpoint = endpoint_make()
    GraphAssignment.objects.create(user=endpoint.principal, graph="kyc_onboarding")  # slipped in somehow
    endpoint = webhook_endpoint_gates_set(actor=None, name=endpoint.name, gates=["disburse"])
    assert set(GraphAssignment.objects.filter(user=endpoint.principal).values_list("graph", "gate")) == {
        (LOAN, "disburse")
    }


def test_a_delivery_for_a_gate_not_granted_is_refused_and_audited():
    endpoint = endpoint_make()
    task = waiting_task("K-15", node="final_signoff")
    outcome = send(endpoint, {"correlation_key": "K-15", "status": "verified"})
    assert outcome.http_status == 403 and outcome.body["error"]["code"] == "gate_not_allowed"
    assert outcome.body["error"]["field"] == "correlation_key"
    assert "may decide the gates human_review" in outcome.body["error"]["message"]
    assert not decided(task)
    delivery = outcome.delivery
    assert (delivery.task_id, delivery.status, delivery.http_status) == (task.pk, DeliveryStatus.REFUSED, 403)
    assert outcome.body["delivery"] == delivery.pk
    assert InboundDelivery.objects.get(pk=delivery.pk).response == outcome.body == delivery.response
    audit = AuditEvent.objects.get(action=AuditAction.WEBHOOK_GATE_REFUSED, subject_id=str(task.pk))
    assert (audit.actor_id, audit.subject_type, audit.thread_id, audit.graph) == (
        endpoint.principal_id,
        "task",
        task.thread_id,
        LOAN,
    )
    assert audit.details == {
        "endpoint": endpoint.name,
        "delivery": outcome.delivery.pk,
        "webhook_id": outcome.delivery.webhook_id,
        "gate": "final_signoff",
        "allowed": ["human_review"],
    }


def test_a_delivery_for_another_graphs_task_is_refused():
    endpoint = endpoint_make()
    task = waiting_task("K-16", graph="kyc_onboarding")
    outcome = send(endpoint, {"correlation_key": "K-16", "status": "verified"})
    assert outcome.http_status == 409 and outcome.body["error"]["code"] == "wrong_graph"
    assert outcome.body["error"]["field"] == "correlation_key"
    assert "belongs to a task of another graph" in outcome.body["error"]["message"]
    assert not decided(task)


def test_a_disabled_endpoint_decides_nothing_even_with_a_valid_signature():
    endpoint = endpoint_make()
    task = waiting_task("K-17")
    type(endpoint).objects.filter(pk=endpoint.pk).update(active=False)
    outcome = send(endpoint, {"correlation_key": "K-17", "status": "verified"})
    assert outcome.http_status == 404
    assert outcome.body["error"] == {
        "code": "not_found",
        "message": f"webhook endpoint {endpoint.name!r} is disabled",
        "field": "name",
    }
    assert not decided(task)


def test_a_webhook_decision_needs_no_password_the_signature_is_its_authentication():
    endpoint = endpoint_make()
    task = waiting_task("K-18")
    assert send(endpoint, {"correlation_key": "K-18", "status": "failed"}).http_status == 202
    assert decided(task)
    assert Decision.objects.get(task=task).outcome == "reject"


# --- bad input: a clear 4xx naming the field, recorded, nothing decided ------------------------------


KEY_AT = "the correlation key at 'correlation_key'"


@pytest.mark.parametrize(
    ("raw", "status", "code", "field", "message"),
    [
        (b"{not json", 400, "malformed_json", "body", "request body is not valid JSON"),
        (b'["a", "list"]', 422, "invalid", "body", "the body must be a JSON object"),
        (b'{"status": "verified"}', 422, "invalid", "correlation_key", "no correlation key at 'correlation_key'"),
        (
            b'{"correlation_key": ""}',
            422,
            "invalid",
            "correlation_key",
            "the correlation key at 'correlation_key' is empty",
        ),
        (b'{"correlation_key": true}', 422, "invalid", "correlation_key", f"{KEY_AT} must be a string, not a boolean"),
        (b'{"correlation_key": ["K"]}', 422, "invalid", "correlation_key", f"{KEY_AT} must be a string, not an array"),
        (b'{"correlation_key": 4711}', 422, "invalid", "correlation_key", f"{KEY_AT} must be a string, not a number"),
    ],
    ids=["not-json", "not-an-object", "no-key", "empty-key", "boolean-key", "list-key", "number-key"],
)
def test_a_signed_but_unusable_body_is_refused_naming_the_field(raw, status, code, field, message):
    endpoint = endpoint_make()
    outcome = delivery_receive(name=endpoint.name, raw=raw, headers=webhook_sign(endpoint.secrets[0], raw))
    assert outcome.http_status == status, outcome.body
    error = outcome.body["error"]
    assert (error["code"], error["field"]) == (code, field)
    assert error["message"].startswith(message)
    delivery = outcome.delivery
    assert (delivery.status, delivery.http_status, delivery.verified) == (DeliveryStatus.REFUSED, status, True)
    assert delivery.reason == error["message"] and delivery.response == outcome.body
    assert not Decision.objects.filter(task__graph=LOAN, actor=endpoint.principal).exists()


def test_a_numeric_correlation_key_is_refused_not_matched_to_its_text():
    """Gates' keys are strings (docs/webhooks.md): a number is the sender's mistake, named, never a lookup
    of its text that decides a task whose key only looks like it."""
    endpoint = endpoint_make()
    task = waiting_task("4711")
    outcome = send(endpoint, {"correlation_key": 4711, "status": "verified"})
    assert outcome.http_status == 422 and outcome.body["error"]["field"] == "correlation_key", outcome.body
    assert not decided(task)


def test_a_long_correlation_key_is_logged_whole():
    """Keys are up to 500 characters (docs/webhooks.md); the delivery log kept only the first 300."""
    endpoint = endpoint_make()
    key = "K" * 500
    outcome = send(endpoint, {"correlation_key": key, "status": "verified"})
    assert outcome.http_status == 404 and outcome.body["error"]["code"] == "unknown_correlation"
    assert outcome.delivery.correlation_key == key


def test_keys_sharing_their_first_300_characters_are_ordered_apart():
    """The ordering of events compared the logged keys, cut at 300 characters: an event for one key was
    refused as older than another key's that began alike."""
    endpoint = endpoint_make(timestamp_path="occurred_at")
    common = "K" * 300
    first, second = waiting_task(common + "-first"), waiting_task(common + "-second")
    later = {"correlation_key": common + "-first", "status": "processing", "occurred_at": "2030-01-01T00:00:10Z"}
    assert send(endpoint, later).http_status == 202
    earlier = {"correlation_key": common + "-second", "status": "verified", "occurred_at": "2030-01-01T00:00:05Z"}
    outcome = send(endpoint, earlier)
    assert outcome.http_status == 202, outcome.body
    assert decided(second) and not decided(first)


def test_an_endpoints_own_decision_map_replaces_the_default():
    endpoint = endpoint_make(decision_map={"field": "result", "approve": ["ok"], "reject": ["bad"]})
    task = waiting_task("K-19")
    default_word = send(endpoint, {"correlation_key": "K-19", "status": "verified", "result": "pending"})
    assert default_word.http_status == 202 and default_word.body["decision"] is None  # acknowledged only
    assert not decided(task)
    assert send(endpoint, {"correlation_key": "K-19", "result": "ok"}).body["decision"] == "approve"
    assert decided(task)


def test_another_endpoints_events_do_not_order_this_ones():
    first = endpoint_make(timestamp_path="occurred_at")
    second = endpoint_make(timestamp_path="occurred_at")
    task = waiting_task("K-20")
    newer = {"correlation_key": "K-20", "status": "processing", "occurred_at": "2026-03-01T00:00:00Z"}
    assert send(first, newer).http_status == 202
    older = {"correlation_key": "K-20", "status": "verified", "occurred_at": "2026-02-01T00:00:00Z"}
    assert send(second, older).http_status == 202
    assert decided(task)


def test_the_order_of_an_overlong_key_is_kept_on_its_stored_prefix():
    endpoint = endpoint_make(timestamp_path="occurred_at")
    key = "L" * 400
    task = waiting_task(key)
    assert (
        send(endpoint, {"correlation_key": key, "status": "x", "occurred_at": "2026-03-01T00:00:00Z"}).http_status
        == 202
    )
    late = send(endpoint, {"correlation_key": key, "status": "verified", "occurred_at": "2026-02-01T00:00:00Z"})
    assert late.http_status == 409 and late.body["error"]["code"] == "out_of_order"
    assert not decided(task)


def test_a_key_reused_after_a_decided_task_decides_the_pending_one():
    endpoint = endpoint_make()
    done_task = waiting_task("K-21")
    assert send(endpoint, {"correlation_key": "K-21", "status": "verified"}).http_status == 202
    again = waiting_task("K-21")  # a new application under the same reference
    outcome = send(endpoint, {"correlation_key": "K-21", "status": "failed"})
    assert outcome.http_status == 202, outcome.body
    assert decided(again) and Decision.objects.get(task=again).outcome == "reject"
    assert Decision.objects.filter(task=done_task).count() == 1


def test_a_delivery_for_a_decided_task_says_so_and_names_it():
    endpoint = endpoint_make()
    task = waiting_task("K-22")
    assert send(endpoint, {"correlation_key": "K-22", "status": "verified"}).http_status == 202
    late = send(endpoint, {"correlation_key": "K-22", "status": "failed"})
    assert late.http_status == 409
    assert late.body["error"] == {
        "code": "already_decided",
        "message": "the task for 'K-22' is decided and can no longer be decided",
        "field": "correlation_key",
    }
    assert late.delivery.task_id == task.pk
    assert Decision.objects.get(task=task).outcome == "approve"


def test_a_decided_task_of_another_graph_is_not_this_endpoints_business():
    endpoint = endpoint_make()
    other = waiting_task("K-23", graph="kyc_onboarding")
    ApprovalTask.objects.filter(pk=other.pk).update(status=TaskStatus.DECIDED)
    outcome = send(endpoint, {"correlation_key": "K-23", "status": "verified"})
    assert outcome.http_status == 404
    assert outcome.body["error"] == {
        "code": "unknown_correlation",
        "message": "no task waits for 'K-23'",
        "field": "correlation_key",
    }


def test_two_tasks_waiting_for_one_key_are_decided_by_neither():
    """Which of the two the sender meant is a guess; a guess is no decision."""
    endpoint = endpoint_make()
    one, two = waiting_task("K-24"), waiting_task("K-24")
    outcome = send(endpoint, {"correlation_key": "K-24", "status": "verified"})
    assert outcome.http_status == 409
    assert outcome.body["error"] == {
        "code": "ambiguous",
        "message": "2 pending tasks carry 'K-24'",
        "field": "correlation_key",
    }
    assert not decided(one) and not decided(two)


def test_a_status_that_maps_to_no_decision_is_acknowledged_against_its_task():
    endpoint = endpoint_make()
    task = waiting_task("K-25")
    outcome = send(endpoint, {"correlation_key": "K-25", "status": "processing"})
    assert outcome.http_status == 202
    assert outcome.body == {
        "status": "acknowledged",
        "task_id": str(task.pk),
        "decision": None,
        "delivery": outcome.delivery.pk,
    }
    assert outcome.delivery.task_id == task.pk and outcome.delivery.status == DeliveryStatus.ACCEPTED
    assert not decided(task)


def test_without_a_reason_path_the_reason_is_the_mapped_status():
    endpoint = endpoint_make(reason_path="")
    task = waiting_task("K-26")
    send(endpoint, {"correlation_key": "K-26", "status": "verified", "reason": "ignored"})
    assert Decision.objects.get(task=task).reason == f"[webhook {endpoint.name}] status=verified"
