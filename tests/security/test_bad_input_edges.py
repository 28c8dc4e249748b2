"""Abuse cases at the HTTP edge (issue 9, leak 8): input that used to end in a server error.

Each one must now be a 4xx naming the field, with nothing written. Read with
``tests/api/test_bad_input.py`` (the well-formed but wrong requests) as the
threat model for bad input.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any

import pytest
from django.test import Client

from approvals.inbound.webhooks import webhook_endpoint_create
from approvals.models import AuditEvent, Away, Comment, Decision, InboundDelivery, WebhookEndpoint
from approvals.outbound.signing import webhook_sign
from runtime.models import Thread
from tests.api.test_bad_input import snapshot
from tests.conftest import api_decide, loan_input, pending_tasks, thread_start
from tests.console.conftest import console_client, console_decide
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

NUL = "\u0000"


def error_of(response: Any, status: int) -> dict[str, Any]:
    """The JSON error of a refusal: ``{"error": {code, message, field}}`` (``/lg/`` adds ``detail``,
    a webhook refusal its ``delivery`` number)."""
    assert response.status_code == status, response.content[:500]
    error = response.json()["error"]
    assert set(error) == {"code", "message", "field"} and error["message"], error
    return error


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def thread_body(**extra: Any) -> dict[str, Any]:
    return {"graph": "loan_approval", "input": loan_input(), **extra}


@pytest.fixture
def loan_task(live_worker, operator, reviewer) -> dict[str, Any]:
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    [task] = pending_tasks(reviewer, thread["id"])
    return reviewer.client.get(f"/api/tasks/{task['id']}").json()


# --- sign-in -------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [65, 100, 150])
def test_a_failed_sign_in_with_a_long_username_is_refused_and_audited_truncated(length):
    username = (uuid.uuid4().hex + "x" * length)[:length]
    response = Client().post("/accounts/login/", {"username": username, "password": "wrong"})
    assert response.status_code == 200, response.status_code  # the form again, with its error
    assert b"did not match" in response.content
    [event] = AuditEvent.objects.filter(action="auth.login_failed", subject_id=username[:64])
    assert event.actor_label.startswith("anonymous:" + username[:20])
    assert len(event.actor_label) <= 150


def test_a_username_over_the_model_length_is_a_form_error_not_a_sign_in_attempt():
    username = uuid.uuid4().hex + "x" * 200
    response = Client().post("/accounts/login/", {"username": username, "password": "wrong"})
    assert response.status_code == 200
    assert b"Username: Ensure this value has at most 150 characters" in response.content  # not "did not match"
    assert b'maxlength="150"' in response.content
    assert not AuditEvent.objects.filter(action="auth.login_failed", subject_id=username[:64]).exists()


def test_a_nul_byte_in_a_stored_header_is_refused_before_sign_in():
    username = f"nul-agent-{uuid.uuid4().hex[:8]}"
    response = Client().post(
        "/accounts/login/", {"username": username, "password": "wrong"}, HTTP_USER_AGENT=f"probe{NUL}agent"
    )
    # The sign-in page's own refusal (the console's error page: it was the APIs' JSON), naming the header.
    assert response.status_code == 400 and response["Content-Type"].startswith("text/html")
    assert "header User-Agent contains a NUL byte" in response.content.decode()
    assert not AuditEvent.objects.filter(subject_id=username).exists()


@pytest.mark.parametrize("path", ["/api/threads", "/lg/threads", "/lg/threads/search", "/api/external-tasks"])
def test_a_multipart_form_sent_to_an_api_is_a_4xx_not_a_500(personas, path):
    """The NUL check parsed the form first, which consumed the stream: the API's JSON parser then raised
    RawPostDataException reading the body. Every API takes JSON; a form is refused as such."""
    response = Client(raise_request_exception=False).post(
        path, {"graph": "loan_approval", "note": "x"}, headers={"Authorization": f"Bearer {personas['admin'].token}"}
    )
    assert 400 <= response.status_code < 500, response.content
    assert response.json()["error"]["code"]


def test_a_multipart_form_with_a_nul_byte_is_still_refused_naming_it(personas):
    response = Client().post(
        "/api/threads", {"note": f"x{NUL}"}, headers={"Authorization": f"Bearer {personas['admin'].token}"}
    )
    assert error_of(response, 422)["field"] == "note"


# --- NUL bytes on PostgreSQL ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,field",
    [
        (thread_body(input=loan_input(applicant=f"Ada{NUL}")), "input.applicant"),
        (thread_body(metadata={"case": f"C-1{NUL}"}), "metadata.case"),
        (thread_body(metadata={f"ca{NUL}se": "C-1"}), "metadata.ca\\u0000se"),
        (thread_body(metadata={"docs": [{"note": NUL}]}), "metadata.docs[0].note"),
        ({"graph": f"loan_approval{NUL}"}, "graph"),
    ],
    ids=["input", "metadata-value", "metadata-key", "metadata-nested", "graph"],
)
def test_a_nul_byte_in_a_thread_request_is_refused_naming_the_field(operator, body, field):
    before = Thread.objects.count()
    error = error_of(operator.client.post("/api/threads", body), 422)
    assert error["field"] == field
    assert "NUL" in error["message"]
    assert Thread.objects.count() == before


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"decision": "reject", "reason": f"no{NUL}"}, "reason"),
        ({"decision": "approve", "reason": "ok", "checkpoint_id": NUL}, "checkpoint_id"),
        ({"decision": "approve", "reason": "ok", "resume": {"note": NUL}}, "resume.note"),
        ({"decision": "respond", "message": f"hi{NUL}"}, "message"),
    ],
    ids=["reason", "checkpoint_id", "resume", "message"],
)
def test_a_nul_byte_in_a_decision_is_refused_and_nothing_is_written(reviewer, loan_task, extra, field):
    before = snapshot(loan_task["id"])
    error = error_of(api_decide(reviewer, loan_task, None, **extra), 422)
    assert error["field"] == field
    assert snapshot(loan_task["id"]) == before


@pytest.mark.parametrize(
    "path,body,field",
    [
        ("/lg/threads", {"metadata": {"case": NUL}}, "metadata.case"),
        ("/lg/threads/search", {"metadata": {"case": NUL}}, "metadata.case"),
        ("/lg/threads/search", {"values": {"applicant": f"A{NUL}"}}, "values.applicant"),
        ("/lg/threads/search", {"ids": [NUL]}, "ids[0]"),
        ("/lg/assistants/search", {"graph_id": NUL}, "graph_id"),
    ],
)
def test_a_nul_byte_in_a_platform_api_body_is_refused(operator, path, body, field):
    before = Thread.objects.count()
    error = error_of(operator.client.post(path, body), 422)
    assert error["field"] == field
    assert Thread.objects.count() == before


@pytest.mark.parametrize(
    "path,params,field",
    [
        ("/api/tasks", {"graph": NUL}, "graph"),
        ("/api/audit", {"action": f"decision{NUL}"}, "action"),
        ("/api/audit/export", {"actor": NUL}, "actor"),
        ("/lg/threads/00000000-0000-0000-0000-000000000000/runs", {"status": NUL}, "status"),
    ],
)
def test_a_nul_byte_in_a_query_parameter_is_refused_naming_it(personas, path, params, field):
    error = error_of(personas["admin"].client.get(path, **params), 422)
    assert error["field"] == field


def test_a_nul_byte_in_a_path_parameter_is_refused(personas):
    error = error_of(personas["admin"].client.get("/api/webhooks/probe%00name/deliveries"), 400)
    assert error["field"] == "path"


@pytest.mark.parametrize(
    "field,shown",
    [
        ("input.applicant", "input.applicant: the text contains a NUL byte"),
        ("meta.case", "meta.case: the text contains a NUL byte"),  # under the metadata, as its other errors
        ("metadata_json", "Metadata (JSON object): the text contains a NUL byte"),  # as its label reads
    ],
)
def test_a_nul_byte_in_the_start_form_is_a_form_error_and_nothing_is_written(personas, field, shown):
    """The middleware answered the API's JSON 422 in place of the start page."""
    before = Thread.objects.count()
    typed = {"graph": "loan_approval", "input.applicant": "Ada", "input.amount": "100", field: f"Ada{NUL}"}
    response = console_client(personas["operator"]).post("/threads/new", typed)
    assert response.status_code == 422 and response["Content-Type"].startswith("text/html")
    assert shown in response.content.decode()
    assert Thread.objects.count() == before


