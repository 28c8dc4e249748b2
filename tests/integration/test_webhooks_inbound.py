"""Signed inbound webhooks resume waiting KYC threads: verified, deduplicated, correlated, decided once."""

from __future__ import annotations

import io
import json
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from django.contrib.auth.models import User
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.test import Client

from approvals.inbound.webhooks import webhook_endpoint_create
from approvals.models import AuditEvent, Decision, InboundDelivery, WebhookEndpoint
from approvals.outbound.signing import secret_generate, webhook_sign
from runtime.models import Run, RunKind
from tests.conftest import api_decide, loan_input, pending_tasks, thread_settled, thread_start, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


GATES = {"kyc_onboarding": ["identity_check"], "loan_approval": ["human_review"]}


def _endpoint(graph: str = "kyc_onboarding", **kwargs: Any) -> WebhookEndpoint:
    name = f"vendor-{uuid.uuid4().hex[:8]}"
    return webhook_endpoint_create(actor=None, name=name, graph=graph, gates=GATES[graph], **kwargs)


def _kyc_thread(operator: Any, reviewer: Any) -> tuple[str, dict[str, Any]]:
    thread = thread_start(operator, "kyc_onboarding", {"applicant": {"name": "Ada Lovelace", "country": "GB"}})
    [task] = pending_tasks(reviewer, thread["id"])
    assert task["node"] == "identity_check"
    return thread["id"], task


def _send(
    endpoint: WebhookEndpoint | str,
    body: dict[str, Any] | bytes,
    *,
    secret: str | None = None,
    msg_id: str | None = None,
    at: datetime | None = None,
    signed_body: bytes | None = None,
    headers: dict[str, str] | None = None,
    content_type: str = "application/json",
) -> Any:
    name = endpoint if isinstance(endpoint, str) else endpoint.name
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    if headers is None:
        assert not isinstance(endpoint, str)
        headers = webhook_sign(secret or endpoint.secrets[0], signed_body or raw, msg_id=msg_id, at=at)
    return Client().post(f"/api/webhooks/{name}", raw, content_type=content_type, headers=headers)


def _verified(thread_id: str, **extra: Any) -> dict[str, Any]:
    return {"correlation_key": f"kyc-{thread_id}", "status": "verified", **extra}


def _resumes(thread_id: str) -> int:
    return Run.objects.filter(thread_id=thread_id, kind=RunKind.RESUME).count()


def test_a_signed_vendor_webhook_resumes_the_identity_check(operator, reviewer):
    endpoint = _endpoint()
    thread_id, task = _kyc_thread(operator, reviewer)

    response = _send(endpoint, _verified(thread_id, reason="document and selfie match"))
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "accepted" and body["decision"] == "approve" and body["task_id"] == task["id"]

    decision = Decision.objects.get(task_id=task["id"])
    assert decision.actor.username == f"webhook:{endpoint.name}"
    assert decision.reason == f"[webhook {endpoint.name}] document and selfie match"
    [next_task] = wait_for(
        lambda: [t for t in pending_tasks(reviewer, thread_id) if t["node"] == "compliance_review"],
        what="compliance review task",
    )
    assert next_task["node"] == "compliance_review"
    delivery = InboundDelivery.objects.get(endpoint=endpoint)
    assert (delivery.status, delivery.http_status, delivery.decision_id) == ("accepted", 202, decision.id)


def test_the_kyc_flow_webhook_then_reviewer_opens_the_account_once(operator, reviewer, bank):
    endpoint = _endpoint()
    thread_id, _ = _kyc_thread(operator, reviewer)
    assert _send(endpoint, _verified(thread_id)).status_code == 202
    [review] = wait_for(
        lambda: [t for t in pending_tasks(reviewer, thread_id) if t["node"] == "compliance_review"],
        what="compliance review task",
    )
    response = api_decide(reviewer, review, reason="ok")
    assert response.status_code == 201, response.content

    done = thread_settled(reviewer, thread_id)
    assert done["status"] == "completed"
    assert done["values"]["status"] == "account_opened"
    assert done["values"]["identity"] == {"verified": True, "by": f"webhook:{endpoint.name}"}
    assert bank.ledger.executions[f"gh:{thread_id}:open_account"] == 1


