"""POST /api/bulk-decisions and GET /api/bulk-decisions/{id}: translation of approvals.bulk, errors naming fields."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from approvals import bulk
from approvals.models import AuditEvent, BulkAction, Decision
from approvals.security import SESSION_AUTH_AT
from approvals.tokens import token_issue
from tests.conftest import ApiClient
from tests.factories import loan_gate, task_decided, task_make
from tests.fake_resumes import fake_resumes_closed  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("live_db", "fake_resumes_closed")


@pytest.fixture(autouse=True)
def run_here(monkeypatch):
    """Run the bulk in this process when it would be dispatched (no worker in these tests)."""
    monkeypatch.setattr(bulk, "bulk_dispatch", lambda *, bulk_id: bulk.bulk_run(bulk_id=bulk_id))


def test_a_bulk_started_over_the_api_decides_each_task_and_reports_skips(personas):
    approver = personas["approver"]
    tag = f"API-{uuid.uuid4().hex[:6]}"
    ok = [task_make(title=f"{tag} {i}", metadata={"case": tag}) for i in range(2)]
    gone = task_decided(by=personas["reviewer"].user, title=f"{tag} gone", metadata={"case": tag})
    response = approver.client.post(
        "/api/bulk-decisions", {"outcome": "approve", "reason": "fine", "task_ids": [str(t.pk) for t in [*ok, gone]]}
    )
    assert response.status_code == 202, response.content
    body = approver.client.get(f"/api/bulk-decisions/{response.json()['id']}").json()
    assert body["status"] == "finished" and body["total"] == 3 and body["done"] == 3
    assert [d["task"] for d in body["decided"]] == [str(t.pk) for t in ok]
    assert body["skipped"] == [
        {
            "task": str(gone.pk),
            "title": f"{tag} gone",
            "code": "already_decided",
            "reason": body["skipped"][0]["reason"],
        }
    ]
    assert Decision.objects.filter(task__in=ok, actor=approver.user).count() == 2


@pytest.mark.parametrize("names", [{"decision": "reject"}, {"decision": "reject", "outcome": "reject"}])
def test_a_bulk_takes_decision_as_a_single_decision_names_it(personas, names):
    approver = personas["approver"]
    task = task_make(title=f"API-{uuid.uuid4().hex[:6]}")
    response = approver.client.post("/api/bulk-decisions", {**names, "reason": "dup", "task_ids": [str(task.pk)]})
    assert response.status_code == 202, response.content
    body = approver.client.get(f"/api/bulk-decisions/{response.json()['id']}").json()
    assert body["decision"] == body["outcome"] == "reject" and body["status"] == "finished"
    assert Decision.objects.get(task=task, actor=approver.user).outcome == "reject"


def test_a_token_scoped_to_one_graph_decides_nothing_of_another_in_bulk(personas):
    # The worker decides the tasks, not the request: it used to load the user afresh, without the token's
    # narrowing, and a token for kyc_onboarding approved a loan it could not even read.
    approver = personas["approver"]
    tag = f"API-{uuid.uuid4().hex[:6]}"
    loan = task_make(graph="loan_approval", title=f"{tag} loan", metadata={"case": tag})
    kyc = task_make(graph="kyc_onboarding", node="compliance_review", title=f"{tag} kyc", metadata={"case": tag})
    scoped = ApiClient(token_issue(user=approver.user, graphs=["kyc_onboarding"], actions=["read", "decide"]))
    assert scoped.get(f"/api/tasks/{loan.pk}").status_code == 404
    missing = str(uuid.uuid4())
    response = scoped.post(
        "/api/bulk-decisions", {"outcome": "approve", "reason": "ok", "task_ids": [str(loan.pk), str(kyc.pk), missing]}
    )
    assert response.status_code == 202, response.content
    body = scoped.get(f"/api/bulk-decisions/{response.json()['id']}").json()
    assert [d["task"] for d in body["decided"]] == [str(kyc.pk)]
    assert not Decision.objects.filter(task=loan).exists()
    # The loan the token may not see reads exactly as a task that does not exist: no title, same reason.
    skipped = {s["task"]: s for s in body["skipped"]}
    unseen, absent = skipped[str(loan.pk)], skipped[missing]
    assert unseen["code"] == absent["code"] == "not_permitted"
    assert unseen["title"] == absent["title"] == "" and unseen["reason"] == absent["reason"]


def test_a_skipped_task_of_a_graph_the_user_may_not_see_shows_no_title(personas):
    reviewer = personas["loan_reviewer"]  # assigned to loan_approval only
    hidden = task_make(graph="kyc_onboarding", node="compliance_review", title="Identity verification: Canary Person")
    assert reviewer.client.get(f"/api/tasks/{hidden.pk}").status_code == 404
    body = {"outcome": "reject", "reason": "x", "task_ids": [str(hidden.pk)]}
    response = reviewer.client.post("/api/bulk-decisions", body)
    assert response.status_code == 202, response.content
    body = reviewer.client.get(f"/api/bulk-decisions/{response.json()['id']}").json()
    assert body["skipped"] == [
        {"task": str(hidden.pk), "title": "", "code": "not_permitted", "reason": body["skipped"][0]["reason"]}
    ]


def test_select_all_matching_a_filter_over_the_api(personas):
    approver = personas["approver"]
    tag = f"API-{uuid.uuid4().hex[:6]}"
    tasks = [task_make(title=f"{tag} {i}", metadata={"case": tag}) for i in range(3)]
    response = approver.client.post("/api/bulk-decisions", {"outcome": "approve", "filter": {"q": tag}})
    assert response.status_code == 202, response.content
    assert set(BulkAction.objects.get(pk=response.json()["id"]).task_ids) == {str(t.pk) for t in tasks}


def test_select_all_matching_a_gate_and_a_thread_by_the_task_lists_names(personas):
    approver = personas["approver"]
    tag = f"API-{uuid.uuid4().hex[:6]}"
    tasks = [task_make(title=f"{tag} {i}", metadata={"case": tag}) for i in range(2)]
    mine = tasks[0]
    listed = approver.client.get("/api/tasks", gate=mine.node, thread=str(mine.thread_id), q=tag).json()["items"]
    assert [t["id"] for t in listed] == [str(mine.pk)]
    wanted = {"gate": mine.node, "thread": str(mine.thread_id), "q": tag}
    response = approver.client.post("/api/bulk-decisions", {"outcome": "approve", "filter": wanted})
    assert response.status_code == 202, response.content
    bulk_action = BulkAction.objects.get(pk=response.json()["id"])
    assert bulk_action.task_ids == [str(mine.pk)]  # what the task list lists, exactly
    assert bulk_action.filter["gate"] == mine.node and bulk_action.filter["thread"] == str(mine.thread_id)


def test_a_bulk_filter_still_takes_node_for_the_gate(personas):
    approver = personas["approver"]
    tag = f"API-{uuid.uuid4().hex[:6]}"
    task = task_make(title=f"{tag} 0", metadata={"case": tag})
    body = {"outcome": "approve", "filter": {"node": task.node, "q": tag}}
    response = approver.client.post("/api/bulk-decisions", body)
    assert response.status_code == 202, response.content
    assert BulkAction.objects.get(pk=response.json()["id"]).task_ids == [str(task.pk)]


@pytest.mark.parametrize(
    "body,status,field",
    [
        ({"outcome": "approve", "filter": {"thread": "nope"}}, 422, "filter.thread"),
        ({"outcome": "edit", "task_ids": [str(uuid.uuid4())]}, 422, "outcome"),
        ({"outcome": "approve"}, 422, "task_ids"),
        ({"outcome": "approve", "task_ids": [str(uuid.uuid4()) for _ in range(bulk.BULK_MAX + 1)]}, 422, "task_ids"),
        ({"outcome": "approve", "task_ids": ["nope"]}, 422, "task_ids[0]"),
        ({"outcome": "approve", "filter": {"status": "decided"}}, 422, "filter.status"),
        ({"outcome": "approve", "filter": "all"}, 422, "filter"),
        ({"outcome": "approve", "task_ids": "all"}, 422, "task_ids"),
        ({"decision": "edit", "task_ids": [str(uuid.uuid4())]}, 422, "decision"),
        ({"task_ids": [str(uuid.uuid4())]}, 422, "decision"),
        ({"decision": "approve", "outcome": "reject", "task_ids": [str(uuid.uuid4())]}, 422, "decision"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field_and_writes_nothing(personas, body, status, field):
    before = (BulkAction.objects.count(), AuditEvent.objects.filter(action="bulk.started").count())
    response = personas["approver"].client.post("/api/bulk-decisions", body)
    assert response.status_code == status, response.content
    assert response.json()["error"]["field"] == field, response.content
    assert (BulkAction.objects.count(), AuditEvent.objects.filter(action="bulk.started").count()) == before


def test_a_stale_session_must_reenter_its_password_once(personas):
    reviewer = personas["approver"]
    client = Client()
    client.force_login(reviewer.user)
    session = client.session  # a sign-in a day old: signing needs the password again
    session[SESSION_AUTH_AT] = (timezone.now() - timedelta(days=1)).isoformat()
    session.save()
    task = task_make(title="session bulk")
    body = {"outcome": "approve", "task_ids": [str(task.pk)]}
    refused = client.post("/api/bulk-decisions", body, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["error"]["field"] == "password"
    signed = client.post("/api/bulk-decisions", {**body, "password": "gatehouse"}, content_type="application/json")
    assert signed.status_code == 202, signed.content
    assert Decision.objects.get(task=task).reauthenticated_at is not None


def test_someone_elses_bulk_is_not_found(personas):
    task = task_make(title="private bulk")
    started = personas["reviewer"].client.post(
        "/api/bulk-decisions", {"outcome": "approve", "task_ids": [str(task.pk)]}
    )
    assert started.status_code == 202
    url = f"/api/bulk-decisions/{started.json()['id']}"
    assert personas["reviewer2"].client.get(url).status_code == 404
    assert personas["auditor"].client.get(url).status_code == 200
    assert personas["reviewer"].client.get(f"/api/bulk-decisions/{uuid.uuid4()}").status_code == 404


def test_the_result_says_which_signatures_closed_their_task_and_which_wait(personas):
    """A signature on a two-approval task was listed among the decided tasks with nothing to count it apart."""
    approver = personas["approver"]
    one = task_make()
    two = task_make(payload=loan_gate(required_approvals=2))
    response = approver.client.post(
        "/api/bulk-decisions", {"outcome": "approve", "reason": "fine", "task_ids": [str(one.pk), str(two.pk)]}
    )
    body = approver.client.get(f"/api/bulk-decisions/{response.json()['id']}").json()
    assert body["closed"] == 1 and body["signed"] == 1
    by_task = {d["task"]: d for d in body["decided"]}
    assert by_task[str(one.pk)]["final"] is True and by_task[str(one.pk)]["remaining"] is None
    assert by_task[str(two.pk)]["final"] is False and by_task[str(two.pk)]["remaining"] == 1
