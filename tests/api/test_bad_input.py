"""Bad input through the API: refused with the right status and a JSON error naming the field, nothing written."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings

from approvals.inputs import MAX_METADATA_BYTES
from approvals.models import ApprovalTask, AuditEvent, Decision
from runtime.models import Run, Thread
from tests.conftest import ApiClient, api_decide, loan_input, pending_tasks, scaled, thread_settled, thread_start
from tests.factories import loan_gate, task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    assert body["error"]["message"], body
    return body["error"]


@dataclass(frozen=True)
class Snapshot:
    decisions: int
    task_status: str
    runs: int
    decision_events: int
    thread_status: str
    thread_checkpoint: str


def snapshot(task_id: str) -> Snapshot:
    task = ApprovalTask.objects.select_related("thread").get(pk=task_id)
    return Snapshot(
        decisions=Decision.objects.filter(task_id=task_id).count(),
        task_status=task.status,
        runs=Run.objects.filter(thread_id=task.thread_id).count(),
        decision_events=AuditEvent.objects.filter(thread_id=task.thread_id, action="decision.made").count(),
        thread_status=task.thread.status,
        thread_checkpoint=task.thread.checkpoint_id,
    )


@pytest.fixture
def loan_task(live_worker, operator, reviewer) -> dict[str, Any]:
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    [task] = pending_tasks(reviewer, thread["id"])
    return reviewer.client.get(f"/api/tasks/{task['id']}").json()


@pytest.fixture
def kyc_identity_task(live_worker, operator, reviewer) -> dict[str, Any]:
    thread = thread_start(operator, "kyc_onboarding", {"applicant": {"name": "Ada Lovelace", "country": "GB"}})
    [task] = pending_tasks(reviewer, thread["id"])
    return reviewer.client.get(f"/api/tasks/{task['id']}").json()


# --- starting threads ---------------------------------------------------------------------------


def test_it_refuses_an_unknown_graph_naming_the_graph_field(operator):
    before = Thread.objects.count()
    error = error_of(operator.client.post("/api/threads", {"graph": "no_such_graph", "input": {}}), 422)
    assert error["field"] == "graph"
    assert "no_such_graph" in error["message"] and "loan_approval" in error["message"]
    assert Thread.objects.count() == before


def test_it_refuses_thread_metadata_over_the_limit_naming_metadata(operator):
    """One thread's 900 KB of metadata made every page of five threads weigh over a megabyte."""
    before = Thread.objects.count()
    body = {"graph": "loan_approval", "input": loan_input(), "metadata": {"notes": "x" * MAX_METADATA_BYTES}}
    error = error_of(operator.client.post("/api/threads", body), 422)
    assert error["field"] == "metadata"
    assert f"metadata is at most {MAX_METADATA_BYTES}" in error["message"]
    assert Thread.objects.count() == before


@pytest.mark.parametrize("raw", ['{"graph": "loan_approval", ', "not json at all", '{"graph": }', "\x00"])
def test_it_refuses_malformed_json_with_400(operator, raw):
    error = error_of(operator.client.post("/api/threads", raw=raw), 400)
    assert error["code"] == "malformed_json"
    assert error["field"] == "body"


def test_it_refuses_malformed_json_on_a_decision(reviewer):
    error = error_of(reviewer.client.post(f"/api/tasks/{uuid.uuid4()}/decision", raw="{decision: approve}"), 400)
    assert error == {"code": "malformed_json", "message": error["message"], "field": "body"}


@pytest.mark.parametrize(
    "graph_input,field",
    [
        (loan_input(amount="20000"), "input.amount"),
        (loan_input(income=True), "input.income"),
        (loan_input(applicant=7), "input.applicant"),
        ({**loan_input(), "amout": 5}, "input.amout"),
        ({**loan_input(), "risk_score": 0.01}, "input.risk_score"),  # the graph's own working state
        (loan_input(amount=-100), "input.amount"),  # scored as low risk, it was paid out without review
        (loan_input(amount=0), "input.amount"),
        (loan_input(term_months=0), "input.term_months"),
        ({**loan_input(), "route": "auto"}, "input.route"),
    ],
)
def test_it_refuses_input_that_violates_the_graphs_input_schema(operator, graph_input, field):
    before = Thread.objects.count()
    error = error_of(operator.client.post("/api/threads", {"graph": "loan_approval", "input": graph_input}), 422)
    assert error["field"] == field
    if "unknown field" in error["message"]:
        known = "amount, applicant, applicant_id, income, loan_id, term_months"
        assert f"the graph's input has: {known}" in error["message"]
    assert Thread.objects.count() == before


