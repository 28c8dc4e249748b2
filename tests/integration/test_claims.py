"""A claim made in the console binds every surface: the API refuses someone else's decision."""

from __future__ import annotations

import pytest

from approvals.claims import task_claim, task_release
from approvals.models import ApprovalTask
from tests.conftest import api_decide, loan_input, pending_tasks, thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_the_api_refuses_a_decision_on_a_task_someone_else_claimed(personas):
    holder, other = personas["reviewer"], personas["reviewer2"]
    thread = thread_start(personas["operator"], "loan_approval", loan_input())
    [task] = pending_tasks(holder, thread["id"])
    task_claim(actor=holder.user, task_id=task["id"])

    refused = api_decide(other, task)
    assert refused.status_code == 409
    assert refused.json()["error"]["field"] == "claim"
    assert holder.username in refused.json()["error"]["message"]
    assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"

    task_release(actor=personas["admin"].user, task_id=task["id"])  # an admin may break the claim
    assert api_decide(other, task).status_code == 201
    thread_settled(other, thread["id"])


def test_a_reviewer_assigned_to_one_gate_decides_only_that_gate(personas):
    from django.contrib.auth.models import User

    from approvals.models import GraphAssignment
    from approvals.roles import roles_ensure
    from approvals.tokens import token_issue
    from tests.conftest import ApiClient

    user = User.objects.create_user(f"gate-reviewer-{loan_input()['loan_id']}")
    user.groups.add(roles_ensure()["reviewer"])
    GraphAssignment.objects.create(user=user, graph="kyc_onboarding", gate="compliance_review")
    client = ApiClient(token_issue(user=user))
    thread = thread_start(personas["operator"], "kyc_onboarding", {"applicant": {"name": "Gate", "country": "GB"}})
    [identity] = pending_tasks(personas["reviewer"], thread["id"])
    refused = api_decide(client, identity)
    assert refused.status_code == 403
    assert "identity_check" in refused.json()["error"]["message"]
    assert client.get(f"/api/tasks/{identity['id']}").json()["can_decide"] is False

    api_decide(personas["reviewer"], identity)
    [compliance] = pending_tasks(personas["reviewer"], thread["id"])
    assert compliance["node"] == "compliance_review"
    assert api_decide(client, compliance).status_code == 201