@pytest.mark.parametrize("field", ["username", "email", "first_name", "last_name"])
def test_a_nul_byte_in_the_new_user_form_is_a_form_error_next_to_the_field_and_no_user_is_made(personas, field):
    """The middleware answered the API's JSON 422 in place of the new-user page."""
    from django.contrib.auth.models import User

    before = User.objects.count()
    typed = {"username": f"nul-{uuid.uuid4().hex[:8]}", "roles": "reviewer", field: f"a{NUL}b"}
    response = console_client(personas["admin"]).post("/users/new", typed)
    assert response.status_code == 422 and response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert 'class="field-error"' in html and f"{field}: the text contains a NUL byte" in html
    assert User.objects.count() == before


@pytest.mark.parametrize("htmx", [True, False], ids=["htmx", "plain form"])
def test_a_nul_byte_in_a_console_comment_is_refused_at_the_comment_form(personas, htmx):
    """The middleware answered the API's JSON error, which htmx swapped in place of the conversation."""
    task = task_make()
    headers = {"HX-Request": "true"} if htmx else {}
    response = console_client(personas["reviewer"]).post(
        f"/tasks/{task.pk}/comments", {"body": f"see{NUL}this"}, headers=headers
    )
    assert response.status_code == 422 and response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert 'id="comment-error"' in html and "body: control characters are not allowed" in html
    assert "see\ufffdthis</textarea>" in html  # what was typed, kept, the NUL shown as such
    assert not Comment.objects.filter(task=task).exists()