def test_a_failed_verification_closes_the_case(operator, reviewer, bank):
    endpoint = _endpoint()
    thread_id, _ = _kyc_thread(operator, reviewer)
    body = {"correlation_key": f"kyc-{thread_id}", "status": "failed", "reason": "selfie mismatch"}
    assert _send(endpoint, body).status_code == 202
    done = thread_settled(reviewer, thread_id)
    assert done["values"]["status"] == "rejected"
    assert f"gh:{thread_id}:open_account" not in bank.ledger.executions


@pytest.mark.parametrize(
    "tamper",
    ["wrong_secret", "tampered_body", "expired", "future", "missing_headers", "garbled_signature"],
)
def test_a_bad_signature_is_refused_recorded_and_audited(operator, reviewer, tamper):
    endpoint = _endpoint()
    thread_id, task = _kyc_thread(operator, reviewer)
    body = _verified(thread_id)
    raw = json.dumps(body).encode()
    if tamper == "wrong_secret":
        response = _send(endpoint, body, secret=secret_generate())
    elif tamper == "tampered_body":
        response = _send(endpoint, json.dumps({**body, "status": "failed"}).encode(), signed_body=raw)
    elif tamper == "expired":
        response = _send(endpoint, body, at=datetime.now(tz=UTC) - timedelta(minutes=6))
    elif tamper == "future":
        response = _send(endpoint, body, at=datetime.now(tz=UTC) + timedelta(minutes=6))
    elif tamper == "missing_headers":
        response = _send(endpoint, body, headers={})
    else:
        headers = webhook_sign(endpoint.secrets[0], raw)
        response = _send(endpoint, body, headers={**headers, "webhook-signature": "v1,bm9wZQ== garbage"})

    assert response.status_code == 401, response.content
    assert response.json()["error"]["code"] == "bad_signature"
    delivery = InboundDelivery.objects.get(endpoint=endpoint)
    assert (delivery.status, delivery.verified, delivery.http_status) == ("refused", False, 401)
    event = AuditEvent.objects.filter(action="webhook.refused", subject_id=endpoint.name).get()
    assert event.details["delivery"] == delivery.pk
    assert not Decision.objects.filter(task_id=task["id"]).exists()
    assert _resumes(thread_id) == 0


def test_a_refused_signature_does_not_burn_the_webhook_id(operator, reviewer):
    endpoint = _endpoint()
    thread_id, _ = _kyc_thread(operator, reviewer)
    assert _send(endpoint, _verified(thread_id), secret=secret_generate(), msg_id="msg_shared").status_code == 401
    assert _send(endpoint, _verified(thread_id), msg_id="msg_shared").status_code == 202


@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream", "application/json; charset=utf-8"])
def test_a_signed_delivery_is_read_whatever_its_content_type(operator, reviewer, content_type):
    """The receiver verifies and reads the raw bytes (docs/webhooks.md): a vendor's Content-Type is not refused
    the way the APIs refuse a body that is not JSON (415)."""
    endpoint = _endpoint()
    thread_id, task = _kyc_thread(operator, reviewer)
    response = _send(endpoint, _verified(thread_id), content_type=content_type)
    assert response.status_code == 202, response.content
    assert Decision.objects.get(task_id=task["id"]).outcome == "approve"


def test_old_and_new_secrets_both_verify_during_rotation(operator, reviewer):
    old, new = secret_generate(), secret_generate()
    endpoint = _endpoint(secrets=[new, old])
    first, _ = _kyc_thread(operator, reviewer)
    second, _ = _kyc_thread(operator, reviewer)
    assert _send(endpoint, _verified(first), secret=old).status_code == 202
    assert _send(endpoint, _verified(second), secret=new).status_code == 202
    endpoint.secrets = [new]  # rotation finished: the old secret is retired
    endpoint.save()
    third, _ = _kyc_thread(operator, reviewer)
    assert _send(endpoint, _verified(third), secret=old).status_code == 401


