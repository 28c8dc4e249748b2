"""A Send fan-out pauses several tasks of one node at one checkpoint: each interrupt is shown once, on its
own task, as LangGraph's ``invoke`` and ``get_state`` show them (``lgplatform.services.state_out``)."""

from __future__ import annotations

import pytest

from tests.conftest import loan_input
from tests.lgplatform.conftest import lg_run_wait

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_a_run_s_output_lists_each_send_branch_s_interrupt_once(fanned_out):
    _, paused = fanned_out
    assert sorted(i["value"]["item"] for i in paused["__interrupt__"]) == ["a", "b"]
    assert len({i["id"] for i in paused["__interrupt__"]}) == 2


def test_each_send_task_holds_only_its_own_interrupt(reviewer, fanned_out):
    thread, paused = fanned_out
    state = reviewer.client.get(f"/lg/threads/{thread}/state").json()
    assert [t["name"] for t in state["tasks"]] == ["review_item", "review_item"]
    assert [[i["value"]["item"] for i in t["interrupts"]] for t in state["tasks"]] == [["a"], ["b"]]
    assert sorted(i["id"] for i in state["interrupts"]) == sorted(i["id"] for i in paused["__interrupt__"])


def test_a_send_task_s_path_is_langgraph_s_push_path(reviewer, fanned_out):
    thread, _ = fanned_out
    state = reviewer.client.get(f"/lg/threads/{thread}/state").json()
    assert [t["path"] for t in state["tasks"]] == [["__pregel_push", 0, False], ["__pregel_push", 1, False]]


def test_the_fan_out_resumes_with_a_map_and_finishes(reviewer, fanned_out):
    thread, paused = fanned_out
    resume = {i["id"]: {"decision": "approve", "reason": i["value"]["item"]} for i in paused["__interrupt__"]}
    body = {"assistant_id": "fan_out_review", "command": {"resume": resume}}
    final = reviewer.client.post(f"/lg/threads/{thread}/runs/wait", body)
    assert final.status_code == 200, final.content
    assert sorted(final.json()["answers"]) == ["a:approve", "b:approve"] and "__interrupt__" not in final.json()


def test_the_paused_checkpoint_keeps_its_interrupts_in_the_history_once_answered(reviewer, fanned_out):
    """LangGraph's history shows a checkpoint's interrupts after they are answered (they are its pending
    writes); Gatehouse showed them only while the thread was paused there, so a history or time-travel
    view lost every past question."""
    thread, paused = fanned_out
    at = reviewer.client.get(f"/lg/threads/{thread}/state").json()["checkpoint"]["checkpoint_id"]
    resume = {i["id"]: {"decision": "approve", "reason": i["value"]["item"]} for i in paused["__interrupt__"]}
    body = {"assistant_id": "fan_out_review", "command": {"resume": resume}}
    assert reviewer.client.post(f"/lg/threads/{thread}/runs/wait", body).status_code == 200
    asked = sorted(i["id"] for i in paused["__interrupt__"])

    history = reviewer.client.post(f"/lg/threads/{thread}/history", {"limit": 20}).json()
    [then] = [h for h in history if h["checkpoint"]["checkpoint_id"] == at]
    assert [[i["value"]["item"] for i in t["interrupts"]] for t in then["tasks"]] == [["a"], ["b"]]
    assert sorted(i["id"] for i in then["interrupts"]) == asked
    assert history[0]["interrupts"] == [] and history[0]["checkpoint"]["checkpoint_id"] != at  # the head: none
    state = reviewer.client.get(f"/lg/threads/{thread}/state/{at}").json()
    assert sorted(i["id"] for i in state["interrupts"]) == asked


def test_a_run_paused_at_several_interrupts_returns_only_them_as_langgraph_server_does(fanned_out, operator):
    """LangGraph Server's ``runs.wait`` merges the interrupts its stream sent one chunk each and returns
    ``{"__interrupt__": [...]}`` alone; Gatehouse returned the whole state beside them."""
    _, paused = fanned_out
    assert list(paused) == ["__interrupt__"]
    _, parallel = lg_run_wait(operator, "parallel_review", {"subject": "s"})
    assert list(parallel) == ["__interrupt__"]
    assert sorted(i["value"]["check"] for i in parallel["__interrupt__"]) == ["legal", "risk"]


def test_a_run_paused_at_one_interrupt_returns_the_values_with_it(operator):
    _, paused = lg_run_wait(operator, "loan_approval", loan_input())
    assert len(paused["__interrupt__"]) == 1
    assert paused["applicant"] == loan_input()["applicant"]
