"""External tasks through /api/external-tasks: idempotent create, the shared decision rules, the signed result."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from standardwebhooks import Webhook

from approvals.external_api import MAX_WAIT_SECONDS
from approvals.models import ApprovalTask, AuditEvent, ExternalTask, TaskKind
from approvals.redaction import MASK
from tests.conftest import api_decide, api_wait, scaled
from tests.external.conftest import create, engine_persona, task_body

pytestmark = pytest.mark.usefixtures("live_db")


def test_create_is_idempotent_on_the_engines_key(engine, source):
    first = create(engine.client, task_body(source))
    assert first.status_code == 201, first.content
    again = create(engine.client, task_body(source))
    assert again.status_code == 200, again.content
    assert again.json()["id"] == first.json()["id"]
    assert first.json()["secret"].startswith("whsec_")
    assert again.json()["secret"] == first.json()["secret"]  # a retried create still learns the secret
    task = ApprovalTask.objects.get(pk=first.json()["id"])
    assert task.kind == TaskKind.EXTERNAL and task.graph == f"external:{source}"


def test_the_same_key_with_a_different_body_is_refused_and_writes_nothing(engine, source):
    assert create(engine.client, task_body(source)).status_code == 201
    response = create(engine.client, task_body(source, title="Something else"))
    assert response.status_code == 409
    assert response.json()["error"]["field"] == "key"
    assert ExternalTask.objects.filter(source__name=source).count() == 1


def test_a_replay_by_another_principal_answers_alike_whatever_it_puts_where_it_sees_masks(engine, source):
    """An outside tester, as another operator of the source, replayed a key with guesses of its masked SSN: a
    wrong one was a 409 ("already used for a different task"), the right one a 200 -- an oracle."""
    from django.contrib.auth import get_user_model

    from approvals.models import GraphAssignment
    from approvals.roles import roles_ensure
    from approvals.tokens import token_issue
    from tests.conftest import ApiClient

    body = task_body(source, redaction_paths=["applicant.ssn"])
    first = create(engine.client, body)
    assert first.status_code == 201, first.content
    other = get_user_model().objects.create_user(f"other-{source}")
    other.groups.add(roles_ensure()["operator"])
    GraphAssignment.objects.create(user=other, graph=f"external:{source}")
    client = ApiClient(token_issue(user=other))

    def guess(ssn: str, **extra: Any) -> Any:
        return create(
            client, {**body, "payload": {**body["payload"], "applicant": {"name": "Ada", "ssn": ssn}}, **extra}
        )

    answers = [guess("123-45-6789"), guess("000-00-0000")]
    assert [a.status_code for a in answers] == [200, 200], [a.content for a in answers]
    assert answers[0].json() == answers[1].json() and answers[0].json()["id"] == first.json()["id"]
    assert guess("000-00-0000", title="Something else").status_code == 409  # what they see still counts
    # The creator sent the body: answered exactly, a different SSN under its key is its own mistake to hear of.
    assert (
        create(
            engine.client, {**body, "payload": {"amount": 12000, "applicant": {"name": "Ada", "ssn": "x"}}}
        ).status_code
        == 409
    )
    stored = ApprovalTask.objects.get(pk=first.json()["id"]).payload["details"]
    assert stored["applicant"]["ssn"] == "123-45-6789" and ExternalTask.objects.filter(source__name=source).count() == 1


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"decisions": ["maybe"]}, "decisions[0]"),
        ({"decisions": ["approve", "edit"]}, "decisions"),  # an edit needs a response schema
        ({"response_schema": {"type": "no-such-type"}}, "response_schema"),
        ({"response_schema": {"$ref": "https://example.com/schema.json"}}, "response_schema"),  # never fetched
        ({"response_schema": {"$ref": "#/$defs/missing"}}, "response_schema"),
        ({"response_schema": {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}}, "response_schema"),
        ({"response_schema": {"allOf": [{"$ref": "#"}]}}, "response_schema"),  # a loop through allOf
        ({"response_schema": {"$schema": "https://example.com/my-draft", "type": "object"}}, "response_schema"),
        ({"redaction_paths": [" "]}, "redaction_paths[0]"),
        ({"redaction_paths": ["applicant.ssn", "a..b"]}, "redaction_paths[1]"),
        ({"redaction_paths": ["a[x]"]}, "redaction_paths[0]"),
        ({"decisions": ["approve", "approve"]}, "decisions"),
        ({"due_at": "2001-01-01T00:00:00Z"}, "due_at"),
        ({"due_at": "2030-01-01T00:00:00"}, "due_at"),  # no time zone: which instant is it?
        ({"callback_url": "http://169.254.169.254/latest"}, "callback_url"),
        ({"callback_url": "ftp://example.com/x"}, "callback_url"),
        ({"secret": "not-a-secret"}, "secret"),
        ({"required_approvals": 0}, "required_approvals"),
        ({"source": "Bad Source!"}, "source"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(engine, source, extra, field):
    body = {**task_body(source), **extra}
    response = create(engine.client, body)
    assert 400 <= response.status_code < 500, response.content
    assert response.json()["error"]["field"] == field
    assert not ExternalTask.objects.filter(key="k1", source__name=source).exists()


def test_an_engine_may_only_create_for_its_own_source(engine, source, personas):
    other = create(engine.client, task_body(source + "x"))
    assert other.status_code == 403 and other.json()["error"]["field"] == "source"
    assert create(personas["outsider"].client, task_body(source)).status_code == 403
    assert create(personas["reviewer"].client, task_body(source)).status_code == 403  # reviewers do not start


def test_reviewers_need_an_assignment_to_the_source(engine, source, personas):
    task_id = create(engine.client, task_body(source)).json()["id"]
    unassigned = personas["loan_reviewer"]
    assert unassigned.client.get(f"/api/tasks/{task_id}").status_code == 404
    assert api_decide(unassigned, task_id, reason="ok").status_code == 404
    inbox = personas["reviewer"].client.get("/api/tasks", status="pending", graph=f"external:{source}").json()
    assert [t["id"] for t in inbox["items"]] == [task_id]


def test_its_own_redaction_paths_mask_the_payload_and_the_audit(engine, source, personas):
    task_id = create(engine.client, task_body(source, redaction_paths=["applicant.ssn"])).json()["id"]
    shown = personas["reviewer"].client.get(f"/api/tasks/{task_id}").json()
    assert shown["payload"]["details"]["applicant"] == {"name": "Ada", "ssn": MASK}
    assert shown["allowed_decisions"] == ["approve", "reject"]
    revealed = personas["approver"].client.get(f"/api/tasks/{task_id}").json()
    assert revealed["payload"]["details"]["applicant"]["ssn"] == "123-45-6789"


def test_a_decision_comes_back_signed_exactly_once(engine, source, personas):
    created = create(engine.client, task_body(source)).json()
    task_id, secret = created["id"], created["secret"]
    pending = engine.client.get(f"/api/external-tasks/{task_id}/decision", wait=0)
    assert pending.status_code == 202 and pending.json()["status"] == "pending"

    assert api_decide(personas["reviewer"], task_id, reason="ok").status_code == 201
    answer = engine.client.get(f"/api/external-tasks/{task_id}/decision", wait=0)
    assert answer.status_code == 200
    result = Webhook(secret).verify(answer.content, dict(answer.headers))
    assert result["decision"] == "approve" and result["key"] == "k1" and result["source"] == source
    assert [s["actor"] for s in result["signers"]] == [personas["reviewer"].username]

    second = api_decide(personas["reviewer2"], task_id, "reject", reason="ok")
    assert second.status_code == 409
    again = engine.client.get(f"/api/external-tasks/{task_id}/decision", wait=0)
    assert again.content == answer.content and again.headers["webhook-id"] == answer.headers["webhook-id"]
    actions = list(AuditEvent.objects.filter(subject_id=task_id).order_by("id").values_list("action", flat=True))
    assert actions[0] == "task.opened" and actions[-2:] == ["decision.made", "external.decided"]


def test_the_long_poll_returns_when_the_decision_lands(engine, source, personas):
    task_id = create(engine.client, task_body(source)).json()["id"]
    waiting = threading.Event()
    answers: list[Any] = []

    def poll() -> None:
        waiting.set()
        answers.append(
            engine.client.get(f"/api/external-tasks/{task_id}/decision", wait=api_wait(30, limit=MAX_WAIT_SECONDS))
        )

    poller = threading.Thread(target=poll)
    poller.start()
    waiting.wait(scaled(5))
    assert api_decide(personas["reviewer"], task_id, reason="ok").status_code == 201
    poller.join(scaled(30))
    assert answers and answers[0].status_code == 200
    assert answers[0].json()["decision"] == "approve"


def test_quorum_and_separation_of_duties_hold(engine, source, personas):
    body = task_body(source, required_approvals=2, decisions=["approve", "reject", "edit"])
    body["response_schema"] = {"type": "object", "properties": {"limit": {"type": "integer"}}}
    task_id = create(engine.client, body).json()["id"]
    bad = api_decide(personas["approver"], task_id, "edit", reason="ok", action_args={"limit": "lots"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "action_args.limit"
    assert (
        api_decide(personas["approver"], task_id, "edit", reason="ok", action_args={"limit": 5000}).status_code == 201
    )
    assert engine.client.get(f"/api/external-tasks/{task_id}/decision").status_code == 202  # one of two
    assert api_decide(personas["approver"], task_id, reason="ok").status_code == 409  # the same signer twice
    assert api_decide(personas["approver2"], task_id, reason="ok").status_code == 201  # the edit was a proposal: 1 of 2
    assert engine.client.get(f"/api/external-tasks/{task_id}/decision").status_code == 202
    refused = api_decide(personas["reviewer"], task_id, reason="ok")  # the final approval needs the approver role
    assert refused.status_code == 403
    assert api_decide(personas["admin"], task_id, reason="ok").status_code == 201
    result = engine.client.get(f"/api/external-tasks/{task_id}/decision").json()
    assert result["decision"] == "approve" and len(result["signers"]) == 3
    assert result["response"] == {"limit": 5000}


def test_state_edits_are_refused_for_a_task_without_a_graph(engine, source, personas):
    task_id = create(engine.client, task_body(source)).json()["id"]
    response = api_decide(personas["reviewer"], task_id, reason="ok", edits={"x": 1})
    assert response.status_code == 422 and response.json()["error"]["field"] == "edits"


def test_the_console_task_page_renders_an_external_task(engine, source, personas):
    from django.test import Client

    task_id = create(engine.client, task_body(source, redaction_paths=["applicant.ssn"])).json()["id"]
    browser = Client()
    browser.force_login(personas["reviewer"].user)
    page = browser.get(f"/tasks/{task_id}/")
    assert page.status_code == 200, page.content[:500]
    assert b"Release wire 42" in page.content and b"123-45-6789" not in page.content


def test_the_engine_reads_its_task_by_key(engine, source):
    task_id = create(engine.client, task_body(source, key="wire/42:1")).json()["id"]
    found = engine.client.get(f"/api/external-tasks/by-key/{source}/wire/42:1")
    assert found.status_code == 200 and found.json()["id"] == task_id
    assert found.json()["secret"] is None  # shown to the creating call only
    assert engine.client.get(f"/api/external-tasks/by-key/{source}/nope").status_code == 404
    stranger = engine_persona(source + "y")
    assert stranger.client.get(f"/api/external-tasks/{task_id}").status_code == 404
    assert stranger.client.get(f"/api/external-tasks/by-key/{source}/wire/42:1").status_code == 404


@pytest.mark.parametrize("key", ["a/b/../c", "a/./c", "..", ".", "./a", "a/..", "a//b", "/a", "a/", "/"])
def test_a_key_whose_path_clients_rewrite_is_refused_and_writes_nothing(engine, source, key):
    """``a/b/../c`` was accepted, but clients normalise the path of GET .../by-key/{source}/a/b/../c to
    .../a/c (RFC 3986 dot segments), so the task could never be read by its key; empty segments too."""
    response = create(engine.client, task_body(source, key=key))
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "key"
    assert not ExternalTask.objects.filter(source__name=source).exists()


def test_dots_inside_a_key_segment_are_kept_and_read_back_by_key(engine, source):
    import httpx

    key = "v1.2/..wf/.../run.."
    task_id = create(engine.client, task_body(source, key=key)).json()["id"]
    url = f"/api/external-tasks/by-key/{source}/{key}"
    assert httpx.URL(f"http://gatehouse{url}").path == url  # what a client sends: not rewritten
    found = engine.client.get(url)
    assert found.status_code == 200 and found.json()["id"] == task_id, found.content
    assert httpx.URL(f"http://gatehouse/api/external-tasks/by-key/{source}/a/b/../c").path.endswith("/a/c")


def test_a_callback_subscription_says_it_is_one_beside_a_subscription_to_events(engine, source, personas):
    """An external task's callback is listed with the outbound subscriptions: ``kind`` tells it from one
    that receives events (it names no event type and receives only the task's result)."""
    operator = personas["operator"].client
    created = create(engine.client, task_body(source, callback_url="http://127.0.0.1:9/callback"))
    assert created.status_code == 201, created.content
    subscribed = operator.post(
        "/api/webhook-subscriptions",
        {"url": "http://127.0.0.1:9/events", "graph": "loan_approval", "event_types": ["thread.failed"]},
    )
    assert subscribed.status_code == 201, subscribed.content
    try:
        listed = {s["id"]: s for s in operator.get("/api/webhook-subscriptions").json()}
        callback_id = ExternalTask.objects.get(task_id=created.json()["id"]).subscription_id
        assert {k: listed[callback_id][k] for k in ("kind", "event_types", "active", "url")} == {
            "kind": "callback",
            "event_types": [],
            "active": False,
            "url": "http://127.0.0.1:9/callback",
        }
        assert listed[subscribed.json()["id"]]["kind"] == subscribed.json()["kind"] == "events"
    finally:  # no later event of this session goes to a closed port
        assert operator.delete(f"/api/webhook-subscriptions/{subscribed.json()['id']}").status_code == 204


def test_a_due_time_without_a_zone_is_refused_by_the_service_too(engine, source):
    from datetime import datetime

    from approvals.errors import InvalidInput
    from approvals.external import ExternalTaskSpec, external_task_create

    spec = ExternalTaskSpec(source=source, key="k1", title="t", payload={}, due_at=datetime(2030, 1, 1))
    with pytest.raises(InvalidInput) as refused:
        external_task_create(actor=engine.user, spec=spec)
    assert refused.value.field == "due_at" and "time zone" in refused.value.message


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "https://example.com/schema.json"},
        {"$ref": "#/$defs/missing"},
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},  # a loop: RecursionError when applied
    ],
)
def test_an_edit_against_a_schema_that_cannot_be_applied_is_refused_not_a_500(engine, source, personas, schema):
    """A task stored before schemas were checked on create: its answers cannot be checked, so none is accepted."""
    body = task_body(source, decisions=["approve", "reject", "edit"], response_schema={"type": "object"})
    task_id = create(engine.client, body).json()["id"]
    task = ApprovalTask.objects.get(pk=task_id)
    task.payload["proposed_action"]["args_schema"] = schema
    ApprovalTask.objects.filter(pk=task_id).update(response_schema=schema, payload=task.payload)
    edit = api_decide(personas["reviewer"], task_id, "edit", reason="x", action_args={"limit": 1})
    assert edit.status_code == 422, edit.content
    assert edit.json()["error"]["field"] == "action_args"
    assert "schema cannot be applied" in edit.json()["error"]["message"]
    assert engine.client.get(f"/api/external-tasks/{task_id}/decision").status_code == 202  # nothing decided
    assert api_decide(personas["reviewer"], task_id, "reject", reason="cannot check it").status_code == 201