@pytest.mark.parametrize(
    "body,field",
    [
        ({"input": {}}, "graph"),
        ({"graph": ""}, "graph"),
        ({"graph": "loan_approval", "input": [1, 2]}, "input"),
        ({"graph": "loan_approval", "metadata": "x"}, "metadata"),
    ],
)
def test_it_refuses_a_thread_request_of_the_wrong_shape_naming_the_field(operator, body, field):
    error = error_of(operator.client.post("/api/threads", body), 422)
    assert error["field"] == field


# --- deciding -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edits,field",
    [
        ({"amount": "15000"}, "edits.amount"),
        ({"amount": True}, "edits.amount"),
        ({"term_months": 1.5}, "edits.term_months"),
        ({"income": 90000}, "edits.income"),  # not editable at this gate
        ({"amout": 15000}, "edits.amout"),  # not in the state
    ],
)
def test_it_refuses_a_schema_violating_edit_and_writes_nothing(reviewer, loan_task, edits, field):
    before = snapshot(loan_task["id"])
    error = error_of(api_decide(reviewer, loan_task, "edit", reason="adjust", edits=edits), 422)
    assert error["field"] == field
    assert error["code"] == "invalid"
    assert snapshot(loan_task["id"]) == before
    assert before.decisions == 0 and before.task_status == "pending"


def test_the_task_can_still_be_decided_after_a_refused_edit(reviewer, loan_task):
    error_of(api_decide(reviewer, loan_task, "edit", reason="adjust", edits={"amount": "1"}), 422)
    response = api_decide(reviewer, loan_task, "edit", reason="adjust", edits={"amount": 15000})
    assert response.status_code == 201, response.content
    assert thread_settled(reviewer, loan_task["thread_id"])["values"]["amount"] == 15000


def test_it_refuses_a_wrongly_typed_action_argument_naming_it(reviewer, loan_task):
    before = snapshot(loan_task["id"])
    error = error_of(api_decide(reviewer, loan_task, "edit", reason="r", action_args={"amount": "12500"}), 422)
    assert error["field"] == "action_args.amount"
    assert snapshot(loan_task["id"]) == before


def test_it_refuses_a_schema_violating_nested_edit_at_the_kyc_compliance_gate(reviewer, kyc_identity_task):
    response = api_decide(reviewer, kyc_identity_task, reason="documents match")
    assert response.status_code == 201, response.content
    compliance = [
        t for t in pending_tasks(reviewer, kyc_identity_task["thread_id"]) if t["node"] == "compliance_review"
    ]
    task = reviewer.client.get(f"/api/tasks/{compliance[0]['id']}").json() if compliance else None
    assert task is not None, "the thread did not reach compliance_review"
    before = snapshot(task["id"])
    error = error_of(api_decide(reviewer, task, "edit", reason="fix", edits={"applicant": {"name": 5}}), 422)
    assert error["field"] == "edits.applicant.name"
    assert snapshot(task["id"]) == before


@pytest.mark.parametrize("reason", ["", "   "])
@pytest.mark.parametrize("decision,extra", [("reject", {}), ("edit", {"edits": {"amount": 15000}})])
def test_it_refuses_a_reject_or_edit_without_a_reason(reviewer, loan_task, decision, extra, reason):
    before = snapshot(loan_task["id"])
    error = error_of(api_decide(reviewer, loan_task, decision, reason=reason, **extra), 422)
    assert error["field"] == "reason"
    assert snapshot(loan_task["id"]) == before


def test_it_refuses_a_decision_the_task_does_not_allow(reviewer, kyc_identity_task):
    assert kyc_identity_task["allowed_decisions"] == ["approve", "reject"]
    before = snapshot(kyc_identity_task["id"])
    error = error_of(api_decide(reviewer, kyc_identity_task, "respond", message="hello"), 422)
    assert error["field"] == "decision"
    assert snapshot(kyc_identity_task["id"]) == before


