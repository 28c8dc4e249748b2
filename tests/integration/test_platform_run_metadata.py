"""A /lg/ run keeps the metadata its client sent, reports it and runs its graph with it, as LangGraph Server does.

The run object answered ``metadata: {"kind", "attempts"}`` whatever was sent, and a node's
``config["metadata"]`` never had the client's keys (nor LangSmith-style traces). LangGraph Server merges its
assistant's metadata, its thread's, the run's ``config.metadata`` and ``metadata``, then its assistant's id
(``langgraph_runtime_inmem.ops.Runs.put``), keeps that with the run, reports it (also in ``kwargs.config``,
which it always sends) and passes it into the graph's RunnableConfig.

In-process, as test_platform_run_config.py: the graph is this test's own release, its runs executed here by
the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from lgplatform.services import assistant_id_for
from runtime.cancel import checkpoints_of_run
from runtime.checkpointer import checkpointer_get
from runtime.executor import run_execute
from runtime.models import Run, RunKind
from runtime.registry import registry_load
from tests.conftest import Persona, graph_release_write, registry_restored, thread_start
from tests.security.test_bad_input_edges import error_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

# A node that writes the metadata its config has (its plain values; not LangGraph's own per-node keys) before
# its gate, and again once resumed.
MODULE = textwrap.dedent(
    """
    from typing import Any, TypedDict

    from langgraph.config import get_config
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt


    class State(TypedDict, total=False):
        n: int
        answer: str
        seen: dict[str, Any]
        seen_resumed: dict[str, Any]


    def _seen() -> dict[str, Any]:
        metadata = get_config().get("metadata") or {}
        return {k: v for k, v in metadata.items() if not k.startswith("langgraph_") and k != "checkpoint_ns"}


    def look(state: State) -> dict[str, Any]:
        return {"seen": _seen()}


    def review(state: State) -> dict[str, Any]:
        answer = interrupt({"title": "Go on?"})["decision"]
        return {"answer": answer, "seen_resumed": _seen()}


    builder = StateGraph(State)
    builder.add_node("look", look)
    builder.add_node("review", review)
    builder.add_edge(START, "look")
    builder.add_edge("look", "review")
    builder.add_edge("review", END)
    graph = builder
    """
)
THREAD_METADATA = {"case": "C-1"}
CONFIG_METADATA = {"team": "risk", "user": "from-config"}
RUN_METADATA = {"user": "u-7", "trace": 3}  # the run's own wins over its config's


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[str]:
    name = f"metadata_{uuid.uuid4().hex[:8]}"
    with registry_restored():
        registry_load(graph_release_write(tmp_path, name, MODULE, ["review"]))
        yield name


def _thread(persona: Persona, metadata: dict[str, Any] | None = None) -> str:
    return str(persona.client.post("/lg/threads", {"metadata": metadata or THREAD_METADATA}).json()["thread_id"])


def _start(persona: Persona, graph: str, thread: str, **body: Any) -> dict[str, Any]:
    created = persona.client.post(f"/lg/threads/{thread}/runs", {"assistant_id": graph, "input": {"n": 1}, **body})
    assert created.status_code == 200, created.content
    return created.json()


def _kept(graph: str, **sent: Any) -> dict[str, Any]:
    """The metadata LangGraph Server keeps for a run sent ``sent`` on a thread with ``THREAD_METADATA``."""
    return {
        "created_by": "system",
        **THREAD_METADATA,
        "graph_id": graph,
        **sent,
        "assistant_id": assistant_id_for(graph),
    }


def test_the_run_object_reports_the_metadata_it_was_sent_merged_as_langgraph_server_keeps_it(
    operator, graph, dispatched
):
    thread = _thread(operator)
    created = _start(operator, graph, thread, metadata=RUN_METADATA, config={"metadata": CONFIG_METADATA})
    kept = _kept(graph, team="risk", user="u-7", trace=3)
    run_id = created["run_id"]
    fetched = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}").json()
    [listed] = operator.client.get(f"/lg/threads/{thread}/runs").json()
    for run in (created, fetched, listed):
        assert run["metadata"] == {**kept, "kind": "start", "attempts": 0}
        assert run["kwargs"] == {
            "config": {
                "configurable": {
                    "run_id": run_id,
                    "thread_id": thread,
                    "graph_id": graph,
                    "assistant_id": assistant_id_for(graph),
                },
                "metadata": kept,
            }
        }


def test_a_node_sees_the_run_s_metadata_in_its_config(operator, graph, dispatched):
    thread = _thread(operator)
    run = _start(operator, graph, thread, metadata=RUN_METADATA, config={"metadata": CONFIG_METADATA})
    run_execute(run_id=run["run_id"])
    values = operator.client.get(f"/lg/threads/{thread}/state").json()["values"]
    assert _kept(graph, team="risk", user="u-7", trace=3).items() <= values["seen"].items()


def test_a_resume_keeps_its_own_metadata_and_its_graph_sees_it(operator, reviewer, graph, dispatched):
    thread = _thread(operator)
    start = _start(operator, graph, thread, metadata=RUN_METADATA)
    run_execute(run_id=start["run_id"])
    body = {"assistant_id": graph, "command": {"resume": {"decision": "approve"}}, "metadata": {"ticket": "T-9"}}
    resumed = reviewer.client.post(f"/lg/threads/{thread}/runs", body)
    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["metadata"] == {**_kept(graph, ticket="T-9"), "kind": "resume", "attempts": 0}
    run_execute(run_id=resumed.json()["run_id"])
    values = operator.client.get(f"/lg/threads/{thread}/state").json()["values"]
    assert values["answer"] == "approve"
    assert values["seen_resumed"]["ticket"] == "T-9" and "user" not in values["seen_resumed"]


def test_a_client_cannot_replace_the_assistant_id_nor_gatehouse_s_facts(operator, graph, dispatched):
    thread = _thread(operator)
    sent = {"assistant_id": "someone-else", "kind": "mine", "attempts": 9}
    created = _start(operator, graph, thread, metadata=sent)
    assert created["metadata"]["assistant_id"] == assistant_id_for(graph)
    assert (created["metadata"]["kind"], created["metadata"]["attempts"]) == ("start", 0)
    # The graph runs with what was sent, as LangGraph Server passes it; only the assistant's id is its own.
    stored = Run.objects.get(pk=created["run_id"]).metadata
    assert stored is not None and (stored["kind"], stored["attempts"]) == ("mine", 9)


@pytest.mark.parametrize(
    "body,field",
    [
        ({"metadata": {"gatehouse_run_id": "x"}}, "metadata.gatehouse_run_id"),
        ({"config": {"metadata": {"gatehouse_branch_id": "x"}}}, "config.metadata.gatehouse_branch_id"),
        ({"config": {"metadata": {"big": "x" * 20_000}}}, "config.metadata"),
        ({"metadata": "x"}, "metadata"),
    ],
)
def test_metadata_the_graph_cannot_run_with_is_a_422_naming_it_and_creates_no_run(
    operator, graph, dispatched, body, field
):
    thread = _thread(operator)
    answer = operator.client.post(f"/lg/threads/{thread}/runs", {"assistant_id": graph, "input": {"n": 1}, **body})
    assert error_of(answer, 422)["field"] == field
    assert not Run.objects.filter(thread_id=thread).exists()


def test_a_thread_s_gatehouse_keys_do_not_stand_in_for_the_run_s_checkpoint_metadata(operator, graph, dispatched):
    # Rollback finds a run's checkpoints by their gatehouse_run_id; a thread's metadata must not forge it.
    thread = _thread(operator, {"gatehouse_run_id": "forged", "case": "C-2"})
    run = _start(operator, graph, thread)
    run_execute(run_id=run["run_id"])
    assert checkpoints_of_run(checkpointer_get(), thread, run["run_id"])  # rollback finds what the run wrote
    assert not checkpoints_of_run(checkpointer_get(), thread, "forged")
    seen = operator.client.get(f"/lg/threads/{thread}/state").json()["values"]["seen"]
    assert seen["case"] == "C-2" and "gatehouse_run_id" not in seen


def test_a_run_made_elsewhere_reports_its_thread_s_metadata_and_runs_with_none(operator, graph, dispatched):
    native = thread_start(operator, graph, {"n": 1}, case="C-3")["id"]
    [run] = operator.client.get(f"/lg/threads/{native}/runs").json()
    kept = {"created_by": "system", "case": "C-3", "graph_id": graph, "assistant_id": assistant_id_for(graph)}
    assert run["metadata"] == {**kept, "kind": "start", "attempts": 0}
    assert run["kwargs"]["config"]["metadata"] == kept
    assert Run.objects.get(pk=run["run_id"]).metadata is None
    run_execute(run_id=run["run_id"])
    assert "case" not in operator.client.get(f"/lg/threads/{native}/state").json()["values"]["seen"]


# What a /lg/ start and a resume cost before runs kept their metadata (measured on that code): recording it
# rides on the run options' update, and the thread it is made from is read with the run.
LG_START_QUERIES = 13
LG_RESUME_QUERIES = 17


def test_keeping_a_run_s_metadata_costs_a_start_and_a_resume_no_query(operator, reviewer, graph, dispatched):
    thread = _thread(operator)
    operator.client.get("/lg/threads/" + thread)  # the token's throttled last-used update happens here
    with CaptureQueriesContext(connection) as started:
        start = _start(operator, graph, thread, metadata=RUN_METADATA, config={"metadata": CONFIG_METADATA})
    run_execute(run_id=start["run_id"])
    body = {"assistant_id": graph, "command": {"resume": {"decision": "approve"}}, "metadata": {"ticket": "T-9"}}
    reviewer.client.get("/lg/threads/" + thread)
    with CaptureQueriesContext(connection) as resumed:
        answer = reviewer.client.post(f"/lg/threads/{thread}/runs", body)
    assert answer.status_code == 200, answer.content
    assert Run.objects.get(pk=answer.json()["run_id"]).kind == RunKind.RESUME
    assert len(started) <= LG_START_QUERIES, "\n".join(q["sql"][:200] for q in started.captured_queries)
    assert len(resumed) <= LG_RESUME_QUERIES, "\n".join(q["sql"][:200] for q in resumed.captured_queries)
