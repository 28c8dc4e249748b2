"""``runs.wait(thread, assistant, input=None)`` on a finished thread answers its final values, as LangGraph
Server does (its run there does nothing and writes no checkpoint), instead of a 422 "send input".

No run is created for it: nothing would run. ``runs.create`` and ``runs.stream``, which must name a run,
still refuse it (422 naming ``input``).
"""

from __future__ import annotations

import pytest

from approvals.models import AuditEvent
from runtime import runs
from runtime.executor import run_execute
from runtime.models import Thread, ThreadStatus
from tests.security.test_bad_input_edges import error_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

GRAPH = "three_steps"


@pytest.fixture
def finished(operator, monkeypatch) -> Thread:
    """A ``three_steps`` thread (no gate) run to its end."""
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: None)  # runs are executed here
    thread_id = operator.client.post("/lg/threads", {}).json()["thread_id"]
    created = operator.client.post(f"/lg/threads/{thread_id}/runs", {"assistant_id": GRAPH, "input": {}})
    assert created.status_code == 200, created.content
    run_execute(run_id=created.json()["run_id"])
    thread = Thread.objects.get(pk=thread_id)
    assert thread.status == ThreadStatus.COMPLETED
    return thread


def test_wait_without_input_on_a_finished_thread_returns_its_final_values_and_runs_nothing(operator, finished):
    runs_before, events_before = finished.runs.count(), AuditEvent.objects.filter(thread_id=finished.pk).count()
    response = operator.client.post(f"/lg/threads/{finished.pk}/runs/wait", {"assistant_id": GRAPH})
    assert response.status_code == 200, response.content
    final = operator.client.get(f"/lg/threads/{finished.pk}/state").json()["values"]
    assert response.json() == final and "__interrupt__" not in response.json()
    assert finished.runs.count() == runs_before
    assert AuditEvent.objects.filter(thread_id=finished.pk).count() == events_before
    assert Thread.objects.get(pk=finished.pk).checkpoint_id == finished.checkpoint_id


@pytest.mark.parametrize("endpoint", ["runs", "runs/stream"])
def test_create_and_stream_without_input_on_a_finished_thread_still_name_input(operator, finished, endpoint):
    error = error_of(operator.client.post(f"/lg/threads/{finished.pk}/{endpoint}", {"assistant_id": GRAPH}), 422)
    assert error["field"] == "input"


def test_wait_without_input_still_needs_the_start_permission(reviewer, finished):
    response = reviewer.client.post(f"/lg/threads/{finished.pk}/runs/wait", {"assistant_id": GRAPH})
    assert response.status_code == 403, response.content
