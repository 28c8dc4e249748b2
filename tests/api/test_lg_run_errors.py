"""A failed run's error on /lg/ as LangGraph Server sends it: ``{"error": <exception class>, "message": ...}``.

Gatehouse answered every failure as ``RunError`` with the stored text ("ValueError: ...\\nDuring task with
name ..."), so a client written for LangGraph Server could not branch on the type (a
``GraphRecursionError``); a state's failed task showed that text where LangGraph shows the exception's repr.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from runtime import runs
from runtime.executor import run_execute
from tests.conftest import Persona

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


@pytest.fixture
def undispatched(monkeypatch) -> None:
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: None)  # runs are executed here, or not at all


def _failed_run(persona: Persona, graph: str, body: dict[str, Any]) -> tuple[str, str]:
    thread = persona.client.post("/lg/threads", {}).json()["thread_id"]
    created = persona.client.post(f"/lg/threads/{thread}/runs", {"assistant_id": graph, **body})
    assert created.status_code == 200, created.content
    run_id = created.json()["run_id"]
    run_execute(run_id=run_id)
    return thread, run_id


def _streamed_error(persona: Persona, thread: str, run_id: str) -> Any:
    response = persona.client.get(f"/lg/threads/{thread}/runs/{run_id}/stream")
    assert response.status_code == 200
    body = async_to_sync(_read)(response.streaming_content).decode()
    events = [block.split("\n") for block in body.strip().split("\n\n")]
    [error] = [lines[1].removeprefix("data: ") for lines in events if lines[0] == "event: error"]
    return json.loads(error)


async def _read(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


@pytest.mark.usefixtures("undispatched")
def test_a_node_s_exception_is_named_by_its_class_with_its_own_message(operator):
    thread, run_id = _failed_run(operator, "always_fails", {"input": {"to": "ops@example.com"}})
    expected = {"error": "RuntimeError", "message": "mail relay unavailable for ops@example.com"}
    joined = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/join")
    assert joined.status_code == 200, joined.content
    assert joined.json() == {"__error__": expected}
    assert _streamed_error(operator, thread, run_id) == expected


@pytest.mark.usefixtures("undispatched")
def test_a_failed_task_shows_the_exception_s_repr_in_the_state(operator):
    thread, _ = _failed_run(operator, "always_fails", {"input": {"to": "ops@example.com"}})
    [task] = operator.client.get(f"/lg/threads/{thread}/state").json()["tasks"]
    assert task["name"] == "vendor_down"
    assert task["error"] == "RuntimeError('mail relay unavailable for ops@example.com')"


@pytest.mark.usefixtures("undispatched")
def test_a_run_past_its_recursion_limit_is_a_graph_recursion_error(operator):
    thread, run_id = _failed_run(operator, "never_stops", {"input": {}, "config": {"recursion_limit": 3}})
    error = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/join").json()["__error__"]
    assert error["error"] == "GraphRecursionError"
    assert error["message"].startswith("recursion limit: the run took more than 3 steps")
    assert _streamed_error(operator, thread, run_id)["error"] == "GraphRecursionError"


@pytest.mark.usefixtures("undispatched")
def test_a_run_past_its_timeout_is_a_timeout_error(operator):
    thread, run_id = _failed_run(operator, "slow_steps", {"input": {}})
    error = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/join").json()["__error__"]
    assert error["error"] == "TimeoutError"
    assert error["message"].startswith("run timeout: the run took longer than 1 s")
