"""``GET /api/tasks`` takes the inbox's filters: the same tasks the console's inbox lists for them."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from approvals.inbox_filter import InboxFilter
from approvals.models import ApprovalTask
from approvals.selectors import tasks_inbox
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _ids(response) -> set[str]:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.content
    return {item["id"] for item in response.json()["items"]}


def test_search_gate_and_claim_filters_list_what_the_inbox_lists(personas):
    case = f"TF-{uuid.uuid4().hex[:8]}"
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    review = task_make(metadata={"case": case, "applicant": "Ada"})
    other_gate = task_make(node=gate, metadata={"case": case, "applicant": "Alan"})
    kyc = task_make(graph="kyc_onboarding", node="identity_check", metadata={"case": case})
    reviewer = personas["reviewer"]

    assert _ids(reviewer.client.get("/api/tasks", q=case)) == {str(review.pk), str(other_gate.pk), str(kyc.pk)}
    assert _ids(reviewer.client.get("/api/tasks", q=str(kyc.thread_id))) == {str(kyc.pk)}
    assert _ids(reviewer.client.get("/api/tasks", q=case, gate=gate)) == {str(other_gate.pk)}
    assert _ids(reviewer.client.get("/api/tasks", q=case, graph="kyc_onboarding")) == {str(kyc.pk)}
    # The reader's own scope still applies: a loan-only reviewer finds no KYC task by searching for it.
    assert _ids(personas["loan_reviewer"].client.get("/api/tasks", q=str(kyc.thread_id))) == set()

    assert reviewer.client.post(f"/api/tasks/{review.pk}/claim").status_code == 201
    assert _ids(reviewer.client.get("/api/tasks", q=case, claimed="mine")) == {str(review.pk)}
    assert _ids(reviewer.client.get("/api/tasks", q=case, claimed="unclaimed")) == {str(other_gate.pk), str(kyc.pk)}
    assert _ids(personas["reviewer2"].client.get("/api/tasks", q=case, claimed="others")) == {str(review.pk)}

    # The same filter through the inbox's selector: the API adds nothing and drops nothing.
    inbox = tasks_inbox(user=reviewer.user, filter=InboxFilter(q=case, claimed="unclaimed"))
    assert {str(pk) for pk in inbox.values_list("pk", flat=True)} == {str(other_gate.pk), str(kyc.pk)}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"claimed": "everyone"}, "claimed"),
        ({"assigned": "you"}, "assigned"),
        ({"q": "x" * 201}, "q"),
        ({"gate": "g" * 101}, "gate"),
    ],
)
def test_a_bad_filter_is_a_4xx_naming_it(personas, params, field):
    response = personas["reviewer"].client.get("/api/tasks", **params)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field


def test_every_list_gives_a_tasks_deadline_and_group_as_its_detail_does(personas):
    """The list's items said ``overdue: false``, no due text and no group, for tasks overdue and escalated:
    Django Ninja validated the built items once more and the fields were read as a task's."""
    case = f"DL-{uuid.uuid4().hex[:8]}"
    task = task_make(metadata={"case": case}, due_at=timezone.now() - timedelta(minutes=13))
    ApprovalTask.objects.filter(pk=task.pk).update(assigned_group=Group.objects.get(name="reviewer"))
    reviewer = personas["reviewer"]
    detail = reviewer.client.get(f"/api/tasks/{task.pk}").json()
    assert (detail["overdue"], detail["assigned_group"]) == (True, "reviewer")
    assert detail["due_text"].startswith("overdue")
    fields = ("overdue", "due_text", "due_in_seconds", "assigned_group", "due_at")
    [listed] = reviewer.client.get("/api/tasks", q=case, due="overdue").json()["items"]
    assert {k: listed[k] for k in fields} == {k: detail[k] for k in fields}
    [pending] = reviewer.client.get(f"/api/threads/{task.thread_id}").json()["pending_tasks"]
    assert {k: pending[k] for k in fields} == {k: detail[k] for k in fields}