def test_the_result_s_callback_delivery_names_the_event_that_queued_it(engine, source, personas):
    """A decision's deliveries can be listed with the audit event that queued them; an external task's result
    was queued with its thread but no event (found from the outside)."""
    from approvals.models import OutboundDelivery

    created = create(engine.client, task_body(source, key="k-cb", callback_url="http://127.0.0.1:9/callback"))
    assert created.status_code == 201, created.content
    task_id = created.json()["id"]
    assert api_decide(personas["reviewer"], task_id, reason="ok").status_code == 201
    decided = AuditEvent.objects.get(subject_id=task_id, action="external.decided")
    delivery = OutboundDelivery.objects.get(pk=decided.details["callback_delivery"])
    assert delivery.audit_event_id == decided.pk
    thread = ApprovalTask.objects.get(pk=task_id).thread_id
    listed = personas["operator"].client.get("/api/webhook-deliveries", thread=str(thread)).json()
    assert [(d["id"], d["audit_event_id"]) for d in listed] == [(delivery.pk, decided.pk)]


@pytest.mark.parametrize("wait", ["nan", "inf", "-inf"])
def test_a_wait_that_is_no_number_of_seconds_says_so(engine, source, wait):
    """``wait=nan`` was refused as "less than or equal to 60", which it is not: it is no number of seconds."""
    created = create(engine.client, task_body(source, key=f"k-{wait}")).json()
    response = engine.client.get(f"/api/external-tasks/{created['id']}/decision", wait=wait)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "wait" and "finite" in error["message"], error