@pytest.mark.parametrize("field", ["username", "password"])
def test_a_nul_byte_at_sign_in_is_a_message_naming_the_field(field):
    """It was a 422 of the API's JSON, and the sign-in page said nothing."""
    username = f"nul-{uuid.uuid4().hex[:8]}"
    typed = {"username": username, "password": "wrong", field: f"a{NUL}b"}
    response = Client().post("/accounts/login/", typed)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    error = response.content.decode().split('id="login-error"', 1)[1].split("</p>", 1)[0]
    assert f"{field.capitalize()}: Null characters are not allowed." in error
    assert not AuditEvent.objects.filter(action="auth.login_failed", subject_id=username).exists()


def test_a_nul_byte_in_a_console_decision_reason_is_refused(personas):
    """On the form, beside the reason (tests/console/test_json_boxes.py has the boxes), not the API's JSON."""
    task = task_make()
    response = console_decide(console_client(personas["reviewer"]), task, decision="reject", reason=f"no{NUL}")
    assert response.status_code == 422
    html = response.content.decode()
    assert 'id="f-reason-err"' in html and "the text contains a NUL byte" in html.split('id="f-reason-err"')[1]
    assert Decision.objects.filter(task=task).count() == 0


# --- numbers: non-finite, beyond 64 bits ---------------------------------------------------------


