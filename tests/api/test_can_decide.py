"""One can_decide for every surface: the API offers a decision only to whom task_decide would accept it from."""

import pytest

from tests.conftest import api_decide
from tests.factories import decision_make, loan_gate, task_make

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def quorum_task(personas):
    """A two-approver task the approver has signed once (through task_decide)."""
    task = task_make(payload=loan_gate(required_approvals=2))
    decision_make(task, personas["approver"].user)
    task.refresh_from_db()
    assert task.required_approvals == 2 and task.is_open
    return task


def test_a_signer_of_an_open_quorum_task_is_not_offered_a_second_signature(personas, quorum_task):
    body = personas["approver"].client.get(f"/api/tasks/{quorum_task.pk}").json()
    assert body["can_decide"] is False


def test_another_approver_still_may_sign(personas, quorum_task):
    body = personas["approver2"].client.get(f"/api/tasks/{quorum_task.pk}").json()
    assert body["can_decide"] is True


def test_the_api_answer_matches_what_task_decide_does(personas, quorum_task):
    response = api_decide(personas["approver"], quorum_task, checkpoint_id=quorum_task.checkpoint_id, reason="again")
    assert response.status_code == 409  # what can_decide=False announced
