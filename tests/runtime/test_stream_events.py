"""``stream_mode="events"`` from the sync API (runtime.stream_events) in the shape ``astream_events`` v2 gives
LangGraph Server: each node's output streamed just before its end, end events carrying their input, and
the graph's own run ending without it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from runtime.stream_events import events_config


class _State(TypedDict, total=False):
    n: int
    route: str
    answer: str


class _Collected:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def publish(self, events: Sequence[tuple[str, Any]]) -> None:
        self.events.extend(data for name, data in events if name == "events")


def _graph() -> Any:
    def count(state: _State) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1}

    def route(state: _State) -> str:  # a conditional edge: a step inside the node's run, not a node
        return "ask"

    def ask(state: _State) -> dict[str, Any]:
        return {"answer": str(interrupt({"question": "ok?"}))}

    builder = StateGraph(_State)
    builder.add_node(count)
    builder.add_node(ask)
    builder.add_edge(START, "count")
    builder.add_conditional_edges("count", route, ["ask"])
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=InMemorySaver(), name="counter")


def _events(graph_input: Any, thread: str, graph: Any) -> list[dict[str, Any]]:
    collected = _Collected()
    config = events_config({"configurable": {"thread_id": thread}}, collected)
    for _ in graph.stream(graph_input, config, stream_mode="updates"):
        pass
    return collected.events


def _kinds(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["event"], e["name"]) for e in events]


def test_a_node_streams_its_output_just_before_it_ends_and_inner_steps_and_the_graph_do_not():
    events = _events({"n": 0}, "a", _graph())
    assert _kinds(events) == [
        ("on_chain_start", "counter"),
        ("on_chain_start", "count"),
        ("on_chain_start", "route"),
        ("on_chain_end", "route"),
        ("on_chain_stream", "count"),
        ("on_chain_end", "count"),
        ("on_chain_start", "ask"),  # it interrupts: no output, so neither stream nor end
        ("on_chain_end", "counter"),
    ]
    stream, end = events[4], events[5]
    assert stream["data"] == {"chunk": {"n": 1}} and end["data"]["output"] == {"n": 1}
    assert stream["run_id"] == end["run_id"] and stream["tags"] == end["tags"] == ["graph:step:1"]
    assert stream["parent_ids"] == end["parent_ids"] == [events[0]["run_id"]]


def test_end_events_carry_their_input_except_the_graphs_own():
    events = _events({"n": 0}, "b", _graph())
    ends = {e["name"]: e["data"] for e in events if e["event"] == "on_chain_end"}
    assert ends["count"] == {"input": {"n": 0}, "output": {"n": 1}}
    assert ends["route"]["input"] == {"n": 1} and ends["route"]["output"] == "ask"
    assert events[0]["data"] == {"input": {"n": 0}}
    assert set(ends["counter"]) == {"output"}, "the graph's input is in its start event only, as v2 sends it"


@pytest.mark.parametrize("with_stream", [True, False])
def test_the_events_do_not_change_what_the_graph_does(with_stream):
    graph = _graph()
    config: Any = {"configurable": {"thread_id": f"c{with_stream}"}}
    if with_stream:
        config = events_config(config, _Collected())
    chunks = list(graph.stream({"n": 0}, config, stream_mode="updates"))
    assert [list(c) for c in chunks] == [["count"], ["__interrupt__"]]