@pytest.mark.parametrize("token", ["1e309", "-1e309", "NaN", "Infinity", "-Infinity"])
def test_a_non_finite_number_in_a_thread_request_is_refused(operator, token):
    raw = json.dumps(thread_body(metadata={"x": 0})).replace('{"x": 0}', '{"x": ' + token + "}")
    before = Thread.objects.count()
    error = error_of(operator.client.post("/api/threads", raw=raw), 422)
    assert error["field"] == "metadata.x"
    assert "finite" in error["message"]
    assert Thread.objects.count() == before


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**64])
def test_an_integer_beyond_64_bits_in_a_thread_input_is_refused(operator, value):
    before = Thread.objects.count()
    error = error_of(operator.client.post("/api/threads", thread_body(input=loan_input(amount=value))), 422)
    assert error["field"] == "input.amount"
    assert Thread.objects.count() == before


def test_the_largest_64_bit_integer_is_still_accepted_by_the_parser(operator):
    # Refused by the graph's own input rules if at all, never by the edge.
    response = operator.client.post("/api/threads", thread_body(metadata={"big": 2**63 - 1, "small": -(2**63)}))
    assert response.status_code == 201, response.content


def test_a_non_finite_number_in_a_console_start_form_is_a_form_error(personas):
    before = Thread.objects.count()
    response = console_client(personas["operator"]).post(
        "/threads/new",
        {
            "graph": "loan_approval",
            "input.applicant": "Ada",
            "input.loan_id": "L-1",
            "input.amount": "1e309",
            "input.income": "1",
            "metadata_json": '{"x": NaN}',
        },
    )
    assert response.status_code == 422
    assert b"must be finite" in response.content
    assert Thread.objects.count() == before


# --- bounds of offsets and ids -----------------------------------------------------------------


@pytest.fixture
def lg_thread(operator) -> dict[str, Any]:
    response = operator.client.post("/lg/threads", {"metadata": {"graph_id": "loan_approval"}})
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.parametrize("offset", [2**63, 2**64, 10**7])
def test_an_offset_past_the_bound_on_thread_search_is_refused(operator, offset):
    error = error_of(operator.client.post("/lg/threads/search", {"offset": offset}), 422)
    assert error["field"] == "offset"


@pytest.mark.parametrize("offset", [str(2**63), str(2**64)])
def test_an_offset_past_the_bound_on_a_threads_runs_is_refused(operator, lg_thread, offset):
    error = error_of(operator.client.get(f"/lg/threads/{lg_thread['thread_id']}/runs", offset=offset), 422)
    assert error["field"] == "offset"


@pytest.mark.parametrize(
    "path,params,field",
    [
        ("/api/webhook-deliveries", {"subscription": str(2**64)}, "subscription"),
        ("/api/webhook-deliveries", {"subscription": str(2**63)}, "subscription"),
        ("/api/audit", {"before_id": str(2**64)}, "before_id"),
    ],
)
def test_an_id_beyond_64_bits_in_a_query_is_refused(personas, path, params, field):
    error = error_of(personas["admin"].client.get(path, **params), 422)
    assert error["field"] == field


def test_an_id_beyond_64_bits_in_a_path_is_refused(personas):
    error = error_of(personas["admin"].client.post(f"/api/webhook-deliveries/{2**64}/retry"), 422)
    assert error["field"] == "delivery_id"


def test_a_history_cursor_that_is_no_checkpoint_id_is_refused_not_ignored(operator):
    thread = thread_start(operator, "loan_approval", loan_input())
    error = error_of(operator.client.get(f"/api/threads/{thread['id']}/history", before="garbage"), 422)
    assert error["field"] == "before"


@pytest.mark.parametrize("before", ["garbage", {"checkpoint_id": "garbage"}])
def test_a_platform_history_cursor_that_is_no_checkpoint_id_is_refused(operator, lg_thread, before):
    response = operator.client.post(f"/lg/threads/{lg_thread['thread_id']}/history", {"before": before})
    assert error_of(response, 422)["field"] in ("before", "before.checkpoint_id")


