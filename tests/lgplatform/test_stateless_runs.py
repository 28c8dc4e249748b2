"""Stateless runs (``client.runs.wait(None, ...)``, ``runs.stream(None, ...)``, ``runs.create(None, ...)``,
``runs.create_batch``) were 404s: the first call many LangGraph examples make. Each is a run on a thread made
for it, as on LangGraph Server; Gatehouse keeps that thread (a paused run's task is decided there), refuses a
client that asks for its deletion, and a refused run leaves no thread behind."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from approvals.models import ApprovalTask, AuditAction, AuditEvent, TaskStatus
from lgplatform.schemas import STATELESS_BATCH_MAX
from runtime.models import Run, Thread
from tests.conftest import Persona, loan_input, wait_for
from tests.security.test_bad_input_edges import error_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _threads_since(persona: Persona, since: datetime) -> list[str]:
    """The threads ``persona`` created since ``since`` (this test's own: the session runs one test at a time)."""
    made = Thread.objects.filter(created_by=persona.user, created_at__gte=since)
    return [str(pk) for pk in made.values_list("pk", flat=True)]


def _located(response: Any) -> tuple[str, str]:
    """(thread id, run id) from ``Content-Location``, which the SDK reads for them."""
    _, thread, _, run = response["Content-Location"].strip("/").split("/")
    return thread, run


def test_runs_wait_without_a_thread_runs_on_a_new_one_it_keeps(operator):
    since = timezone.now()
    response = operator.client.post("/lg/runs/wait", {"assistant_id": "three_steps", "input": {"x": 1}})
    assert response.status_code == 200, response.content
    assert response.json()["seen"] == ["t1", "t2", "t3"]
    thread, run = _located(response)
    assert _threads_since(operator, since) == [thread]
    made = Thread.objects.get(pk=thread)
    assert made.graph == "three_steps" and made.status == "completed"
    assert str(Run.objects.get(pk=run).thread_id) == thread
    assert AuditEvent.objects.filter(thread_id=thread, action=AuditAction.THREAD_CREATED).count() == 1
    # The thread is there to read afterwards (LangGraph Server would have deleted it): on_completion "keep".
    body = {"assistant_id": "three_steps", "input": {"x": 2}, "on_completion": "keep"}
    kept = operator.client.post("/lg/runs/wait", body)
    assert kept.status_code == 200, kept.content
    state = operator.client.get(f"/lg/threads/{_located(kept)[0]}/state")
    assert state.json()["values"]["seen"] == ["t1", "t2", "t3"]


def test_a_stateless_run_that_pauses_at_a_gate_waits_there_for_a_reviewer(operator, reviewer):
    paused = operator.client.post(
        "/lg/runs/wait", {"assistant_id": "loan_approval", "input": loan_input(amount=20000, income=40000)}
    )
    assert paused.status_code == 200, paused.content
    [interrupt] = paused.json()["__interrupt__"]
    thread, _ = _located(paused)
    task = ApprovalTask.objects.get(thread_id=thread)
    assert task.status == TaskStatus.PENDING and interrupt["id"]
    resumed = reviewer.client.post(
        f"/lg/threads/{thread}/runs/wait",
        {"assistant_id": "loan_approval", "command": {"resume": {"decision": "approve", "reason": "stateless ok"}}},
    )
    assert resumed.status_code == 200, resumed.content
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED
    assert Thread.objects.get(pk=thread).status == "completed"


def test_the_new_thread_is_found_by_the_runs_metadata(operator):
    body = {"assistant_id": "three_steps", "input": {"x": 8}, "metadata": {"conversation": "c-8"}}
    thread, _ = _located(operator.client.post("/lg/runs/wait", body))
    found = operator.client.post("/lg/threads/search", {"metadata": {"conversation": "c-8"}, "ids": [thread]})
    assert [t["thread_id"] for t in found.json()] == [thread]


def test_a_background_stateless_run_is_named_by_its_answer_and_runs(operator):
    created = operator.client.post("/lg/runs", {"assistant_id": "three_steps", "input": {"x": 3}})
    assert created.status_code == 200, created.content
    run = created.json()
    assert (run["thread_id"], run["run_id"]) == _located(created)
    joined = operator.client.get(f"/lg/threads/{run['thread_id']}/runs/{run['run_id']}/join")
    assert joined.status_code == 200 and joined.json()["seen"] == ["t1", "t2", "t3"]


def test_a_streamed_stateless_run_streams_its_values_to_the_end(operator):
    response = operator.client.post(
        "/lg/runs/stream", {"assistant_id": "three_steps", "input": {"x": 4}, "stream_mode": ["values"]}
    )
    assert response.status_code == 200, response.content
    thread, run = _located(response)

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    events = []
    for block in async_to_sync(read)().decode().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if not line.startswith("id: "))
        events.append((fields["event"], json.loads(fields["data"])))
    assert events[0] == ("metadata", {"run_id": run, "attempt": 1})
    assert events[-2:] == [("values", {"x": 4, "seen": ["t1", "t2", "t3"]}), ("end", None)]
    assert Thread.objects.get(pk=thread).status == "completed"


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"on_completion": "delete"}, "on_completion"),
        ({"command": {"resume": "yes"}}, "command"),
        ({"checkpoint_id": "1ef0"}, "checkpoint_id"),
        ({"checkpoint": {"checkpoint_id": "1ef0"}}, "checkpoint"),
        ({"input": None}, "input"),
        ({"input": {"x": "one"}}, "input.x"),
        ({"on_completion": "later"}, "on_completion"),
    ],
)
@pytest.mark.parametrize("route", ["runs", "runs/wait", "runs/stream"])
def test_a_refused_stateless_run_names_the_field_and_leaves_no_thread(operator, route, extra, field):
    since = timezone.now()
    body = {"assistant_id": "three_steps", "input": {"x": 1}, **extra}
    error = error_of(operator.client.post(f"/lg/{route}", body), 422)
    assert error["field"] == field, error
    assert _threads_since(operator, since) == []


