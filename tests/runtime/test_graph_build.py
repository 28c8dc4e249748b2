"""A graph that cannot be built for a run fails that run cleanly: the run and its thread are failed with the
registry's one-line error, and nothing is left running or busy.

In-process: the run is executed here by the worker's executor (dispatch recorded, not sent). The registered
``built_per_run`` factory is swapped for one whose graph for a run does not compile (an edge to no node);
what load built is unchanged, so the thread's pages still read its state.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph

from runtime.executor import run_execute
from runtime.models import Run, RunStatus, ThreadStatus
from runtime.registry import graph_get
from tests.conftest import thread_start
from tests.graphs.factories import built_per_run

pytestmark = pytest.mark.usefixtures("live_db")


def _edge_to_nowhere(config: RunnableConfig) -> StateGraph[Any]:
    builder = built_per_run(config)
    builder.add_edge("record", "nowhere")
    return builder


def test_a_graph_that_does_not_compile_for_a_run_fails_the_run_and_its_thread(dispatched, operator, monkeypatch):
    monkeypatch.setattr(graph_get("built_per_run"), "factory", _edge_to_nowhere)
    thread = thread_start(operator, "built_per_run", {"n": 1})
    run_execute(run_id=dispatched[-1])
    run = Run.objects.select_related("thread").get(pk=dispatched[-1])
    error = "graph 'built_per_run' does not compile: ValueError: Found edge ending at unknown node `nowhere`"
    assert (run.status, run.error, run.lease_expires_at) == (RunStatus.FAILED, error, None)
    assert (run.thread.status, run.thread.error) == (ThreadStatus.FAILED, error)
    shown = operator.client.get(f"/api/threads/{thread['id']}")
    assert shown.status_code == 200
    assert shown.json()["status"] == "failed"
