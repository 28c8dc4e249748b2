"""A thread whose state the graph cannot load because a dataclass state (tests/graphs/dataclass_state.py) is
missing a required field: building it raises a ``TypeError``, not a Pydantic ``ValidationError``.

The console's thread page answered a 500 (its time-travel panel read the checkpoint through the graph and
caught only a ``ValueError``); the first run's failure recorded no checkpoint on the thread (it read the
latest one through the graph too), so the fork docs/platform-api.md names as the repair was refused as
"this thread has no checkpoints to travel to"; and the reason shown ended in LangGraph's note on the
exception ("Before task with name ...") instead of the missing field.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.utils.html import escape

from runtime.executor import run_execute
from runtime.models import Run, RunStatus, Thread, ThreadStatus
from runtime.registry import graph_get
from tests.console.conftest import console_client

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

GRAPH = "dc_gate"
MISSING = "missing 1 required positional argument: 'q'"
MISSING_HTML = escape(MISSING)
WHY = "the graph cannot load this state: TypeError: D.__init__() missing 1 required positional argument: 'q'"


@pytest.fixture
def unloadable(dispatched: Any, operator: Any) -> Thread:
    """A thread started without ``q`` (the graph has no input schema to refuse it), its first run run here."""
    response = operator.client.post("/api/threads", {"graph": GRAPH, "input": {}})
    assert response.status_code == 201, response.content
    [run] = Run.objects.filter(thread_id=response.json()["id"])
    run_execute(run_id=str(run.id))
    assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED
    thread = Thread.objects.get(pk=response.json()["id"])
    assert thread.status == ThreadStatus.FAILED
    return thread


def _input_checkpoint(operator: Any, thread: Thread) -> dict[str, Any]:
    history = operator.client.get(f"/api/threads/{thread.id}/history").json()
    [first] = [c for c in history if c["step"] == -1]
    return dict(first)


def test_why_names_the_error_not_langgraphs_note_on_it(operator, unloadable):
    body = operator.client.get(f"/api/threads/{unloadable.id}").json()
    assert body["state_unreadable"] == WHY
    history = operator.client.get(f"/api/threads/{unloadable.id}/history").json()
    assert history[0]["state_unreadable"] == WHY
    assert operator.client.get(f"/lg/threads/{unloadable.id}/state").json()["state_unreadable"] == WHY


def test_why_names_what_the_error_was_raised_from(operator, unloadable, monkeypatch):
    def defect(self: Any) -> Any:
        raise RuntimeError("the graph's factory failed") from KeyError("q")

    monkeypatch.setattr(type(graph_get(GRAPH)), "compiled", defect)
    body = operator.client.get(f"/api/threads/{unloadable.id}").json()
    assert body["state_unreadable"] == (
        "the graph cannot load this state: RuntimeError: the graph's factory failed; caused by KeyError: 'q'"
    )


def test_the_console_thread_page_opens_and_says_why(personas, unloadable):
    client = console_client(personas["operator"])
    response = client.get(f"/threads/{unloadable.id}/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="state-unreadable"' in page and MISSING_HTML in page
    assert 'action="/threads/' in page and "/fork" in page  # the time-travel panel is there to repair it
    latest = client.get(f"/api/threads/{unloadable.id}").json()["checkpoint_id"]
    shown = client.get(f"/threads/{unloadable.id}/", {"checkpoint": latest})
    assert shown.status_code == 200 and MISSING_HTML in shown.content.decode()
    card = client.get(
        f"/threads/{unloadable.id}/",
        {"checkpoint": latest},
        headers={"HX-Request": "true", "HX-Target": "checkpoint-view"},
    )
    assert card.status_code == 200 and MISSING_HTML in card.content.decode()


def test_the_failed_thread_names_its_latest_checkpoint(operator, unloadable):
    history = operator.client.get(f"/api/threads/{unloadable.id}/history").json()
    assert unloadable.checkpoint_id == history[0]["checkpoint_id"]


@pytest.mark.parametrize("row_names_it", [True, False], ids=["recorded", "row-without-checkpoint"])
def test_a_fork_from_the_input_checkpoint_repairs_it(operator, unloadable, dispatched, row_names_it):
    """What docs/platform-api.md tells a client to do; a thread failed before the fix has no checkpoint on its
    row, and the saver's is taken."""
    if not row_names_it:
        Thread.objects.filter(pk=unloadable.pk).update(checkpoint_id="")
    first = _input_checkpoint(operator, unloadable)
    fork = {"checkpoint_id": first["checkpoint_id"], "values": {"q": "fixed"}, "reason": "fix"}
    response = operator.client.post(f"/api/threads/{unloadable.id}/fork", fork)
    assert response.status_code == 201, response.content
    body = operator.client.get(f"/api/threads/{unloadable.id}").json()
    assert body["status"] == "idle" and body["state_unreadable"] == ""
    assert body["values"]["q"] == "fixed"
    assert operator.client.get(f"/lg/threads/{unloadable.id}/state").json()["next"] == ["dgate"]


def test_a_fork_that_runs_reaches_the_gate(operator, unloadable, dispatched):
    first = _input_checkpoint(operator, unloadable)
    fork = {"checkpoint_id": first["checkpoint_id"], "values": {"q": "fixed"}, "reason": "fix", "run": True}
    response = operator.client.post(f"/api/threads/{unloadable.id}/fork", fork)
    assert response.status_code == 201, response.content
    run_execute(run_id=response.json()["run_id"])
    after = operator.client.get(f"/api/threads/{unloadable.id}").json()
    assert after["status"] == "interrupted", after
    assert [t["node"] for t in after["pending_tasks"]] == ["dgate"]


def test_a_replay_and_a_platform_fork_are_accepted(operator, unloadable, dispatched):
    first = _input_checkpoint(operator, unloadable)["checkpoint_id"]
    fork = operator.client.client.post(
        f"/lg/threads/{unloadable.id}/state",
        json.dumps({"values": {"q": "fixed"}, "checkpoint_id": first}),
        content_type="application/json",
        headers={**operator.client.headers, "X-Gatehouse-Reason": "fix"},
    )
    assert fork.status_code == 200, fork.content
    assert operator.client.get(f"/api/threads/{unloadable.id}").json()["values"]["q"] == "fixed"
    replay = operator.client.post(f"/api/threads/{unloadable.id}/replay", {"checkpoint_id": first, "reason": "again"})
    assert replay.status_code == 202, replay.content


def test_the_console_pages_open_on_the_unreadable_line_once_forked(personas, operator, unloadable, dispatched):
    """A branched thread reads when each line left the one before it (effects_lines): the unreadable one too."""
    history = operator.client.get(f"/api/threads/{unloadable.id}/history").json()
    first = _input_checkpoint(operator, unloadable)["checkpoint_id"]
    fork = {"checkpoint_id": first, "values": {"q": "fixed"}, "reason": "fix"}
    assert operator.client.post(f"/api/threads/{unloadable.id}/fork", fork).status_code == 201
    client = console_client(personas["operator"])
    response = client.get(f"/threads/{unloadable.id}/", {"checkpoint": history[0]["checkpoint_id"]})
    assert response.status_code == 200 and MISSING_HTML in response.content.decode()
    assert client.get(f"/threads/{unloadable.id}/live").status_code == 200
