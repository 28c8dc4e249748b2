"""One can_decide for every surface: the API offers a decision only to whom task_decide would accept it from."""

import pytest
from django.db.models import F

from approvals.models import ApprovalTask, Decision
from tests.console.conftest import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _signed_by(persona, task):
    Decision.objects.create(
        task=task,
        actor=persona.user,
        outcome="approve",
        checkpoint_id=task.checkpoint_id,
        payload_digest=task.payload_digest,
    )


@pytest.fixture
def quorum_task():
    task = task_make()
    ApprovalTask.objects.filter(pk=task.pk).update(required_approvals=F("required_approvals") + 1)
    task.refresh_from_db()
    assert task.required_approvals == 2 and task.is_open
    return task


def test_a_signer_of_an_open_quorum_task_is_not_offered_a_second_signature(personas, quorum_task):
    _signed_by(personas["approver"], quorum_task)
    body = personas["approver"].client.get(f"/api/tasks/{quorum_task.pk}").json()
    assert body["can_decide"] is False


def test_another_approver_still_may_sign(personas, quorum_task):
    _signed_by(personas["approver"], quorum_task)
    body = personas["approver2"].client.get(f"/api/tasks/{quorum_task.pk}").json()
    assert body["can_decide"] is True


def test_the_api_answer_matches_what_task_decide_does(personas, quorum_task):
    _signed_by(personas["approver"], quorum_task)
    response = personas["approver"].client.post(
        f"/api/tasks/{quorum_task.pk}/decision",
        {"decision": "approve", "checkpoint_id": quorum_task.checkpoint_id, "reason": "again"},
    )
    assert response.status_code == 409  # what can_decide=False announced
