"""``threads.update_state`` as LangGraph 1.2 serves it on a thread that has state
(``lgplatform.services.thread_state_update``).

An update that leaves nodes to run makes a finished thread continuable with no input, as ``invoke(None)``
continues it, and its status says so; values ``None`` writes as the node with no writes (``END``: clears
the pending tasks); ``__copy__`` is refused as not served (a copy is a fork: ``threads.copy``).
"""

from __future__ import annotations

from typing import Any

import pytest

from approvals.models import AuditAction, AuditEvent
from tests.lgplatform.conftest import lg_run_wait
from tests.security.test_bad_input_edges import error_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


@pytest.fixture
def finished(operator) -> str:
    thread, done = lg_run_wait(operator, "three_steps", {"x": 1})
    assert done["seen"] == ["t1", "t2", "t3"]
    return thread


def _update(persona: Any, thread: str, values: Any, as_node: str | None) -> Any:
    return persona.client.post(f"/lg/threads/{thread}/state", {"values": values, "as_node": as_node})


def _next(persona: Any, thread: str) -> list[str]:
    return persona.client.get(f"/lg/threads/{thread}/state").json()["next"]


def test_a_finished_thread_updated_as_a_node_continues_with_no_input(operator, finished):
    assert _update(operator, finished, {"x": 7}, "t2").status_code == 200
    assert _next(operator, finished) == ["t3"]
    continued = operator.client.post(f"/lg/threads/{finished}/runs/wait", {"assistant_id": "three_steps"})
    assert continued.status_code == 200, continued.content
    assert continued.json() == {"x": 7, "seen": ["t1", "t2", "t3", "t3"]}
    assert operator.client.get(f"/api/threads/{finished}").json()["status"] == "completed"


def test_a_thread_with_nodes_left_to_run_is_not_shown_completed(operator, finished):
    assert _update(operator, finished, {"x": 7}, "t2").status_code == 200
    assert operator.client.get(f"/api/threads/{finished}").json()["status"] == "idle"
    assert operator.client.get(f"/lg/threads/{finished}").json()["status"] == "idle"


def test_values_none_as_a_node_is_that_node_with_no_writes(operator, finished):
    assert _update(operator, finished, None, "t1").status_code == 200
    assert _next(operator, finished) == ["t2"]
    event = AuditEvent.objects.filter(thread_id=finished, action=AuditAction.THREAD_STATE_UPDATED).get()
    assert event.details["values"] is None and event.details["as_node"] == "t1"


def test_values_none_as_end_clears_the_pending_tasks(operator, finished):
    assert _update(operator, finished, {"x": 2}, "t1").status_code == 200
    assert _update(operator, finished, None, "__end__").status_code == 200
    assert _next(operator, finished) == []
    assert operator.client.get(f"/api/threads/{finished}").json()["status"] == "completed"


@pytest.mark.parametrize("values", [None, {"x": 3}])
def test_copy_is_refused_as_not_served(operator, finished, values):
    error = error_of(_update(operator, finished, values, "__copy__"), 422)
    assert error["field"] == "as_node" and "threads.copy" in error["message"]


def test_values_none_without_a_node_is_still_refused(operator, finished):
    assert error_of(_update(operator, finished, None, None), 422)["field"] == "values"