def test_it_refuses_an_unknown_decision_word(reviewer, loan_task):
    error = error_of(api_decide(reviewer, loan_task, "maybe", reason="r"), 422)
    assert error["field"] == "decision"


def test_it_refuses_a_response_without_a_message(reviewer):
    task = {"id": str(task_make(payload=loan_gate(decisions=["approve", "respond"])).pk)}
    before = snapshot(task["id"])
    error = error_of(api_decide(reviewer, task, "respond"), 422)
    assert error["field"] == "message"
    assert snapshot(task["id"]) == before


def test_the_demo_loan_gate_offers_no_reply_that_would_decline_it(reviewer, loan_task):
    """The loan graph declines whatever is not approved: a "respond" ('please send the payslip') ended the
    loan with no reason asked, and the console said "Signed as reviewed"."""
    assert "respond" not in loan_task["allowed_decisions"]
    before = snapshot(loan_task["id"])
    error = error_of(api_decide(reviewer, loan_task, "respond", message="send the payslip"), 422)
    assert error["field"] == "decision"
    assert snapshot(loan_task["id"]) == before


def test_it_refuses_a_repeated_decision_with_409_writing_nothing_more(personas, reviewer, loan_task):
    first = api_decide(reviewer, loan_task, reason="ok")
    assert first.status_code == 201, first.content
    after_first = snapshot(loan_task["id"])
    for persona in (reviewer, personas["reviewer2"]):
        error = error_of(api_decide(persona, loan_task, "reject", reason="changed my mind"), 409)
        assert error["code"] == "conflict"
    assert Decision.objects.filter(task_id=loan_task["id"]).count() == 1
    assert AuditEvent.objects.filter(thread_id=loan_task["thread_id"], action="decision.made").count() == 1
    assert snapshot(loan_task["id"]).runs == after_first.runs


def test_it_refuses_a_decision_against_a_stale_checkpoint_writing_nothing(reviewer, loan_task):
    before = snapshot(loan_task["id"])
    stale = "1f0a0000-0000-6000-8000-000000000000"
    assert stale != loan_task["checkpoint_id"]
    error = error_of(api_decide(reviewer, loan_task, reason="ok", checkpoint_id=stale), 409)
    assert error["field"] == "checkpoint_id"
    assert snapshot(loan_task["id"]) == before


def test_a_decision_against_the_current_checkpoint_is_accepted(reviewer, loan_task):
    response = api_decide(reviewer, loan_task, reason="ok", checkpoint_id=loan_task["checkpoint_id"])
    assert response.status_code == 201, response.content


# --- body size and authentication ----------------------------------------------------------------


def test_it_refuses_an_oversized_body_with_413(operator):
    limit = settings.GATEHOUSE_MAX_BODY_BYTES
    raw = '{"graph": "loan_approval", "input": {"applicant": "' + "x" * limit + '"}}'
    before = Thread.objects.count()
    error = error_of(operator.client.post("/api/threads", raw=raw), 413)
    assert error["code"] == "payload_too_large"
    assert str(limit) in error["message"]
    assert Thread.objects.count() == before


def test_it_refuses_an_oversized_body_before_authenticating():
    raw = "x" * (settings.GATEHOUSE_MAX_BODY_BYTES + 1)
    assert ApiClient(None).post("/api/threads", raw=raw).status_code == 413


def test_a_body_just_under_the_limit_is_not_refused_for_its_size(operator):
    limit = settings.GATEHOUSE_MAX_BODY_BYTES
    head = '{"graph": "no_such_graph", "metadata": {"pad": "'
    raw = head + "x" * (limit - len(head) - 3) + '"}}'
    assert len(raw.encode()) == limit
    assert operator.client.post("/api/threads", raw=raw).status_code == 422


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer gh_not-a-token"},
        {"Authorization": "Bearer "},
        {"Authorization": "Token gh_whatever"},
        {"Authorization": "gh_whatever"},
    ],
)
@pytest.mark.parametrize("method,path", [("get", "/api/tasks"), ("post", "/api/threads"), ("get", "/api/audit")])
def test_it_refuses_a_missing_or_bad_token_with_401(headers, method, path):
    client = ApiClient(None)
    client.headers = headers
    response = client.get(path) if method == "get" else client.post(path, {"graph": "loan_approval"})
    error = error_of(response, 401)
    assert error["code"] == "unauthenticated"


