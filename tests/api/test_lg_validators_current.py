"""/lg/ ``update_state`` runs a Pydantic state's model validator over the state as stored, not only the keys
written.

``values_validate`` ran the validators on the written keys alone: a ``@model_validator`` comparing two fields
was not run when one of them was written, so ``{"approved": 5000}`` over a state requesting 900 was written,
and the next node to read the state failed (tests/graphs/validated.py: ``approved`` may not exceed
``requested``). In-process: runs are executed here by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

import pytest

from approvals.models import ApprovalTask, TaskStatus
from runtime import runs
from runtime.executor import run_execute
from runtime.models import Thread, ThreadStatus
from tests.conftest import api_decide, thread_start
from tests.security.test_bad_input_edges import error_of

pytestmark = pytest.mark.usefixtures("live_db")

GRAPH = "validated_spend"
SPAN_REFUSED = "the approved amount exceeds the requested one"


@pytest.fixture
def finished(monkeypatch, operator, reviewer) -> Thread:
    """A validated_spend thread that requested 900, approved 800 and ran to its end."""
    sent: list[str] = []
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: sent.append(str(run_id)))
    started = thread_start(operator, GRAPH, {"subject": "laptops", "requested": 900, "approved": 800})
    run_execute(run_id=sent[-1])
    task = ApprovalTask.objects.get(thread_id=started["id"], status=TaskStatus.PENDING)
    assert api_decide(reviewer, task, "approve").status_code == 201
    run_execute(run_id=sent[-1])
    thread = Thread.objects.get(pk=started["id"])
    assert thread.status == ThreadStatus.COMPLETED
    return thread


@pytest.mark.parametrize("values", [{"approved": 5000}, {"requested": 100}])
def test_a_one_field_update_the_model_validator_refuses_over_the_stored_state_is_a_422(operator, finished, values):
    response = operator.client.post(f"/lg/threads/{finished.pk}/state", {"values": values})
    error = error_of(response, 422)
    [key] = values
    assert (error["field"], error["message"]) == (f"values.{key}", f"{key.capitalize()}: {SPAN_REFUSED}")
    assert Thread.objects.get(pk=finished.pk).checkpoint_id == finished.checkpoint_id


def test_a_one_field_update_the_stored_state_allows_is_written(operator, finished):
    response = operator.client.post(f"/lg/threads/{finished.pk}/state", {"values": {"approved": 500}})
    assert response.status_code == 200, response.content
    state = operator.client.get(f"/lg/threads/{finished.pk}/state").json()
    assert (state["values"]["approved"], state["values"]["requested"]) == (500, 900)