def test_a_repeated_delivery_returns_the_first_outcome_and_resumes_once(operator, reviewer):
    endpoint = _endpoint()
    thread_id, task = _kyc_thread(operator, reviewer)
    first = _send(endpoint, _verified(thread_id), msg_id="msg_dup_1")
    again = _send(endpoint, _verified(thread_id), msg_id="msg_dup_1")
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert Decision.objects.filter(task_id=task["id"]).count() == 1
    assert _resumes(thread_id) == 1
    statuses = list(InboundDelivery.objects.filter(endpoint=endpoint).order_by("id").values_list("status", flat=True))
    assert statuses == ["accepted", "duplicate"]


def test_a_repeated_refusal_is_processed_again_not_replayed(operator, reviewer):
    """A refusal claims no webhook-id (docs/webhooks.md): the sender's retry is a delivery of its own, so a
    callback that came before its task opened succeeds once it has."""
    endpoint = _endpoint()
    body = {"correlation_key": f"kyc-{uuid.uuid4()}", "status": "verified"}
    first = _send(endpoint, body, msg_id="msg_dup_2")
    again = _send(endpoint, body, msg_id="msg_dup_2")
    assert first.status_code == again.status_code == 404
    assert again.json()["error"] == first.json()["error"]
    assert again.json()["delivery"] != first.json()["delivery"]
    statuses = list(InboundDelivery.objects.filter(endpoint=endpoint).order_by("id").values_list("status", flat=True))
    assert statuses == ["refused", "refused"]


