"""A decision's one-field edit is judged by the state's model validator with the other fields as stored.

``values_validate(current=)`` gives a Pydantic ``model_validator`` the values at the task's checkpoint; the
decision path did not pass them, so a validator reading a field the edit left alone was not run: an edit of
``approved`` above the stored ``requested`` (tests/graphs/validated.py) was signed and the resume failed in
LangGraph. Now it is a 422 naming ``edits.approved`` with nothing signed. The decision POST is a hot path: the
checkpoint is read only when there are edits and the schema has validators, and once (the unreadable-state
check reuses that read).

In-process: runs are executed here by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

from typing import Any

import pytest

from approvals import abilities, services
from approvals.models import ApprovalTask, Decision, TaskStatus
from runtime import runs
from runtime.executor import run_execute
from runtime.models import Thread, ThreadStatus
from tests.conftest import api_decide, thread_start

pytestmark = pytest.mark.usefixtures("live_db")

GRAPH = "validated_spend"
SPAN_REFUSED = "the approved amount exceeds the requested one"


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: sent.append(str(run_id)))
    return sent


@pytest.fixture
def paused(dispatched, operator) -> ApprovalTask:
    thread = thread_start(operator, GRAPH, {"subject": "laptops", "requested": 900, "approved": 800})
    run_execute(run_id=dispatched[-1])
    return ApprovalTask.objects.get(thread_id=thread["id"], status=TaskStatus.PENDING)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each checkpoint read the decision path makes (the reads themselves unchanged)."""
    seen: list[str] = []
    for module in (services, abilities):
        real = module.thread_state_read

        def counted(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            seen.append(str(args[1] if len(args) > 1 else kwargs.get("checkpoint_id")))
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "thread_state_read", counted)
    return seen


def _nothing_signed(task: ApprovalTask) -> None:
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING and not Decision.objects.filter(task=task).exists()
    assert Thread.objects.get(pk=task.thread_id).status == ThreadStatus.INTERRUPTED


@pytest.mark.parametrize("field,value", [("approved", 1000), ("requested", 500)])
def test_a_one_field_edit_the_model_validator_refuses_with_the_stored_values_is_a_422_naming_it(
    paused, reviewer, field, value
):
    response = api_decide(reviewer, paused, "edit", reason="r", edits={field: value})
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["field"] == f"edits.{field}" and SPAN_REFUSED in error["message"]
    _nothing_signed(paused)


def test_the_same_edit_through_command_update_is_a_422_naming_it(paused, reviewer):
    command = {"resume": {"decision": "edit", "reason": "r"}, "update": {"approved": 1000}}
    response = reviewer.client.post(f"/lg/threads/{paused.thread_id}/runs", {"assistant_id": GRAPH, "command": command})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "command.update.approved"
    _nothing_signed(paused)


def test_a_one_field_edit_within_the_stored_values_resumes_to_completion(paused, reviewer, dispatched):
    response = api_decide(reviewer, paused, "edit", reason="r", edits={"approved": 850})
    assert response.status_code == 201, response.content
    run_execute(run_id=dispatched[-1])
    thread = Thread.objects.get(pk=paused.thread_id)
    assert thread.status == ThreadStatus.COMPLETED and thread.values["outcome"] == "edit:850"


def test_edits_read_the_checkpoint_once_and_a_decision_without_edits_no_more_than_before(
    paused, reviewer, dispatched, reads
):
    assert api_decide(reviewer, paused, "edit", reason="r", edits={"approved": 850}).status_code == 201
    assert reads == [paused.checkpoint_id], "the edits' check and the unreadable-state check share one read"


def test_an_approval_without_edits_reads_as_before(paused, reviewer, reads):
    assert api_decide(reviewer, paused, "approve", reason="r").status_code == 201
    assert reads == [paused.checkpoint_id], "only the unreadable-state check's own read"
