"""A thread whose checkpoint the graph cannot load (tests/graphs/models.py: a stored value its Pydantic state
refuses) is still read: its row and its values as stored, with ``state_unreadable`` saying why. Every read of
it answered Django's HTML "Server Error (500)": LangGraph builds the state model to tell what runs next.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError, transaction

from runtime import runs
from runtime.checkpointer import checkpointer_get
from runtime.executor import run_execute
from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.registry import graph_get
from tests.conftest import api_wait
from tests.console.conftest import console_client

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

GRAPH = "budget_review"
WHY = "the graph cannot load this state: Amount must be more than 0"


@pytest.fixture
def unloadable(dispatched, operator) -> Thread:
    """A thread started with ``amount: -3`` before starts were checked against the model's bounds (run here
    in-process, past the check): its first run failed reading the state, and its checkpoint holds the -3."""
    thread = Thread.objects.create(graph=GRAPH, created_by=operator.user)
    with transaction.atomic():
        run = runs.run_enqueue(thread=thread, kind=RunKind.START, input={"subject": "laptops", "amount": -3})
    run_execute(run_id=str(run.id))
    assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED
    # A first run failing this early records no checkpoint on the row; one that failed later (a resume) has it.
    latest = checkpointer_get().get_tuple({"configurable": {"thread_id": str(thread.id), "checkpoint_ns": ""}})
    Thread.objects.filter(pk=thread.pk).update(checkpoint_id=latest.config["configurable"]["checkpoint_id"])
    thread.refresh_from_db()
    assert thread.status == ThreadStatus.FAILED
    return thread


def test_the_native_api_reads_the_thread_with_its_values_as_stored_and_why(operator, unloadable):
    response = operator.client.get(f"/api/threads/{unloadable.id}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "failed" and "greater than 0" in body["error"]
    assert body["values"] == {"subject": "laptops", "amount": -3}
    assert body["checkpoint_id"] == unloadable.checkpoint_id
    assert body["state_unreadable"] == WHY
    history = operator.client.get(f"/api/threads/{unloadable.id}/history")
    assert history.status_code == 200, history.content
    latest = history.json()[0]
    assert latest["checkpoint_id"] == unloadable.checkpoint_id
    assert latest["values"] == {"subject": "laptops", "amount": -3} and latest["state_unreadable"] == WHY


def test_the_platform_api_reads_its_state_and_history_with_why(operator, unloadable):
    response = operator.client.get(f"/lg/threads/{unloadable.id}/state")
    assert response.status_code == 200, response.content
    state = response.json()
    assert state["values"] == {"subject": "laptops", "amount": -3}
    assert state["state_unreadable"] == WHY
    assert state["next"] == [] and state["checkpoint"]["checkpoint_id"] == unloadable.checkpoint_id
    history = operator.client.post(f"/lg/threads/{unloadable.id}/history", {"limit": 5})
    assert history.status_code == 200, history.content
    assert history.json()[0]["state_unreadable"] == WHY
    assert operator.client.get(f"/lg/threads/{unloadable.id}/state", subgraphs=True).status_code == 200


def test_a_state_it_loads_says_nothing_is_unreadable(operator, unloadable):
    # The thread's first checkpoint (the input, before START wrote it to the channels) loads: no next node reads it.
    history = operator.client.get(f"/api/threads/{unloadable.id}/history").json()
    assert [c["state_unreadable"] for c in history[1:]] == [""] * (len(history) - 1)


def test_update_state_on_it_is_a_409_saying_why_and_writes_nothing(operator, unloadable):
    response = operator.client.post(f"/lg/threads/{unloadable.id}/state", {"values": {"amount": 5}})
    error = error_of_platform(response, 409)
    assert error["field"] == "thread_id"
    assert error["message"].startswith(WHY) and "fork the thread from an earlier checkpoint" in error["message"]
    assert Thread.objects.get(pk=unloadable.pk).checkpoint_id == unloadable.checkpoint_id


def test_a_fork_from_a_checkpoint_the_graph_loads_repairs_it(operator, unloadable):
    """What docs/platform-api.md tells a client to do with an unreadable state."""
    history = operator.client.get(f"/api/threads/{unloadable.id}/history").json()
    [loads, *_] = [c for c in history if not c["state_unreadable"]]
    fork = {"checkpoint_id": loads["checkpoint_id"], "values": {"subject": "laptops", "amount": 5}, "reason": "fix"}
    assert operator.client.post(f"/api/threads/{unloadable.id}/fork", fork).status_code == 201
    body = operator.client.get(f"/api/threads/{unloadable.id}").json()
    assert body["status"] == "idle" and body["state_unreadable"] == ""
    assert body["values"] == {"subject": "laptops", "amount": 5}
    assert operator.client.get(f"/lg/threads/{unloadable.id}/state").json()["next"] == ["review"]


def test_the_console_thread_page_opens_and_says_why_the_state_is_shown_as_stored(personas, unloadable):
    response = console_client(personas["operator"]).get(f"/threads/{unloadable.id}/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="state-unreadable"' in page and "The graph cannot load this state: Amount must be more than 0" in page


def test_a_start_waited_for_answers_the_failed_thread_with_why(live_worker, operator):
    """A validator of the state model (which the per-field checks before a start do not run) refuses the
    subject: the first run fails, and the long poll answered its 500 instead of the failed thread."""
    body = {"graph": GRAPH, "input": {"subject": "unloadable", "amount": 5}}
    wait = f"?wait_for=failed,interrupted,completed&timeout={api_wait(20)}"
    response = operator.client.post(f"/api/threads{wait}", body)
    assert response.status_code == 201, response.content
    thread = response.json()
    assert thread["status"] == "failed"
    assert thread["state_unreadable"] == "the graph cannot load this state: subject: this subject cannot be loaded"
    assert thread["values"] == {"subject": "unloadable", "amount": 5}


def test_a_graph_that_cannot_be_built_leaves_its_threads_readable(operator, unloadable, monkeypatch):
    def defect(self: Any) -> Any:
        raise RuntimeError("a defect")

    monkeypatch.setattr(type(graph_get(GRAPH)), "compiled", defect)
    body = operator.client.get(f"/api/threads/{unloadable.id}").json()
    assert body["values"] == {"subject": "laptops", "amount": -3}
    assert body["state_unreadable"] == "the graph cannot load this state: RuntimeError: a defect"
    history = operator.client.get(f"/api/threads/{unloadable.id}/history").json()
    assert history and {c["state_unreadable"] for c in history} == {body["state_unreadable"]}


def test_a_database_failure_is_not_taken_for_an_unreadable_state(operator, unloadable, monkeypatch):
    def down(self: Any) -> Any:
        raise OperationalError("the connection was lost")

    monkeypatch.setattr(type(graph_get(GRAPH)), "compiled", down)
    response = operator.client.get(f"/api/threads/{unloadable.id}")
    assert response.status_code == 503, response.content
    assert response.json()["error"]["code"] == "unavailable"


def error_of_platform(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["detail"] == body["error"]["message"]
    return dict(body["error"])
