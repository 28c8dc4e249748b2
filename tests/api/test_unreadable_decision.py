"""A task whose paused state the graph can no longer load: nothing is signed that the thread could not resume with.

A deploy gave the state model a bound (``amount`` at most 100) while a thread waited with 120 in it. The thread
showed ``state_unreadable``, yet a decision on its task was a 201: signed and queued, and the resume then failed
loading the state. Now, as for a renamed node (tests/approvals/test_node_gone.py): the task view says it cannot
be decided and why (rule ``graph.state_unreadable``), and a decision on the native API or /lg/ is a 409 before
anything is signed or queued. With the state loadable again (the bound gone), it is decided.

In-process, as test_node_gone.py: the registry is loaded from this test's files (a deploy and a restart), runs
are executed here by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from approvals.models import ApprovalTask, Decision, TaskStatus
from console.page_context import task_live_context
from runtime.executor import run_execute
from runtime.models import Run, RunKind, Thread, ThreadStatus
from runtime.registry import registry_load
from tests.conftest import api_decide, graph_release_write, registry_restored, thread_start

pytestmark = pytest.mark.usefixtures("live_db")

MODULE = textwrap.dedent(
    """
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt
    from pydantic import BaseModel, Field


    class State(BaseModel):
        amount: int = Field(default=0BOUND)
        answer: str = ""
        paid: bool = False


    def review(state: State) -> dict:
        return {"answer": interrupt({"title": "Pay the invoice?", "amount": state.amount})["decision"]}


    def pay(state: State) -> dict:
        return {"paid": state.answer == "approve"}


    builder = StateGraph(State)
    builder.add_node("review", review)
    builder.add_node("pay", pay)
    builder.add_edge(START, "review")
    builder.add_edge("review", "pay")
    builder.add_edge("pay", END)
    graph = builder
    """
)
WHY = "the graph cannot load this state: Amount must be at most 100"


@dataclass
class Deploy:
    graph: str
    before: Path  # the state model with no bound
    after: Path  # the same model with amount at most 100


@pytest.fixture
def deploy(tmp_path: Path) -> Iterator[Deploy]:
    graph = f"bounded_{uuid.uuid4().hex[:8]}"
    paths = [
        graph_release_write(tmp_path / name, graph, MODULE.replace("BOUND", bound), ["review"])
        for name, bound in (("before", ""), ("after", ", le=100"))
    ]
    with registry_restored():
        yield Deploy(graph, *paths)


@pytest.fixture
def paused(deploy: Deploy, dispatched: list[str], operator) -> ApprovalTask:
    """A thread paused at review with amount 120, then the bound deployed and the registry reloaded."""
    registry_load(deploy.before)
    thread = thread_start(operator, deploy.graph, {"amount": 120})
    run_execute(run_id=dispatched[-1])
    task = ApprovalTask.objects.get(thread_id=thread["id"], status=TaskStatus.PENDING)
    registry_load(deploy.after)
    assert operator.client.get(f"/api/threads/{task.thread_id}").json()["state_unreadable"].startswith(WHY)
    return task


def _nothing_signed_or_queued(task: ApprovalTask) -> None:
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING
    assert not Decision.objects.filter(task=task).exists()
    assert not Run.objects.filter(thread_id=task.thread_id).exclude(kind=RunKind.START).exists()
    assert Thread.objects.get(pk=task.thread_id).status == ThreadStatus.INTERRUPTED


def test_a_native_decision_is_a_409_saying_why_before_anything_is_signed(paused, reviewer):
    answer = api_decide(reviewer, paused, "approve", checkpoint_id=paused.checkpoint_id)
    assert answer.status_code == 409, answer.content
    message = answer.json()["error"]["message"]
    assert message.startswith(WHY) and "no decision can be signed" in message
    _nothing_signed_or_queued(paused)


@pytest.mark.parametrize("route", ["runs", "runs/wait"])
def test_a_platform_resume_is_a_409_saying_why_before_anything_is_signed(paused, reviewer, route):
    body = {"assistant_id": paused.graph, "command": {"resume": {"decision": "approve"}}}
    answer = reviewer.client.post(f"/lg/threads/{paused.thread_id}/{route}", body)
    assert answer.status_code == 409, answer.content
    assert answer.json()["detail"].startswith(WHY)
    _nothing_signed_or_queued(paused)


def test_the_task_view_says_it_cannot_be_decided_and_why(paused, reviewer, personas):
    body = reviewer.client.get(f"/api/tasks/{paused.pk}").json()
    assert body["can_decide"] is False
    assert body["decide_refused"]["rule"] == "graph.state_unreadable"
    assert body["decide_refused"]["message"].startswith(WHY)
    live = task_live_context(personas["reviewer"].user, paused.pk)
    assert live["can_decide"] is False and live["decide_refused"].rule == "graph.state_unreadable"


def test_with_the_state_loadable_again_the_task_is_decided_and_the_thread_resumes(paused, deploy, reviewer, dispatched):
    registry_load(deploy.before)
    assert reviewer.client.get(f"/api/tasks/{paused.pk}").json()["decide_refused"] is None
    assert api_decide(reviewer, paused, "approve", checkpoint_id=paused.checkpoint_id).status_code == 201
    run_execute(run_id=dispatched[-1])
    thread = Thread.objects.get(pk=paused.thread_id)
    assert thread.status == ThreadStatus.COMPLETED and thread.values["paid"] is True
