"""``GET /api/threads/{id}`` of a busy thread names the run to watch (``run_id``).

It answered ``status: busy, run_id: null`` while the runs list showed the resume run ``running``: a client
could not tell which run to follow. Now ``run_id`` is the thread's queued or running run while it is busy,
and null once no run is active.

In-process: runs are claimed and executed here by the worker's own functions (dispatch recorded, not sent).
"""

from __future__ import annotations

from typing import Any

import pytest

from approvals.models import ApprovalTask, TaskStatus
from runtime.executor import run_execute
from runtime.runs import run_claim, run_release
from tests.conftest import Persona, api_decide, thread_start

pytestmark = pytest.mark.usefixtures("live_db")

GRAPH = "validated_spend"


def _detail(persona: Persona, thread_id: Any) -> dict[str, Any]:
    response = persona.client.get(f"/api/threads/{thread_id}")
    assert response.status_code == 200, response.content
    return dict(response.json())


def _run_status(persona: Persona, thread_id: Any, run_id: str) -> str:
    listed = {r["id"]: r["status"] for r in persona.client.get(f"/api/threads/{thread_id}/runs").json()}
    return str(listed[run_id])


@pytest.fixture
def resumed(dispatched: list[str], operator: Persona, reviewer: Persona) -> tuple[str, str]:
    """A thread whose decision has queued its resume run: (thread id, that run's id)."""
    thread = thread_start(operator, GRAPH, {"subject": "desks", "requested": 10, "approved": 5})
    run_execute(run_id=dispatched[-1])
    task = ApprovalTask.objects.get(thread_id=thread["id"], status=TaskStatus.PENDING)
    decided = api_decide(reviewer, task, "approve", reason="ok")
    assert decided.status_code == 201, decided.content
    assert decided.json()["run_id"] == dispatched[-1]
    return thread["id"], dispatched[-1]


def test_a_queued_start_run_is_named_while_the_thread_is_busy(dispatched, operator):
    thread = thread_start(operator, GRAPH, {"subject": "desks", "requested": 10, "approved": 5})
    detail = _detail(operator, thread["id"])
    assert detail["status"] == "busy" and _run_status(operator, thread["id"], dispatched[-1]) == "queued"
    assert detail["run_id"] == dispatched[-1]
    run_execute(run_id=dispatched[-1])
    paused = _detail(operator, thread["id"])
    assert paused["status"] == "interrupted" and paused["run_id"] is None


def test_a_queued_resume_run_is_named(resumed, operator):
    thread_id, run_id = resumed
    assert _run_status(operator, thread_id, run_id) == "queued"
    detail = _detail(operator, thread_id)
    assert detail["status"] == "busy" and detail["run_id"] == run_id


def test_a_running_resume_run_is_named_and_none_once_it_has_finished(resumed, operator):
    thread_id, run_id = resumed
    claimed = run_claim(run_id=run_id, worker="test-thread-busy")
    assert claimed is not None
    assert _run_status(operator, thread_id, run_id) == "running"
    detail = _detail(operator, thread_id)
    assert detail["status"] == "busy" and detail["run_id"] == run_id
    assert run_release(run=claimed, error="handed back by the test")  # its lease lapses: taken again below
    run_execute(run_id=run_id)
    done = _detail(operator, thread_id)
    assert done["status"] == "completed" and done["run_id"] is None
