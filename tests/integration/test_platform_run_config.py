"""A /lg/ run's ``config.tags`` and ``config.run_name`` reach its graph as LangGraph Server passes them, and the
run object reports them back in ``kwargs.config``.

They were checked (tests/api/test_lg_run_config.py), then dropped: a node's ``get_config()["tags"]`` had none
of the client's tags, a graph factory was built without them, the ``events`` stream's root run was named after
the graph whatever ``run_name`` said, and every run object answered ``kwargs: {}``.

In-process: the graph is this test's own release (the registry loaded from its files), its runs executed here
by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from runtime.executor import run_execute
from runtime.models import Run
from runtime.registry import registry_load
from tests.conftest import Persona, graph_release_write, registry_restored

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

# A factory that takes the run's config (as LangGraph Server calls one, once per run) and a node that reads
# its own: both write what they saw into the state.
MODULE = textwrap.dedent(
    """
    from typing import Any, TypedDict

    from langchain_core.runnables import RunnableConfig
    from langgraph.config import get_config
    from langgraph.graph import END, START, StateGraph


    class State(TypedDict, total=False):
        n: int
        node_tags: list[str]
        built_tags: list[str]
        built_run_name: str


    def graph(config: RunnableConfig) -> StateGraph:
        built = {"built_tags": list(config.get("tags") or []), "built_run_name": str(config.get("run_name") or "")}

        def look(state: State) -> dict[str, Any]:
            return {"node_tags": list(get_config().get("tags") or []), **built}

        builder = StateGraph(State)
        builder.add_node("look", look)
        builder.add_edge(START, "look")
        builder.add_edge("look", END)
        return builder
    """
)
SENT = {"tags": ["nightly", "batch"], "run_name": "nightly-check"}


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[str]:
    name = f"configured_{uuid.uuid4().hex[:8]}"
    with registry_restored():
        registry_load(graph_release_write(tmp_path, name, MODULE, []))
        yield name


def _run(persona: Persona, graph: str, **body: Any) -> tuple[str, dict[str, Any]]:
    thread = persona.client.post("/lg/threads", {}).json()["thread_id"]
    created = persona.client.post(f"/lg/threads/{thread}/runs", {"assistant_id": graph, "input": {"n": 1}, **body})
    assert created.status_code == 200, created.content
    return thread, created.json()


def _events(persona: Persona, thread: str, run_id: str) -> list[dict[str, Any]]:
    response = persona.client.get(f"/lg/threads/{thread}/runs/{run_id}/stream")
    assert response.status_code == 200
    body = async_to_sync(_read)(response.streaming_content).decode()
    blocks = [dict(line.split(": ", 1) for line in block.split("\n")) for block in body.strip().split("\n\n")]
    return [json.loads(fields["data"]) for fields in blocks if fields.get("event") == "events"]


async def _read(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def test_a_node_and_the_graph_factory_get_the_run_s_tags_and_run_name(operator, graph, dispatched):
    thread, run = _run(operator, graph, config=SENT)
    run_execute(run_id=run["run_id"])
    assert Run.objects.get(pk=run["run_id"]).status == "succeeded"
    values = operator.client.get(f"/lg/threads/{thread}/state").json()["values"]
    assert {"nightly", "batch"} <= set(values["node_tags"])  # LangGraph adds its own (graph:step:N) to a node's
    assert values["built_tags"] == ["nightly", "batch"]
    assert values["built_run_name"] == "nightly-check"


def test_a_run_sent_no_tags_runs_untagged_under_the_graph_s_name(operator, graph, dispatched):
    thread, run = _run(operator, graph, stream_mode="events")
    run_execute(run_id=run["run_id"])
    values = operator.client.get(f"/lg/threads/{thread}/state").json()["values"]
    assert not {"nightly", "batch"} & set(values["node_tags"])
    assert (values["built_tags"], values["built_run_name"]) == ([], "")
    assert _events(operator, thread, run["run_id"])[0]["name"] == graph


def test_the_events_stream_names_the_root_run_by_run_name_and_tags_every_event(operator, graph, dispatched):
    thread, run = _run(operator, graph, config=SENT, stream_mode="events")
    run_execute(run_id=run["run_id"])
    events = _events(operator, thread, run["run_id"])
    root = events[0]
    assert (root["event"], root["name"], root["parent_ids"]) == ("on_chain_start", "nightly-check", [])
    assert events and all({"nightly", "batch"} <= set(e["tags"]) for e in events)


def _sent_keys(kwargs: dict[str, Any]) -> dict[str, Any]:
    # What of kwargs.config the client sent: the ids and the metadata are the server's (test_platform_run_metadata).
    return {k: v for k, v in kwargs["config"].items() if k not in ("configurable", "metadata")}


def test_the_run_object_reports_the_config_it_was_sent_in_kwargs(operator, graph, dispatched):
    thread, created = _run(operator, graph, config={**SENT, "recursion_limit": 5})
    expected = {**SENT, "recursion_limit": 5}
    assert list(created["kwargs"]) == ["config"]
    assert _sent_keys(created["kwargs"]) == expected
    run_id = created["run_id"]
    assert _sent_keys(operator.client.get(f"/lg/threads/{thread}/runs/{run_id}").json()["kwargs"]) == expected
    [listed] = operator.client.get(f"/lg/threads/{thread}/runs").json()
    assert _sent_keys(listed["kwargs"]) == expected


def test_a_run_sent_no_config_reports_a_config_of_none_of_its_keys(operator, graph, dispatched):
    thread, created = _run(operator, graph)
    assert _sent_keys(created["kwargs"]) == {}
    assert _sent_keys(operator.client.get(f"/lg/threads/{thread}/runs/{created['run_id']}").json()["kwargs"]) == {}