def test_a_revoked_token_is_refused_with_401(personas):
    from django.utils import timezone

    from approvals.models import ApiToken
    from approvals.tokens import token_issue

    user = personas["reviewer"].user
    secret = token_issue(user=user, name="to-revoke")
    assert ApiClient(secret).get("/api/tasks").status_code == 200
    ApiToken.objects.filter(user=user, prefix=secret[:10]).update(revoked_at=timezone.now())
    error_of(ApiClient(secret).get("/api/tasks"), 401)


def test_an_unauthenticated_decision_writes_nothing(loan_task):
    before = snapshot(loan_task["id"])
    error_of(api_decide(ApiClient(None), loan_task), 401)
    assert snapshot(loan_task["id"]) == before


# --- queries and ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("cursor", ["not-a-cursor", "e30=", "WyJub3QgYSBkYXRlIiwgIngiXQ==", "!!!"])
def test_it_refuses_a_cursor_it_did_not_issue(reviewer, cursor):
    error = error_of(reviewer.client.get("/api/tasks", cursor=cursor), 422)
    assert error["field"] == "cursor"


@pytest.mark.parametrize(
    "params,field",
    [
        ({"status": "open"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"thread": "not-a-uuid"}, "thread"),
    ],
)
def test_it_refuses_bad_task_filters_naming_them(reviewer, params, field):
    assert error_of(reviewer.client.get("/api/tasks", **params), 422)["field"] == field


@pytest.mark.parametrize(
    "method,path",
    [
        ("get", "/api/threads/{id}"),
        ("get", "/api/threads/{id}/history"),
        ("get", "/api/threads/{id}/runs"),
        ("post", "/api/threads/{id}/retry"),
        ("get", "/api/tasks/{id}"),
        ("post", "/api/tasks/{id}/decision"),
    ],
)
def test_it_answers_404_for_ids_that_do_not_exist(personas, method, path):
    admin = personas["admin"]
    url = path.format(id=uuid.uuid4())
    response = admin.client.get(url) if method == "get" else admin.client.post(url, {"decision": "approve"})
    error = error_of(response, 404)
    assert error["code"] == "not_found"


@pytest.mark.parametrize("path,field", [("/api/threads/not-a-uuid", "thread_id"), ("/api/tasks/12345", "task_id")])
def test_it_refuses_a_malformed_id(personas, path, field):
    error = error_of(personas["admin"].client.get(path), 422)
    assert error["field"] == field and "UUID" in error["message"]


def asgi_post(path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """POST through the ASGI handler daphne serves (``console.asgi``'s), the body in 64 KiB chunks."""
    import asyncio

    from asgiref.sync import async_to_sync

    from console.request_threads import ReusedThreadASGIHandler

    app = ReusedThreadASGIHandler()
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)] or [b""]
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(30)  # the client stays connected until the response is sent
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    async_to_sync(asyncio.wait_for)(app(scope, receive, send), scaled(30))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize("send_length", [True, False], ids=["content-length", "chunked"])
def test_it_refuses_an_oversized_body_with_or_without_a_content_length(operator, send_length):
    """HTTP/1.1 clients may stream a body chunked, with no Content-Length: the limit must still hold."""
    limit = settings.GATEHOUSE_MAX_BODY_BYTES
    body = ('{"graph": "no_such_graph", "metadata": {"pad": "' + "x" * limit + '"}}').encode()
    headers = [(b"content-type", b"application/json"), (b"authorization", f"Bearer {operator.token}".encode())]
    if send_length:
        headers.append((b"content-length", str(len(body)).encode()))
    else:
        headers.append((b"transfer-encoding", b"chunked"))
    status, content = asgi_post("/api/threads", body, headers)
    assert status == 413, content[:300]
    assert json.loads(content)["error"]["code"] == "payload_too_large"


