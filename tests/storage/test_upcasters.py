"""Paused threads survive a deploy that changes the state schema (docs/schema-evolution.md).

In process: threads pause under schema v1, the registry is reloaded with v2
(as a restarted worker would load it), and the same executor resumes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.checkpointer import checkpointer_get
from runtime.executor import run_execute
from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.registry import graph_get, registry_load
from runtime.state import thread_state_read
from runtime.upcasters import VERSION_KEY, required_fields

GRAPHS = Path(__file__).parent / "graphs"


@pytest.fixture
def registry(live_db: None) -> Iterator[None]:
    yield
    registry_load()


def _run(thread: Thread, kind: RunKind, **fields: object) -> Run:
    run = Run.objects.create(thread=thread, kind=kind, **fields)
    run_execute(run_id=str(run.id))
    run.refresh_from_db()
    return run


def _pause_under_v1(count: int) -> list[Thread]:
    registry_load(GRAPHS / "v1.json")
    threads = []
    for i in range(count):
        thread = Thread.objects.create(graph="schema_demo")
        run = _run(thread, RunKind.START, input={"customer": f"Ada {i}"})
        assert run.status == RunStatus.INTERRUPTED, run.error
        threads.append(thread)
    return threads


def _resume(thread: Thread) -> Run:
    thread.refresh_from_db()
    snapshot = graph_get("schema_demo").compiled().get_state({"configurable": {"thread_id": str(thread.id)}})
    [interrupt] = snapshot.interrupts
    return _run(
        thread,
        RunKind.RESUME,
        command={"resume": {interrupt.id: "yes"}, "checkpoint_id": thread.checkpoint_id},
    )


def test_threads_paused_under_v1_resume_under_v2_with_the_renamed_field(registry):
    threads = _pause_under_v1(3)
    registry_load(GRAPHS / "v2.json")
    for thread in threads:
        run = _resume(thread)
        assert run.status == RunStatus.SUCCEEDED, run.error
        thread.refresh_from_db()
        assert thread.status == ThreadStatus.COMPLETED
        i = threads.index(thread)
        # The v2 gate node saw the upcast field, and the additive one at its default.
        assert thread.values["result"] == f"v2:Ada {i}:0:yes"
        assert "customer" not in thread.values


def test_the_upcast_checkpoint_keeps_its_id_and_is_stamped_with_the_new_version(registry):
    [thread] = _pause_under_v1(1)
    thread.refresh_from_db()
    paused_at = thread.checkpoint_id
    registry_load(GRAPHS / "v2.json")
    graph = graph_get("schema_demo").compiled()
    config = {"configurable": {"thread_id": str(thread.id)}}
    assert thread_state_read(thread).values["client_name"] == "Ada 0"  # a console read upcasts in memory
    stored = graph.checkpointer.get_tuple(config)  # a run's load rewrites it in place
    assert stored.config["configurable"]["checkpoint_id"] == paused_at
    assert stored.metadata[VERSION_KEY] == 2
    assert graph.get_state(config).interrupts  # still pending: the decision's checkpoint is still valid


def test_a_checkpoint_missing_a_required_field_fails_the_run_naming_it(registry):
    [thread] = _pause_under_v1(1)
    registry_load(GRAPHS / "v2_broken.json")
    thread.refresh_from_db()
    run = Run.objects.create(
        thread=thread, kind=RunKind.RESUME, command={"resume": {"x": "yes"}, "checkpoint_id": thread.checkpoint_id}
    )
    run_execute(run_id=str(run.id))
    run.refresh_from_db()
    thread.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert thread.status == ThreadStatus.FAILED
    assert "'client_name'" in run.error and "schema version 1" in run.error, run.error
    # Nothing was rewritten: the stored checkpoint is still the v1 one.
    raw = list(checkpointer_get().list({"configurable": {"thread_id": str(thread.id)}}))
    assert raw and all(t.metadata.get(VERSION_KEY, 1) == 1 for t in raw)


def test_required_fields_are_only_the_explicit_ones():
    from tests.storage.graphs import schema_v1, schema_v2

    assert required_fields(schema_v1.State) == []
    assert required_fields(schema_v2.State) == ["client_name"]
