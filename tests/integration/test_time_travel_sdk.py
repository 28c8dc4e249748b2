"""Time travel and subgraph state through ``/lg/`` with the official ``langgraph_sdk`` client.

``threads.update_state(..., checkpoint_id=...)`` forks, ``runs.wait(..., checkpoint_id=...)``
replays, ``threads.copy`` copies, ``threads.get_state(..., subgraphs=True)`` nests
subgraph states, as LangGraph Server does. The reason Gatehouse requires travels in
the ``X-Gatehouse-Reason`` header (or a run's ``metadata["reason"]``).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

from approvals.models import AuditEvent
from runtime.models import Branch, Thread
from tests.conftest import loan_input, scaled
from tests.integration.test_platform_sdk import server  # noqa: F401 - the live daphne fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

REASON = {"X-Gatehouse-Reason": "sdk time travel test"}


def _client(url: str, token: str) -> Any:
    return get_sync_client(url=url, api_key=token, timeout=httpx.Timeout(scaled(30.0)))


def _paused_loan(op: Any) -> tuple[str, dict[str, Any]]:
    thread = op.threads.create()
    op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input())
    return thread["thread_id"], op.threads.get_state(thread["thread_id"])


def test_update_state_at_a_checkpoint_forks_and_a_run_continues_the_fork(server, personas):  # noqa: F811
    with _client(server, personas["operator"].token) as op:
        thread_id, paused = _paused_loan(op)
        at = paused["checkpoint"]["checkpoint_id"]
        forked = op.threads.update_state(thread_id, {"amount": 22000}, checkpoint_id=at, headers=REASON)
        head = forked["checkpoint"]["checkpoint_id"]
        assert head and head != at and forked["checkpoint"]["thread_id"] == thread_id
        state = op.threads.get_state(thread_id)
        assert state["checkpoint"]["checkpoint_id"] == head and state["values"]["amount"] == 22000
        assert state["parent_checkpoint"]["checkpoint_id"] == at
        paused_again = op.runs.wait(thread_id, "loan_approval")  # continues the fork: its gate asks again
        [interrupt] = paused_again["__interrupt__"]
        assert interrupt["value"]["type"] == "gatehouse.gate/v1"
    branch = Branch.objects.get(thread_id=thread_id)
    assert (branch.kind, branch.from_checkpoint_id, branch.head_checkpoint_id) == ("fork", at, head)
    assert branch.reason == "sdk time travel test"
    assert AuditEvent.objects.filter(thread_id=thread_id, action="thread.forked").count() == 1


def test_a_run_from_a_checkpoint_replays_it(server, personas):  # noqa: F811
    with _client(server, personas["operator"].token) as op:
        thread_id, paused = _paused_loan(op)
        first = paused["checkpoint"]["checkpoint_id"]
        history = op.threads.get_history(thread_id, limit=20)
        earlier = history[-1]["checkpoint"]["checkpoint_id"]  # the input checkpoint: replay the whole run
        out = op.runs.wait(thread_id, "loan_approval", checkpoint_id=earlier, metadata={"reason": "replay it"})
        [interrupt] = out["__interrupt__"]
        state = op.threads.get_state(thread_id)
        assert state["checkpoint"]["checkpoint_id"] != first
        # a run's output carries the interrupt's response_schema (null), a state only a declared one
        assert interrupt.pop("response_schema") is None and state["interrupts"] == [interrupt]
    branch = Branch.objects.get(thread_id=thread_id)
    assert (branch.kind, branch.from_checkpoint_id, branch.reason) == ("replay", earlier, "replay it")


def test_copy_makes_a_new_thread_with_the_same_history(server, personas):  # noqa: F811
    with _client(server, personas["operator"].token) as op:
        thread_id, paused = _paused_loan(op)
        copy = op.threads.copy(thread_id, headers=REASON)
        assert copy["thread_id"] != thread_id
        copied = op.threads.get_state(copy["thread_id"])
        assert copied["values"] == paused["values"] and copied["next"] == paused["next"]
        assert copied["checkpoint"]["checkpoint_id"] == paused["checkpoint"]["checkpoint_id"]
        original = [h["checkpoint"]["checkpoint_id"] for h in op.threads.get_history(thread_id, limit=50)]
        copied_history = [h["checkpoint"]["checkpoint_id"] for h in op.threads.get_history(copy["thread_id"], limit=50)]
        assert copied_history == original
        # tasks are not copied: the copy is idle, and a run continuing it pauses at the gate on its own task
        assert op.threads.get(copy["thread_id"])["status"] == "idle"
        again = op.runs.wait(copy["thread_id"], "loan_approval")
        assert len(again["__interrupt__"]) == 1
        assert list(op.threads.get(copy["thread_id"])["interrupts"]) != list(op.threads.get(thread_id)["interrupts"])
    assert Thread.objects.get(pk=copy["thread_id"]).graph == "loan_approval"
    assert AuditEvent.objects.filter(thread_id=copy["thread_id"], action="thread.copied").count() == 1


def test_get_state_with_subgraphs_nests_the_subgraph_state(server, personas):  # noqa: F811
    with _client(server, personas["approver"].token) as ap, _client(server, personas["operator"].token) as op:
        thread = op.threads.create()
        op.runs.wait(thread["thread_id"], "travel_nested", input={"secret": "s3", "amount": 4})
        flat = ap.threads.get_state(thread["thread_id"])
        nested = ap.threads.get_state(thread["thread_id"], subgraphs=True)
        at = ap.threads.get_state(thread["thread_id"], checkpoint=nested["checkpoint"], subgraphs=True)
    assert all(t["state"] is None for t in flat["tasks"])
    # The subgraph's interrupt comes up on the root task that runs the subgraph, as LangGraph Server
    # shows it: no task of its own at the root (there was a phantom "inner_gate" task), and the root task
    # says where the subgraph's checkpoints are.
    [root_task] = flat["tasks"]
    assert root_task["name"] == "child" and [i["value"]["title"] for i in root_task["interrupts"]] == ["inner check"]
    assert flat["interrupts"] == root_task["interrupts"]
    assert root_task["checkpoint"] == {"thread_id": thread["thread_id"], "checkpoint_ns": f"child:{root_task['id']}"}
    for state in (nested, at):
        [child] = [t for t in state["tasks"] if t["name"] == "child"]
        assert child["checkpoint"] is None and child["interrupts"] == root_task["interrupts"]
        [inner] = child["state"]["tasks"]  # inside, on the task that raised it
        assert inner["name"] == "inner_gate" and inner["interrupts"] == root_task["interrupts"]
        assert child["state"]["interrupts"] == root_task["interrupts"]
        assert child["state"]["checkpoint"]["checkpoint_map"][""] == state["checkpoint"]["checkpoint_id"]
        sub = child["state"]
        assert sub["checkpoint"]["checkpoint_ns"].startswith("child:")
        assert sub["checkpoint"]["thread_id"] == thread["thread_id"]
        assert sub["values"] == {"secret": "s3", "amount": 4} and sub["next"] == ["inner_gate"]
        assert set(sub) == {
            "values",
            "next",
            "tasks",
            "checkpoint",
            "metadata",
            "created_at",
            "parent_checkpoint",
            "interrupts",
            "checkpoint_id",  # the references' ids again, as LangGraph Server sends them
            "parent_checkpoint_id",
        }


@pytest.mark.parametrize(
    ("kwargs", "status", "named"),
    [
        ({"checkpoint_id": "1f000000-0000-6000-8000-000000000000", "headers": REASON}, 404, "1f000000-0000-6000"),
        ({"checkpoint_id": "not-a-checkpoint", "headers": REASON}, 422, "checkpoint_id"),
        ({"checkpoint": {"checkpoint_id": "x", "checkpoint_ns": "child:1"}, "headers": REASON}, 422, "checkpoint_ns"),
        ({"checkpoint_id": "PAUSED"}, 422, "reason"),
    ],
)
def test_bad_forks_through_the_sdk_are_refused_naming_the_problem(server, personas, kwargs, status, named):  # noqa: F811
    with _client(server, personas["operator"].token) as op:
        thread_id, paused = _paused_loan(op)
        if kwargs.get("checkpoint_id") == "PAUSED":
            kwargs = {**kwargs, "checkpoint_id": paused["checkpoint"]["checkpoint_id"]}
        with pytest.raises(httpx.HTTPStatusError) as raised:
            op.threads.update_state(thread_id, {"amount": 1}, **kwargs)
        assert raised.value.response.status_code == status
        assert named in raised.value.response.text
        assert op.threads.get_state(thread_id)["checkpoint"] == paused["checkpoint"]
    assert not Branch.objects.filter(thread_id=thread_id).exists()


def test_a_reviewer_may_not_travel_in_time_through_the_sdk(server, personas):  # noqa: F811
    with _client(server, personas["operator"].token) as op, _client(server, personas["reviewer"].token) as rv:
        thread_id, paused = _paused_loan(op)
        at = paused["checkpoint"]["checkpoint_id"]
        for call in (
            lambda: rv.threads.update_state(thread_id, {"amount": 1}, checkpoint_id=at, headers=REASON),
            lambda: rv.runs.create(thread_id, "loan_approval", checkpoint_id=at, metadata={"reason": "r"}),
            lambda: rv.threads.copy(thread_id, headers=REASON),
        ):
            with pytest.raises(httpx.HTTPStatusError) as raised:
                call()
            assert raised.value.response.status_code == 403
    assert not Branch.objects.filter(thread_id=thread_id).exists()


def test_an_interrupt_three_subgraphs_down_shows_on_every_task_that_holds_it(server, personas):  # noqa: F811
    with _client(server, personas["approver"].token) as ap, _client(server, personas["operator"].token) as op:
        thread = op.threads.create()
        op.runs.wait(thread["thread_id"], "travel_deep", input={"secret": "s4", "amount": 6})
        flat = ap.threads.get_state(thread["thread_id"])
        nested = ap.threads.get_state(thread["thread_id"], subgraphs=True)
    [outer] = flat["tasks"]
    assert outer["name"] == "outer" and [i["value"]["title"] for i in outer["interrupts"]] == ["inner check"]
    shown = outer["interrupts"]
    # root → outer → child → child → inner_gate: every task on the way holds the interrupt raised below it
    path, state = [], nested
    while True:
        [task] = state["tasks"]
        path.append(task["name"])
        assert task["interrupts"] == shown and state["interrupts"] == shown, path
        if task["state"] is None:
            break
        inner = task["state"]["checkpoint"]["checkpoint_ns"]
        assert state is nested or inner.startswith(state["checkpoint"]["checkpoint_ns"] + "|"), inner
        state = task["state"]
    assert path == ["outer", "child", "child", "inner_gate"]