def test_one_who_may_not_start_threads_gets_a_403_and_no_thread(reviewer):
    since = timezone.now()
    error_of(reviewer.client.post("/lg/runs/wait", {"assistant_id": "three_steps", "input": {"x": 1}}), 403)
    assert _threads_since(reviewer, since) == []


def test_an_unknown_assistant_is_a_404_and_no_thread(operator):
    since = timezone.now()
    refused = operator.client.post("/lg/runs", {"assistant_id": "nope", "input": {}})
    assert error_of(refused, 404)["field"] == "assistant_id"
    assert _threads_since(operator, since) == []


def test_a_batch_makes_one_thread_per_run_and_each_runs(operator):
    since = timezone.now()
    bodies = [{"assistant_id": "three_steps", "input": {"x": n}} for n in (5, 6, 7)]
    response = operator.client.post("/lg/runs/batch", bodies)
    assert response.status_code == 200, response.content
    runs = response.json()
    assert len({r["thread_id"] for r in runs}) == 3
    assert sorted(_threads_since(operator, since)) == sorted(r["thread_id"] for r in runs)

    def finished() -> bool:
        return all(Thread.objects.get(pk=r["thread_id"]).status == "completed" for r in runs)

    wait_for(finished, timeout=30, what="the batch's runs to finish")


def test_a_batch_with_one_refused_run_creates_none_and_says_which(operator):
    since = timezone.now()
    bodies = [
        {"assistant_id": "three_steps", "input": {"x": 1}},
        {"assistant_id": "three_steps", "input": {"x": "two"}},
    ]
    error = error_of(operator.client.post("/lg/runs/batch", bodies), 422)
    assert error["field"] == "[1].input.x", error
    assert _threads_since(operator, since) == []


@pytest.mark.parametrize("count", [0, STATELESS_BATCH_MAX + 1])
def test_a_batch_of_no_runs_or_too_many_is_refused(operator, count):
    since = timezone.now()
    bodies = [{"assistant_id": "three_steps", "input": {"x": n}} for n in range(count)]
    error = error_of(operator.client.post("/lg/runs/batch", bodies), 422)
    assert error["field"] == "body", error
    assert _threads_since(operator, since) == []


def test_a_batch_item_that_is_not_a_run_is_named_by_its_index(operator):
    error = error_of(operator.client.post("/lg/runs/batch", [{"assistant_id": "three_steps", "input": {}}, 5]), 422)
    assert error["field"] == "[1].assistant_id", error
    run = {"assistant_id": "three_steps", "input": {}}
    assert error_of(operator.client.post("/lg/runs/batch", [run, {"assistant_id": 7}]), 422)["field"] == (
        "[1].assistant_id"
    )
    # Every other operation still takes an object only.
    assert error_of(operator.client.post("/lg/runs", [run, run]), 422)["field"] == "body"