def test_an_unknown_correlation_key_is_404_and_recorded(operator, reviewer):
    endpoint = _endpoint()
    response = _send(endpoint, {"correlation_key": "kyc-nobody", "status": "verified"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_correlation"
    delivery = InboundDelivery.objects.get(endpoint=endpoint)
    assert (delivery.status, delivery.correlation_key) == ("refused", "kyc-nobody")


def test_an_unknown_endpoint_is_404(operator, reviewer):
    response = _send("no-such-endpoint", b"{}", headers={})
    assert response.status_code == 404


def test_a_task_of_another_graph_is_409_and_nothing_resumes(operator, reviewer):
    loan_endpoint = _endpoint(graph="loan_approval")
    thread_id, task = _kyc_thread(operator, reviewer)
    response = _send(loan_endpoint, _verified(thread_id))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "wrong_graph"
    assert not Decision.objects.filter(task_id=task["id"]).exists()
    assert _resumes(thread_id) == 0


def test_an_already_decided_task_is_409(operator, reviewer):
    endpoint = _endpoint()
    thread_id, task = _kyc_thread(operator, reviewer)
    decided = api_decide(reviewer, task, reason="manual")
    assert decided.status_code == 201
    response = _send(endpoint, _verified(thread_id))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "already_decided"
    assert Decision.objects.filter(task_id=task["id"]).count() == 1
    assert _resumes(thread_id) == 1


def test_an_out_of_order_event_never_moves_the_thread_backwards(operator, reviewer):
    endpoint = _endpoint()
    thread_id, task = _kyc_thread(operator, reviewer)
    now = datetime.now(tz=UTC)
    key = f"kyc-{thread_id}"
    processing = _send(endpoint, {"correlation_key": key, "status": "processing"}, at=now)
    assert processing.status_code == 202 and processing.json()["status"] == "acknowledged"

    stale = _send(endpoint, {"correlation_key": key, "status": "failed"}, at=now - timedelta(seconds=90))
    assert stale.status_code == 409, stale.content
    assert stale.json()["error"]["code"] == "out_of_order"
    assert not Decision.objects.filter(task_id=task["id"]).exists()

    verified = _send(endpoint, {"correlation_key": key, "status": "verified"}, at=now + timedelta(seconds=1))
    assert verified.status_code == 202
    assert Decision.objects.get(task_id=task["id"]).outcome == "approve"
    statuses = list(InboundDelivery.objects.filter(endpoint=endpoint).order_by("id").values_list("status", flat=True))
    assert statuses == ["accepted", "refused", "accepted"]


def test_the_event_time_can_come_from_the_body(operator, reviewer):
    endpoint = _endpoint(timestamp_path="event.occurred_at")
    thread_id, task = _kyc_thread(operator, reviewer)
    key = f"kyc-{thread_id}"
    late = {"correlation_key": key, "status": "processing", "event": {"occurred_at": "2030-01-01T00:00:10Z"}}
    early = {"correlation_key": key, "status": "verified", "event": {"occurred_at": "2030-01-01T00:00:05Z"}}
    assert _send(endpoint, late).status_code == 202
    assert _send(endpoint, early).status_code == 409
    assert not Decision.objects.filter(task_id=task["id"]).exists()


def test_an_oversized_body_is_413_before_anything_is_read(operator, reviewer):
    endpoint = _endpoint()
    raw = json.dumps({"correlation_key": "kyc-x", "status": "verified", "pad": "x" * 1_100_000}).encode()
    response = _send(endpoint, raw)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert not InboundDelivery.objects.filter(endpoint=endpoint).exists()


def test_a_verified_body_that_is_not_json_is_400(operator, reviewer):
    endpoint = _endpoint()
    response = _send(endpoint, b"not json")
    assert response.status_code == 400
    assert InboundDelivery.objects.get(endpoint=endpoint).status == "refused"


def test_a_custom_mapping_and_correlation_path(operator, reviewer):
    endpoint = _endpoint(
        correlation_path="data.reference",
        decision_map={"field": "data.result", "approve": ["clear"], "reject": ["consider"]},
        reason_path="data.note",
    )
    thread_id, task = _kyc_thread(operator, reviewer)
    body = {"data": {"reference": f"kyc-{thread_id}", "result": "consider", "note": "watchlist hit"}}
    assert _send(endpoint, body).status_code == 202
    decision = Decision.objects.get(task_id=task["id"])
    assert (decision.outcome, decision.reason) == ("reject", f"[webhook {endpoint.name}] watchlist hit")


@pytest.mark.parametrize(
    "persona,expected", [("operator", 200), ("admin", 200), ("auditor", 200), ("reviewer", 404), ("outsider", 404)]
)
def test_deliveries_are_visible_to_operators_admins_and_auditors(personas, persona, expected):
    endpoint = _endpoint()
    _send(endpoint, {"correlation_key": "kyc-nobody", "status": "verified"})
    response = personas[persona].client.get(f"/api/webhooks/{endpoint.name}/deliveries")
    assert response.status_code == expected, response.content
    if expected == 200:
        [item] = response.json()
        assert (item["status"], item["http_status"], item["correlation_key"]) == ("refused", 404, "kyc-nobody")


def test_the_delivery_log_needs_authentication():
    endpoint = _endpoint()
    assert Client().get(f"/api/webhooks/{endpoint.name}/deliveries").status_code == 401


@pytest.mark.parametrize("persona,expected", [("admin", 201), ("operator", 403), ("reviewer", 403), ("auditor", 403)])
def test_only_admins_register_endpoints(personas, persona, expected):
    name = f"api-{uuid.uuid4().hex[:8]}"
    body = {"name": name, "graph": "kyc_onboarding", "gates": ["identity_check"]}
    response = personas[persona].client.post("/api/webhook-endpoints", body)
    assert response.status_code == expected, response.content
    if expected == 201:
        body = response.json()
        assert body["principal"] == f"webhook:{name}" and body["secrets"][0].startswith("whsec_")
        listed = personas[persona].client.get("/api/webhook-endpoints").json()
        assert all(item["secrets"] is None for item in listed)
    else:
        assert not WebhookEndpoint.objects.filter(name=name).exists()


def test_the_service_principal_may_decide_only_its_gates():
    endpoint = _endpoint()
    principal = endpoint.principal
    assert principal.groups.filter(name="service").exists()
    assert principal.has_perm("approvals.decide_task") and not principal.has_perm("runtime.start_thread")
    assert list(principal.graph_assignments.values_list("graph", "gate")) == [("kyc_onboarding", "identity_check")]
    assert not principal.has_usable_password()


def test_the_commands_register_an_endpoint_and_send_a_signed_delivery(operator, reviewer):
    name = f"cmd-{uuid.uuid4().hex[:8]}"
    out = io.StringIO()
    call_command(
        "webhook_endpoint_create",
        name,
        "--graph",
        "kyc_onboarding",
        "--gate",
        "identity_check",
        stdout=out,
        stderr=io.StringIO(),
    )
    secret = out.getvalue().strip()
    assert secret.startswith("whsec_") and WebhookEndpoint.objects.get(name=name).secrets == [secret]

    thread_id, task = _kyc_thread(operator, reviewer)

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, WSGIHandler(), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sent = io.StringIO()
        call_command(
            "webhook_send",
            name,
            "--url",
            f"http://127.0.0.1:{server.server_port}",
            "--body",
            json.dumps(_verified(thread_id)),
            stdout=sent,
            stderr=io.StringIO(),
        )
    finally:
        server.shutdown()
        server.server_close()
    assert json.loads(sent.getvalue())["status"] == "accepted"
    assert Decision.objects.get(task_id=task["id"]).actor.username == f"webhook:{name}"


def test_a_loan_thread_is_unaffected_by_kyc_webhooks(operator, reviewer):
    endpoint = _endpoint()
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"])
    response = _send(endpoint, {"correlation_key": task["id"], "status": "verified"})
    assert response.status_code == 404
    assert not Decision.objects.filter(task_id=task["id"]).exists()


def _inbound_counts() -> dict[str, float]:
    """gatehouse_webhook_inbound_deliveries_total by outcome, as /metrics reports it."""
    from django.test import override_settings
    from prometheus_client.parser import text_string_to_metric_families

    token = "metrics-token-for-webhook-tests-0123456789"
    with override_settings(GATEHOUSE_METRICS_TOKEN=token):
        response = Client().get("/metrics", headers={"host": "10.9.8.7:8000", "authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.content
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
        if sample.name == "gatehouse_webhook_inbound_deliveries_total"
    }


def test_a_webhook_id_reused_for_another_body_is_refused_and_decides_nothing(operator, reviewer):
    """The same webhook-id with a different signed body was answered the first delivery's 202 and did nothing:
    the sender believed its "verified" had decided the task. It is a 409 naming the header, recorded as a
    refusal; the same id with the same body is still the replay."""
    endpoint = _endpoint()
    thread_id, task = _kyc_thread(operator, reviewer)
    key = f"kyc-{thread_id}"
    first = _send(endpoint, {"correlation_key": key, "status": "processing"}, msg_id="msg_reused")
    assert first.status_code == 202 and first.json()["status"] == "acknowledged", first.content
    before = _inbound_counts()

    other = _send(endpoint, {"correlation_key": key, "status": "verified"}, msg_id="msg_reused")

    assert other.status_code == 409, other.content
    error = other.json()["error"]
    assert (error["code"], error["field"]) == ("delivery_id_reused", "webhook-id")
    assert "msg_reused" in error["message"] and "another body" in error["message"]
    assert not Decision.objects.filter(task_id=task["id"]).exists()
    assert _resumes(thread_id) == 0
    refused = InboundDelivery.objects.filter(endpoint=endpoint).order_by("id").last()
    assert refused is not None and other.json()["delivery"] == refused.pk
    assert (refused.status, refused.verified, refused.http_status, refused.task_id, refused.decision_id) == (
        "refused",
        True,
        409,
        None,
        None,
    )
    assert refused.body_digest != InboundDelivery.objects.get(endpoint=endpoint, status="accepted").body_digest
    after = _inbound_counts()
    assert {k: after[k] - before.get(k, 0) for k in after} == {"accepted": 0, "refused": 1, "duplicate": 0}

    again = _send(endpoint, {"correlation_key": key, "status": "processing"}, msg_id="msg_reused")
    assert again.status_code == 202 and again.content == first.content
    statuses = list(InboundDelivery.objects.filter(endpoint=endpoint).order_by("id").values_list("status", flat=True))
    assert statuses == ["accepted", "refused", "duplicate"]
    # The id still decides nothing for another body after a replay: the refusal claimed nothing.
    assert _send(endpoint, _verified(thread_id), msg_id="msg_reused").status_code == 409
    assert not Decision.objects.filter(task_id=task["id"]).exists()


def test_a_webhook_id_too_long_to_keep_is_refused_not_cut_into_another_events_id(operator, reviewer):
    """An outside QA's find: ids were cut to their first 200 characters, so two events whose ids shared them
    were one id: the second ("verified") was refused as the first's id reused, a third dropped as a repeat."""
    endpoint = _endpoint()
    thread_id, task = _kyc_thread(operator, reviewer)
    prefix = "evt_" + "x" * 200
    for suffix, status in (("A", "processing"), ("B", "verified")):
        sent = _send(endpoint, {"correlation_key": f"kyc-{thread_id}", "status": status}, msg_id=prefix + suffix)
        assert sent.status_code == 400, sent.content
        error = sent.json()["error"]
        assert (error["code"], error["field"]) == ("webhook_id_too_long", "webhook-id"), error
        assert "205 characters; at most 200" in error["message"]
    refused = list(InboundDelivery.objects.filter(endpoint=endpoint).values_list("status", "http_status"))
    assert refused == [("refused", 400), ("refused", 400)]  # recorded, and neither claimed an id
    assert not Decision.objects.filter(task_id=task["id"]).exists()
    # An id of 200 characters is kept whole and decides.
    decided = _send(endpoint, _verified(thread_id), msg_id="evt_" + "y" * 196)
    assert decided.status_code == 202 and decided.json()["decision"] == "approve", decided.content
    assert InboundDelivery.objects.get(pk=decided.json()["delivery"]).webhook_id == "evt_" + "y" * 196


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"correlation_path": ".."}, "correlation_path", "has an empty part"),
        ({"correlation_path": "$."}, "correlation_path", "has an empty part"),
        ({"correlation_path": "data..reference"}, "correlation_path", "has an empty part"),
        ({"correlation_path": "data."}, "correlation_path", "has an empty part"),
        ({"reason_path": "why."}, "reason_path", "has an empty part"),
        ({"timestamp_path": ".at"}, "timestamp_path", "has an empty part"),
        ({"decision_map": {"field": 5, "approve": ["ok"]}}, "decision_map.field", "(a string), not int"),
        ({"decision_map": {"field": "a..b", "approve": ["ok"]}}, "decision_map.field", "has an empty part"),
        ({"decision_map": {"approve": ["ok"]}}, "decision_map.field", "needs a 'field'"),
        ({"secrets": [secret_generate(), "notwhsec"]}, "secrets[1]", "whsec_<base64>"),
        ({"secrets": ["whsec_!!not base64!!"]}, "secrets[0]", "must be base64"),
    ],
)
def test_an_endpoint_that_could_never_match_is_refused_naming_the_field_and_nothing_is_written(
    personas, fields, field, words
):
    """An outside QA's finds: a correlation path with an empty part was accepted (every delivery then failed),
    a number as the decision map's field was called missing, a bad secret named 'secret', not 'secrets[0]'."""
    name = f"vendor-{uuid.uuid4().hex[:8]}"
    body = {"name": name, "graph": "kyc_onboarding", "gates": ["identity_check"], **fields}
    response = personas["admin"].client.post("/api/webhook-endpoints", body)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["field"] == field and words in error["message"], error
    assert not WebhookEndpoint.objects.filter(name=name).exists()
    assert not User.objects.filter(username=f"webhook:{name}").exists()