# --- nesting and lengths -------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [65, 900, 5000])
def test_a_deeply_nested_body_is_refused_on_both_apis(operator, depth):
    before = Thread.objects.count()
    raw = json.dumps(thread_body(metadata={"deep": 0})).replace('"deep": 0', f'"deep": {nested(depth)}')
    error = error_of(operator.client.post("/api/threads", raw=raw), 422)
    assert "nested deeper than 64" in error["message"]
    raw = '{"metadata": {"deep": ' + nested(depth) + "}}"
    error = error_of(operator.client.post("/lg/threads/search", raw=raw), 422)
    assert "nested deeper than 64" in error["message"]
    assert Thread.objects.count() == before


def test_nesting_within_the_limit_is_accepted(operator):
    raw = json.dumps(thread_body(metadata={"deep": 0})).replace('"deep": 0', f'"deep": {nested(60)}')
    assert operator.client.post("/api/threads", raw=raw).status_code == 201


@pytest.fixture
def webhook_endpoint() -> WebhookEndpoint:
    return webhook_endpoint_create(
        actor=None, name=f"edge-{uuid.uuid4().hex[:8]}", graph="loan_approval", gates=["human_review"]
    )


def signed_post(endpoint: WebhookEndpoint, raw: bytes) -> Any:
    headers = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in webhook_sign(endpoint.secrets[0], raw).items()}
    return Client().post(f"/api/webhooks/{endpoint.name}", raw, content_type="application/json", **headers)


@pytest.mark.parametrize("depth", [100, 5000])
def test_a_signed_webhook_nested_deeply_is_refused_and_decides_nothing(webhook_endpoint, depth):
    decisions = Decision.objects.count()
    raw = ('{"correlation_key": "k", "status": "approved", "x": ' + nested(depth) + "}").encode()
    response = signed_post(webhook_endpoint, raw)
    error = error_of(response, 422)
    assert "nested deeper than 64" in error["message"]
    assert Decision.objects.count() == decisions
    [delivery] = InboundDelivery.objects.filter(endpoint=webhook_endpoint)
    assert delivery.status == "refused" and delivery.http_status == 422


def test_a_signed_webhook_with_a_nul_byte_in_its_correlation_key_is_refused(webhook_endpoint):
    decisions = Decision.objects.count()
    raw = json.dumps({"correlation_key": f"k{NUL}", "status": "approved"}).encode()
    error = error_of(signed_post(webhook_endpoint, raw), 422)
    assert error["field"] == "correlation_key"
    assert Decision.objects.count() == decisions


def test_a_nul_byte_in_a_webhook_id_header_is_refused_before_anything_is_logged(webhook_endpoint):
    raw = b'{"correlation_key": "k", "status": "approved"}'
    headers = webhook_sign(webhook_endpoint.secrets[0], raw, msg_id=f"msg{NUL}1")
    meta = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    response = Client().post(f"/api/webhooks/{webhook_endpoint.name}", raw, content_type="application/json", **meta)
    assert error_of(response, 400)["field"].lower() == "webhook-id"
    assert not InboundDelivery.objects.filter(endpoint=webhook_endpoint).exists()


@pytest.mark.parametrize("length", [65, 100])
def test_a_webhook_endpoint_name_over_the_limit_is_refused_writing_nothing(personas, length):
    name = (uuid.uuid4().hex + "e" * length)[:length]
    endpoints = WebhookEndpoint.objects.count()
    body = {"name": name, "graph": "loan_approval", "gates": ["human_review"]}
    response = personas["admin"].client.post("/api/webhook-endpoints", body)
    error = error_of(response, 422)
    assert error["field"] == "name"
    assert WebhookEndpoint.objects.count() == endpoints
    assert not AuditEvent.objects.filter(action="webhook.endpoint_created", subject_id=name[:64]).exists()


# --- SQLite: the embedded stack ------------------------------------------------------------------


def sqlite_count(server: Any, table: str) -> int:
    with sqlite3.connect(server.database) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


