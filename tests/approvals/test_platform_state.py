"""/lg/ states (``lgplatform.services.state_out``): every pending interrupt a reader may see is on a task.

LangGraph lists a checkpoint's tasks; Gatehouse's approval tasks say which interrupts are pending and
where they were raised (node, and the subgraph namespace). A state shows each on the task that holds it
— and one no task of the checkpoint holds is still shown, never dropped.
"""

from __future__ import annotations

import pytest

from approvals.models import ApprovalTask
from lgplatform.services import state_out
from runtime.state import CheckpointView, StepTask
from tests.factories import task_make

pytestmark = pytest.mark.django_db


def _view(task: ApprovalTask, *tasks: StepTask) -> CheckpointView:
    return CheckpointView(
        checkpoint_id=task.checkpoint_id,
        parent_id="",
        step=2,
        source="loop",
        created_at="",
        next=[t.name for t in tasks],
        values={},
        writes=None,
        tasks=tasks,
    )


def test_a_root_interrupt_is_on_its_node_s_task_under_langgraph_s_id(personas):
    task = task_make()
    state = state_out(personas["reviewer"].user, task.thread, _view(task, StepTask("lg-task-1", "human_review")))
    [shown] = state.tasks
    assert shown.id == "lg-task-1" and [i.id for i in shown.interrupts] == [task.interrupt_id]
    assert state.interrupts == shown.interrupts


def test_a_subgraph_s_interrupt_is_on_the_task_that_runs_the_subgraph(personas):
    task = task_make(node="gate")
    ApprovalTask.objects.filter(pk=task.pk).update(checkpoint_ns="review:abc|inner:def")
    task.refresh_from_db()
    view = _view(task, StepTask("abc", "review", checkpoint_ns="review:abc"), StepTask("x", "audit", result={"a": 1}))
    state = state_out(personas["reviewer"].user, task.thread, view)
    review, audit = state.tasks
    assert [i.id for i in review.interrupts] == [task.interrupt_id] and audit.interrupts == []
    assert review.checkpoint == {"thread_id": str(task.thread_id), "checkpoint_ns": "review:abc"}
    assert audit.result == {"a": 1} and len(state.tasks) == 2  # no task of its own for the inner node


def test_a_pending_interrupt_no_task_of_the_checkpoint_holds_is_still_shown(personas):
    task = task_make()
    state = state_out(personas["reviewer"].user, task.thread, _view(task, StepTask("lg-task-1", "other_node")))
    assert [t.name for t in state.tasks] == ["other_node", "human_review"]
    assert [i.id for i in state.tasks[1].interrupts] == [task.interrupt_id] == [i.id for i in state.interrupts]


def test_a_past_checkpoint_shows_no_pending_interrupt(personas):
    task = task_make()
    past = CheckpointView(
        checkpoint_id="an-older-one", parent_id="", step=1, source="loop", created_at="", next=["human_review"],
        values={}, writes=None, tasks=(StepTask("lg-task-0", "human_review"),),
    )  # fmt: skip
    state = state_out(personas["reviewer"].user, task.thread, past)
    assert [t.interrupts for t in state.tasks] == [[]] and state.interrupts == []