def test_dotted_paths_with_a_leading_dollar_and_list_indexes_are_accepted(personas):
    name = f"vendor-{uuid.uuid4().hex[:8]}"
    body = {"name": name, "graph": "kyc_onboarding", "gates": ["identity_check"], "correlation_path": "$.items.0.id",
            "decision_map": {"field": "data.status", "approve": ["ok"]}, "reason_path": "data.why"}  # fmt: skip
    response = personas["admin"].client.post("/api/webhook-endpoints", body)
    assert response.status_code == 201, response.content


def test_a_replay_is_the_first_response_byte_for_byte(operator, reviewer):
    """docs/webhooks.md promises the first response, byte for byte; the stored copy (jsonb) came back with
    its keys reordered."""
    endpoint = _endpoint()
    thread_id, _ = _kyc_thread(operator, reviewer)
    first = _send(endpoint, _verified(thread_id), msg_id="msg_bytes")
    again = _send(endpoint, _verified(thread_id), msg_id="msg_bytes")
    assert first.status_code == again.status_code == 202, first.content
    assert set(first.json()) == {"status", "task_id", "decision_id", "decision", "delivery"}
    assert again.content == first.content
    assert again["Content-Type"] == first["Content-Type"] == "application/json"


def test_parallel_identical_deliveries_all_get_the_same_bytes(operator, reviewer):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    endpoint = _endpoint()
    thread_id, task = _kyc_thread(operator, reviewer)
    raw = json.dumps(_verified(thread_id)).encode()
    headers = webhook_sign(endpoint.secrets[0], raw, msg_id="msg_parallel")

    def deliver(_: int) -> tuple[int, bytes]:
        try:
            response = Client().post(
                f"/api/webhooks/{endpoint.name}", raw, content_type="application/json", headers=headers
            )
            return response.status_code, response.content
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(deliver, range(10)))

    assert {status for status, _ in answers} == {202}
    assert len({content for _, content in answers}) == 1, answers
    assert Decision.objects.filter(task_id=task["id"]).count() == 1
    statuses = Counter(InboundDelivery.objects.filter(endpoint=endpoint).values_list("status", flat=True))
    assert statuses == {"accepted": 1, "duplicate": 9}