# --- the decision body: its form, a malformed checkpoint id, a message nothing reads -------------


@pytest.mark.parametrize("checkpoint_id", ["not-a-uuid", "1f0a0000-0000-6000-8000", "external-xyz", " " * 3])
def test_a_malformed_checkpoint_id_is_a_422_not_a_stale_view(reviewer, loan_task, checkpoint_id):
    before = snapshot(loan_task["id"])
    error = error_of(api_decide(reviewer, loan_task, reason="ok", checkpoint_id=checkpoint_id), 422)
    assert error["field"] == "checkpoint_id" and "not a checkpoint id" in error["message"], error
    assert snapshot(loan_task["id"]) == before


@pytest.mark.parametrize("raw", [b"[]", b'"approve"', b"null", b"[{}]"])
def test_a_decision_body_that_is_not_an_object_says_so_naming_body(reviewer, loan_task, raw):
    before = snapshot(loan_task["id"])
    response = reviewer.client.post(f"/api/tasks/{loan_task['id']}/decision", raw=raw)
    error = error_of(response, 422)
    assert error["field"] == "body" and "must be a JSON object" in error["message"], error
    assert snapshot(loan_task["id"]) == before


@pytest.mark.parametrize("decision", ["approve", "edit"])
def test_a_message_with_a_decision_that_carries_none_is_refused_not_dropped(reviewer, loan_task, decision):
    before = snapshot(loan_task["id"])
    error = error_of(api_decide(reviewer, loan_task, decision, reason="ok", message="hi"), 422)
    assert error["field"] == "message", error
    assert snapshot(loan_task["id"]) == before


def test_a_platform_resume_with_a_reason_that_is_not_text_is_refused_naming_it(reviewer, loan_task):
    before = snapshot(loan_task["id"])
    body = {
        "assistant_id": "loan_approval",
        "command": {"resume": {"decision": "approve"}},
        "metadata": {"reason": 5},
    }
    response = reviewer.client.post(f"/lg/threads/{loan_task['thread_id']}/runs", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "metadata.reason", response.content
    assert snapshot(loan_task["id"]) == before


@pytest.mark.parametrize(
    "command,field",
    [
        ({"resume": {"decision": "edit", "reason": "adjust"}, "update": {"amount": "15000"}}, "command.update.amount"),
        ({"resume": {"decision": "approve", "reason": "ok"}, "update": {"income": 1}}, "command.update.income"),
        ({"resume": {"decision": "deny", "reason": "do not pay"}}, "command.resume.decision"),
        ({"resume": {"decision": "respond", "reason": "hello"}}, "command.resume.decision"),
        ({"resume": {"decision": "reject"}}, "command.resume.reason"),
        (
            {"resume": {"decision": "edit", "reason": "r", "action_args": {"amount": "1"}}},
            "command.resume.action_args.amount",
        ),
        ({"resume": {"decision": "edit", "reason": "r", "action_args": 5}}, "command.resume.action_args"),
        ({"resume": "yes"}, "command.resume.decision"),
    ],
)
def test_a_platform_resume_refused_by_the_decision_service_names_the_field_it_sent(reviewer, loan_task, command, field):
    """/lg/ named the native API's fields ("edits.amount", "resume.decision"), which its body does not have."""
    before = snapshot(loan_task["id"])
    body = {"assistant_id": "loan_approval", "command": command}
    response = reviewer.client.post(f"/lg/threads/{loan_task['thread_id']}/runs", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field, response.content
    assert snapshot(loan_task["id"]) == before


def test_a_platform_resume_by_interrupt_id_names_the_field_under_its_id(reviewer, loan_task):
    interrupt_id = loan_task["interrupt_id"]
    before = snapshot(loan_task["id"])
    command = {"resume": {interrupt_id: {"decision": "deny", "reason": "r"}}}
    response = reviewer.client.post(
        f"/lg/threads/{loan_task['thread_id']}/runs", {"assistant_id": "loan_approval", "command": command}
    )
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == f"command.resume.{interrupt_id}.decision", response.content
    assert snapshot(loan_task["id"]) == before