@pytest.mark.parametrize("token", ["1e309", "NaN", "-Infinity"])
def test_a_non_finite_number_in_metadata_is_refused_on_sqlite(sqlite_server, token):
    raw = json.dumps(thread_body(metadata={"x": 0})).replace('{"x": 0}', '{"x": ' + token + "}")
    before = sqlite_count(sqlite_server, "runtime_thread"), sqlite_count(sqlite_server, "runtime_run")
    with sqlite_server.client() as client:
        response = client.post("/api/threads", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "metadata.x"
    assert (sqlite_count(sqlite_server, "runtime_thread"), sqlite_count(sqlite_server, "runtime_run")) == before


@pytest.mark.parametrize(
    "method,path,kwargs,field",
    [
        ("post", "/lg/threads/search", {"json": {"offset": 2**63}}, "offset"),
        ("get", "/lg/threads/{thread}/runs", {"params": {"offset": str(2**63)}}, "offset"),
        ("get", "/api/webhook-deliveries", {"params": {"subscription": str(2**64)}}, "subscription"),
        ("get", "/api/audit", {"params": {"before_id": str(2**63)}}, "before_id"),
        ("get", "/api/threads/{thread}/history", {"params": {"before": "garbage"}}, "before"),
    ],
)
def test_out_of_range_numbers_and_bad_cursors_are_refused_on_sqlite(sqlite_server, method, path, kwargs, field):
    with sqlite_server.client() as client:
        response = client.request(method.upper(), path.format(thread=sqlite_server.thread_id), **kwargs)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_a_decision_with_an_integer_beyond_64_bits_is_refused_on_sqlite(sqlite_server):
    before = sqlite_count(sqlite_server, "approvals_decision")
    with sqlite_server.client() as client:
        response = client.post(
            f"/api/tasks/{sqlite_server.task_id}/decision",
            json={"decision": "edit", "reason": "r", "edits": {"amount": 2**64}},
        )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "edits.amount"
    assert sqlite_count(sqlite_server, "approvals_decision") == before


def test_a_session_write_to_the_api_without_its_csrf_token_says_what_to_send(personas):
    """It answered ``{"code": "error", "message": "CSRF check Failed", "field": null}``."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(personas["operator"].user)
    before = Thread.objects.count()
    response = client.post("/api/threads", {"graph": "loan_approval", "input": {}}, content_type="application/json")
    error = error_of(response, 403)
    assert (error["code"], error["field"]) == ("csrf_failed", "X-CSRFToken")
    assert Thread.objects.count() == before


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer "}, {"Authorization": "Basic Zm9vOmJhcg=="}])
@pytest.mark.parametrize("path", ["/api/threads", "/lg/threads"])
def test_a_write_with_no_credentials_at_all_is_a_401_not_a_csrf_refusal(headers, path):
    """README: a wrong or missing token is a 401. Without a session there is nothing to forge, but ninja
    checks CSRF first, and a newcomer who forgot the token was told to send X-CSRFToken."""
    before = Thread.objects.count()
    response = Client(enforce_csrf_checks=True).post(path, {}, content_type="application/json", headers=headers)
    assert response.status_code == 401, response.content
    assert response.json()["error"]["code"] == "unauthenticated"
    assert Thread.objects.count() == before


@pytest.mark.parametrize("path", ["/api/nonexistent", "/api/threads/", "/api/", "/lg/nonexistent", "/lg/threads/x/y/z"])
def test_a_path_no_operation_serves_is_the_apis_json_404(operator, path):
    response = operator.client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"]["field"] == "path"
    # A write there, with or without a token, is the same answer, not Django's HTML CSRF page.
    for headers in (operator.client.headers, {}):
        written = Client(enforce_csrf_checks=True).post(path, "{}", content_type="application/json", headers=headers)
        assert written.status_code == 404 and written.json()["error"]["field"] == "path", written.content[:200]


# --- date-times whose UTC time is outside Python's range (years 1..9999) ---------------------------

FAR_FUTURE = "9999-12-31T23:59:59-12:00"  # UTC: the year 10000
FAR_PAST = "0001-01-01T00:00:00+12:00"  # UTC: the year 0


def put(persona: Any, path: str, body: Any) -> Any:
    return persona.client.client.put(
        path, json.dumps(body), content_type="application/json", headers=persona.client.headers
    )


@pytest.mark.parametrize(("field", "value"), [("ends_at", FAR_FUTURE), ("starts_at", FAR_PAST)])
def test_an_away_time_out_of_range_in_utc_is_refused_naming_it(personas, field, value):
    reviewer, cover = personas["reviewer"], personas["reviewer2"]
    response = put(reviewer, "/api/me/away", {"delegate": cover.username, field: value})
    error = error_of(response, 422)
    assert error["field"] == field and "out of range" in error["message"], error
    assert not Away.objects.filter(user=reviewer.user).exists()


def test_an_external_task_due_out_of_range_in_utc_is_refused_writing_nothing(operator):
    key = f"far-{uuid.uuid4().hex[:8]}"
    response = operator.client.post(
        "/api/external-tasks", {"source": "edge", "key": key, "title": "t", "due_at": FAR_FUTURE}
    )
    error = error_of(response, 422)
    assert error["field"] == "due_at" and "out of range" in error["message"], error
    assert operator.client.get(f"/api/external-tasks/by-key/edge/{key}").status_code == 404


@pytest.mark.parametrize(
    "params",
    [
        {"until": FAR_FUTURE},
        {"since": FAR_PAST},
        {"until": "9999-12-31"},  # a bare date as until means the end of that day: the year 10000
        {"until": "0001-01-01T00:00:00Z"},  # the default since, a week before, is before the year 1
        {"since": "9999-12-31T00:00:00Z", "until": "9999-12-31T23:59:59Z"},  # the hourly points near the end
    ],
)
def test_a_dashboard_range_out_of_range_is_a_4xx_naming_it(personas, params):
    admin = personas["admin"]
    response = admin.client.get("/api/dashboard", **params)
    if response.status_code == 200:  # representable after all: answered, not crashed
        return
    error = error_of(response, 422)
    assert error["field"] in params and "out of range" in error["message"], error


@pytest.mark.parametrize(("name", "value"), [("since", FAR_FUTURE), ("until", FAR_PAST)])
def test_an_audit_export_out_of_range_is_refused_before_streaming_and_not_audited(personas, name, value):
    admin = personas["admin"]
    exported = AuditEvent.objects.filter(action="audit.exported").count()
    response = admin.client.get("/api/audit/export", **{name: value})
    error = error_of(response, 422)
    assert error["field"] == name and "out of range" in error["message"], error
    assert AuditEvent.objects.filter(action="audit.exported").count() == exported  # as any refused export


def test_the_audit_export_command_prints_one_error_for_a_date_out_of_range(tmp_path):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="since: is out of range"):
        call_command("audit_export", "--since", FAR_FUTURE, "--output", str(tmp_path / "x.jsonl"))
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize("path", ["/audit/", "/decisions/", "/dashboard/"])
@pytest.mark.parametrize(("name", "value"), [("since", FAR_PAST), ("until", FAR_FUTURE)])
def test_a_console_date_filter_out_of_range_is_a_form_error_not_a_500(personas, path, name, value):
    client = Client(raise_request_exception=False)
    client.force_login(personas["admin"].user)
    response = client.get(path, {name: value})
    assert response.status_code in (200, 400, 422), response.status_code
    assert b"out of range" in response.content


def test_a_console_away_time_out_of_range_is_a_form_error_not_a_500(personas):
    client = Client(raise_request_exception=False)
    client.force_login(personas["reviewer"].user)
    response = client.post("/settings/away", {"delegate": personas["reviewer2"].username, "ends_at": FAR_FUTURE})
    assert response.status_code in (200, 400, 422), response.status_code
    assert b"out of range" in response.content
    assert not Away.objects.filter(user=personas["reviewer"].user).exists()