@pytest.mark.parametrize(
    "key,problem",
    [
        (5, "a number"),
        (["kyc-1"], "an array"),
        ({"id": "kyc-1"}, "an object"),
        (True, "a boolean"),
        ("", "empty"),
        ("k" * 501, "501 characters"),
        ("k" * 100_000, "100000 characters"),
    ],
    ids=["integer", "list", "object", "boolean", "empty", "501-chars", "100k-chars"],
)
def test_a_correlation_key_that_names_no_gate_is_422_naming_it(operator, reviewer, key, problem):
    """Gates index string keys of 1 to 500 characters. 5 was looked up as '5' (404), a list was "no correlation
    key", and a 100,000-character key got a 404 echoing all of it."""
    endpoint = _endpoint()
    response = _send(endpoint, {"correlation_key": key, "status": "verified"})
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["field"] == "correlation_key" and problem in error["message"], error
    assert len(response.content) < 1000  # an over-long key is not echoed
    delivery = InboundDelivery.objects.get(endpoint=endpoint)
    assert (delivery.status, delivery.http_status, delivery.correlation_key, delivery.task_id) == (
        "refused",
        422,
        "",
        None,
    )
    assert len(delivery.reason) < 1000


def test_a_correlation_key_of_500_characters_is_looked_up(operator, reviewer):
    endpoint = _endpoint()
    response = _send(endpoint, {"correlation_key": "k" * 500, "status": "verified"})
    assert response.status_code == 404 and response.json()["error"]["code"] == "unknown_correlation"
