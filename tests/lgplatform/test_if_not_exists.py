"""``if_not_exists="create"`` on a run for an unknown thread id creates the thread, then runs, as LangGraph
Server does (``lgplatform.services.run_create``): with the permission ``threads.create`` needs, audited as
a creation, and nothing is left behind when the run is refused."""

from __future__ import annotations

import uuid

import pytest

from approvals.models import AuditAction, AuditEvent
from runtime.models import Thread
from tests.security.test_bad_input_edges import error_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


@pytest.mark.parametrize("route", ["runs/wait", "runs", "runs/stream"])
def test_a_run_with_if_not_exists_create_creates_the_thread(operator, route):
    thread = str(uuid.uuid4())
    body = {"assistant_id": "three_steps", "input": {"x": 1}, "if_not_exists": "create"}
    response = operator.client.post(f"/lg/threads/{thread}/{route}", body)
    assert response.status_code == 200, response.content
    created = Thread.objects.get(pk=thread)
    assert created.graph == "three_steps" and created.created_by == operator.user
    assert AuditEvent.objects.filter(thread_id=thread, action=AuditAction.THREAD_CREATED).count() == 1


def test_without_it_an_unknown_thread_is_still_a_404(operator):
    thread = str(uuid.uuid4())
    body = {"assistant_id": "three_steps", "input": {"x": 1}}
    assert error_of(operator.client.post(f"/lg/threads/{thread}/runs/wait", body), 404)["field"] == "thread_id"
    assert not Thread.objects.filter(pk=thread).exists()


def test_one_who_may_not_create_threads_gets_a_403_and_no_thread(reviewer):
    thread = str(uuid.uuid4())
    body = {"assistant_id": "three_steps", "input": {"x": 1}, "if_not_exists": "create"}
    error_of(reviewer.client.post(f"/lg/threads/{thread}/runs/wait", body), 403)
    assert not Thread.objects.filter(pk=thread).exists()


def test_a_refused_run_leaves_no_thread(operator):
    thread = str(uuid.uuid4())
    body = {"assistant_id": "three_steps", "input": {"x": "one"}, "if_not_exists": "create"}
    assert error_of(operator.client.post(f"/lg/threads/{thread}/runs/wait", body), 422)["field"].startswith("input")
    assert not Thread.objects.filter(pk=thread).exists()


def test_an_existing_thread_runs_as_it_is(operator):
    thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    body = {"assistant_id": "three_steps", "input": {"x": 1}, "if_not_exists": "create"}
    assert operator.client.post(f"/lg/threads/{thread}/runs/wait", body).json()["seen"] == ["t1", "t2", "t3"]
    assert AuditEvent.objects.filter(thread_id=thread, action=AuditAction.THREAD_CREATED).count() == 1


def test_a_created_thread_takes_the_runs_metadata_as_langgraph_server_gives_it(operator):
    """The thread was created with no metadata: ``threads.search`` by the run's metadata did not find it."""
    thread = str(uuid.uuid4())
    body = {
        "assistant_id": "three_steps",
        "input": {"x": 1},
        "if_not_exists": "create",
        "config": {"metadata": {"team": "ops", "user": "config"}},
        "metadata": {"user": "ada", "graph_id": "loan_approval"},  # its graph is the run's
    }
    assert operator.client.post(f"/lg/threads/{thread}/runs", body).status_code == 200
    made = Thread.objects.get(pk=thread)
    assert made.metadata == {"team": "ops", "user": "ada"} and made.graph == "three_steps"
    found = operator.client.post("/lg/threads/search", {"metadata": {"user": "ada"}, "ids": [thread]}).json()
    assert [t["thread_id"] for t in found] == [thread]
    assert found[0]["metadata"]["graph_id"] == "three_steps"


def test_an_existing_thread_keeps_its_own_metadata(operator):
    thread = operator.client.post("/lg/threads", {"metadata": {"user": "first"}}).json()["thread_id"]
    body = {"assistant_id": "three_steps", "input": {"x": 1}, "if_not_exists": "create", "metadata": {"user": "x"}}
    assert operator.client.post(f"/lg/threads/{thread}/runs/wait", body).status_code == 200
    assert Thread.objects.get(pk=thread).metadata == {"user": "first"}
