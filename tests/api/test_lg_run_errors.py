"""A failed run's error on /lg/ as LangGraph Server sends it: ``{"error": <exception class>, "message": ...}``.

Gatehouse answered every failure as ``RunError`` with the stored text ("ValueError: ...\\nDuring task with
name ..."), so a client written for LangGraph Server could not branch on the type (a
``GraphRecursionError``); a state's failed task showed that text where LangGraph shows the exception's repr.
"""

from __future__ import annotations

import pytest

from tests.conftest import lg_run_executed, lg_stream_error

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def test_a_node_s_exception_is_named_by_its_class_with_its_own_message(operator, dispatched):
    thread, run_id = lg_run_executed(operator, "always_fails", {"input": {"to": "ops@example.com"}})
    expected = {"error": "RuntimeError", "message": "mail relay unavailable for ops@example.com"}
    joined = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/join")
    assert joined.status_code == 200, joined.content
    assert joined.json() == {"__error__": expected}
    assert lg_stream_error(operator, thread, run_id) == expected


def test_a_failed_task_shows_the_exception_s_repr_in_the_state(operator, dispatched):
    thread, _ = lg_run_executed(operator, "always_fails", {"input": {"to": "ops@example.com"}})
    [task] = operator.client.get(f"/lg/threads/{thread}/state").json()["tasks"]
    assert task["name"] == "vendor_down"
    assert task["error"] == "RuntimeError('mail relay unavailable for ops@example.com')"


def test_a_run_past_its_recursion_limit_is_a_graph_recursion_error(operator, dispatched):
    thread, run_id = lg_run_executed(operator, "never_stops", {"input": {}, "config": {"recursion_limit": 3}})
    error = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/join").json()["__error__"]
    assert error["error"] == "GraphRecursionError"
    assert error["message"].startswith("recursion limit: the run took more than 3 steps")
    assert lg_stream_error(operator, thread, run_id)["error"] == "GraphRecursionError"


def test_a_run_past_its_timeout_is_a_timeout_error(operator, dispatched):
    thread, run_id = lg_run_executed(operator, "slow_steps", {"input": {}})
    error = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/join").json()["__error__"]
    assert error["error"] == "TimeoutError"
    assert error["message"].startswith("run timeout: the run took longer than 1 s")
