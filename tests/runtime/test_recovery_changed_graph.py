"""A retried resume whose gate stopped being pending: it goes on without the signed answer only if it was consumed.

A resume run failed (the gate raised after it got its answer, or a node after the gate raised), a deploy then
changed the graph's edges (node names kept: ``review`` now waits for a new ``check`` node as well), and the
operator retried. The retry found the signed interrupt pending nowhere, took the answer for one already
applied and went on without it: the gate asked again under a new interrupt id, the human's approval gone. Now
it goes on without the answer only when the checkpoints show it applied (the gate task finished with it, here
in its subgraph's checkpoints); otherwise the run fails saying why, and with the graph as it was the retry
applies the approval.

In-process: the registry is loaded from this test's files (a deploy and a restart), runs are executed here
by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from approvals.models import ApprovalTask, TaskStatus
from runtime.executor import run_execute
from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.registry import registry_load
from tests.conftest import api_decide, graph_release_write, registry_restored, thread_start

pytestmark = pytest.mark.usefixtures("live_db")

MODULE = textwrap.dedent(
    """
    from pathlib import Path
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    FAULTS = Path(__FAULTS__)


    class State(TypedDict, total=False):
        amount: int
        answer: str
        notified: bool
        paid: bool


    def prep(state: State) -> dict:
        return {}


    def check(state: State) -> dict:
        return {}


    def review(state: State) -> dict:
        answer = interrupt({"title": "Pay the invoice?", "amount": state.get("amount")})["decision"]
        if (FAULTS / "review").exists():
            raise RuntimeError("injected fault: the gate failed after its answer")
        return {"answer": answer}


    def notify(state: State) -> dict:
        if (FAULTS / "notify").exists():
            raise RuntimeError("injected fault: the node after the gate failed")
        return {"notified": True}


    def pay(state: State) -> dict:
        return {"paid": state.get("answer") == "approve"}


    inner = StateGraph(State)
    inner.add_node("review", review)
    inner.add_node("notify", notify)
    inner.add_edge(START, "review")
    inner.add_edge("review", "notify")
    inner.add_edge("notify", END)

    builder = StateGraph(State)
    builder.add_node("prep", prep)
    builder.add_node("check", check)
    builder.add_node("GATE", GATE_NODE)
    builder.add_node("pay", pay)
    builder.add_edge(START, "prep")
    builder.add_edge("prep", "check")
    builder.add_edge(WAITS_FOR, "GATE")
    builder.add_edge("GATE", "pay")
    builder.add_edge("pay", END)
    graph = builder
    """
)


@dataclass
class Deploy:
    graph: str
    before: Path  # the gate follows prep
    after: Path  # the same nodes; the gate waits for prep and check
    faults: Path

    def restart(self, path: Path) -> None:
        registry_load(path)

    def fault(self, node: str, *, on: bool) -> None:
        (self.faults / node).touch() if on else (self.faults / node).unlink()


def _deploy(tmp_path: Path, gate: str, gate_node: str) -> Iterator[Deploy]:
    graph = f"recovery_{uuid.uuid4().hex[:8]}"
    faults = tmp_path / "faults"
    faults.mkdir()
    paths = []
    for name, waits_for in (("before", '"prep"'), ("after", '["prep", "check"]')):
        source = MODULE.replace("__FAULTS__", repr(str(faults))).replace("WAITS_FOR", waits_for)
        module = source.replace("GATE_NODE", gate_node).replace("GATE", gate)
        paths.append(graph_release_write(tmp_path / name, graph, module, ["review"]))
    with registry_restored():
        yield Deploy(graph, *paths, faults)


@pytest.fixture
def deploy(tmp_path: Path) -> Iterator[Deploy]:
    """The gate is a node of the graph."""
    yield from _deploy(tmp_path, "review", "review")


@pytest.fixture
def deploy_subgraph(tmp_path: Path) -> Iterator[Deploy]:
    """The gate is in a subgraph (node ``approval``), followed there by ``notify``."""
    yield from _deploy(tmp_path, "approval", "inner.compile()")


def _failed_resume(deploy: Deploy, fault: str, operator, reviewer, dispatched: list[str]) -> ApprovalTask:
    """Paused at the gate, approved, and the resume failed at ``fault``; then the changed graph deployed."""
    deploy.restart(deploy.before)
    thread = thread_start(operator, deploy.graph, {"amount": 120})
    run_execute(run_id=dispatched[-1])
    task = ApprovalTask.objects.get(thread_id=thread["id"], status=TaskStatus.PENDING)
    deploy.fault(fault, on=True)
    assert api_decide(reviewer, task, "approve", checkpoint_id=task.checkpoint_id).status_code == 201
    run_execute(run_id=dispatched[-1])
    resume = Run.objects.get(thread_id=task.thread_id, kind=RunKind.RESUME)
    assert resume.status == RunStatus.FAILED and "injected fault" in resume.error, resume.error
    deploy.fault(fault, on=False)
    deploy.restart(deploy.after)
    return task


def _retry(operator, task: ApprovalTask, dispatched: list[str]) -> Run:
    response = operator.client.post(f"/api/threads/{task.thread_id}/retry", {})
    assert response.status_code == 202, response.content
    run_execute(run_id=dispatched[-1])
    return Run.objects.get(pk=response.json()["id"])


def test_a_retry_whose_gate_the_changed_graph_no_longer_waits_in_fails_instead_of_dropping_the_approval(
    deploy, operator, reviewer, dispatched
):
    task = _failed_resume(deploy, "review", operator, reviewer, dispatched)  # failed before the answer was stored
    retry = _retry(operator, task, dispatched)
    thread = Thread.objects.get(pk=task.thread_id)
    assert retry.status == RunStatus.FAILED, (retry.status, thread.values)
    assert retry.error.startswith("signed command refused: the signed answer(s) to interrupt(s) " + task.interrupt_id)
    assert "no longer pending" in retry.error and "restore the graph as it was, or cancel the thread" in retry.error
    assert thread.status == ThreadStatus.FAILED and "paid" not in (thread.values or {})
    # With the graph as it was, a retry applies the approval.
    deploy.restart(deploy.before)
    assert _retry(operator, task, dispatched).status == RunStatus.SUCCEEDED
    thread.refresh_from_db()
    assert thread.status == ThreadStatus.COMPLETED and thread.values["paid"] is True


def test_a_retry_goes_on_without_an_answer_its_subgraph_gate_already_consumed(
    deploy_subgraph, operator, reviewer, dispatched
):
    """The gate got its answer and its subgraph checkpointed it; the next node failed. Not refused: it was applied.

    (The changed graph then runs its own ``approval`` task, a new subgraph run that asks again: the graph's
    author changed it so, nobody's signed answer is dropped.)"""
    task = _failed_resume(deploy_subgraph, "notify", operator, reviewer, dispatched)
    assert task.checkpoint_ns.startswith("approval:")
    retry = _retry(operator, task, dispatched)
    assert retry.status == RunStatus.INTERRUPTED, retry.error
    assert not retry.error


def test_a_retry_of_an_unconsumed_subgraph_answer_the_changed_graph_no_longer_waits_for_fails(
    deploy_subgraph, operator, reviewer, dispatched
):
    task = _failed_resume(deploy_subgraph, "review", operator, reviewer, dispatched)
    retry = _retry(operator, task, dispatched)
    assert retry.status == RunStatus.FAILED, retry.status
    assert retry.error.startswith("signed command refused: the signed answer(s) to interrupt(s) " + task.interrupt_id)
    deploy_subgraph.restart(deploy_subgraph.before)
    assert _retry(operator, task, dispatched).status == RunStatus.SUCCEEDED
    thread = Thread.objects.get(pk=task.thread_id)
    assert thread.status == ThreadStatus.COMPLETED and thread.values["paid"] is True


def test_langgraph_still_keys_interrupts_and_task_writes_as_the_executor_assumes():
    """The executor works out which interrupt a stored answer answered from LangGraph's private id scheme."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph
    from langgraph.pregel._task_status import CONTROL_WRITES
    from langgraph.types import interrupt

    from runtime import executor

    def gate(state: dict) -> dict:
        return {"a": interrupt(1) + interrupt(2)}

    builder = StateGraph(dict)
    builder.add_node("gate", gate)
    builder.add_edge(START, "gate")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ids"}}
    graph.invoke({}, config)
    task = graph.get_state(config).tasks[0]
    assert task.interrupts[0].id == executor._interrupt_id(f"gate{executor.NS_END}{task.id}", 0)
    assert executor._CONTROL_CHANNELS == CONTROL_WRITES


TWO_QUESTIONS = textwrap.dedent(
    """
    from pathlib import Path
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    FAULTS = Path(__FAULTS__)


    class State(TypedDict, total=False):
        answers: list
        paid: bool


    def review(state: State) -> dict:
        first = interrupt({"title": "Is the supplier known?"})["decision"]
        second = interrupt({"title": "Pay the invoice?"})["decision"]
        if (FAULTS / "review").exists():
            raise RuntimeError("injected fault: the gate failed after its answers")
        return {"answers": [first, second], "paid": second == "approve"}


    builder = StateGraph(State)
    builder.add_node("review", review)
    builder.add_edge(START, "review")
    builder.add_edge("review", END)
    graph = builder
    """
)


def test_a_retry_at_a_gate_that_asked_twice_is_not_refused_for_the_first_answer(
    tmp_path, operator, reviewer, dispatched
):
    """Both questions are asked at one checkpoint, so the gate's stored answers include the first decision's,
    which the retried (second) command does not sign: it was refused as 'not one of the signed answers'."""
    graph = f"two_questions_{uuid.uuid4().hex[:8]}"
    (tmp_path / "faults").mkdir()
    module = TWO_QUESTIONS.replace("__FAULTS__", repr(str(tmp_path / "faults")))
    with registry_restored():
        registry_load(graph_release_write(tmp_path, graph, module, ["review"]))
        thread = thread_start(operator, graph, {})
        run_execute(run_id=dispatched[-1])
        first = ApprovalTask.objects.get(thread_id=thread["id"], status=TaskStatus.PENDING)
        assert api_decide(reviewer, first, "approve", reason="known supplier").status_code == 201
        run_execute(run_id=dispatched[-1])
        second = ApprovalTask.objects.get(thread_id=thread["id"], status=TaskStatus.PENDING)
        assert second.checkpoint_id == first.checkpoint_id and second.interrupt_id != first.interrupt_id
        (tmp_path / "faults" / "review").touch()
        assert api_decide(reviewer, second, "approve", reason="pay it").status_code == 201
        run_execute(run_id=dispatched[-1])
        (tmp_path / "faults" / "review").unlink()
        retry = _retry(operator, second, dispatched)
        assert retry.status == RunStatus.SUCCEEDED, retry.error
        done = Thread.objects.get(pk=thread["id"])
        assert done.status == ThreadStatus.COMPLETED and done.values["paid"] is True
