"""bench/sdk_compat.py compares every mode /lg/ offers, and for ``events`` what a client tells events apart by."""

from __future__ import annotations

from bench.sdk_compat import CASES, CLIENT_MODES, _seen
from runtime.stream import CLIENT_MODES as OFFERED


def test_the_comparison_covers_every_mode_the_platform_api_offers():
    assert CLIENT_MODES == OFFERED


def test_an_events_event_is_compared_by_kind_run_name_tags_and_data_keys_not_by_values():
    event = {"event": "on_chain_stream", "name": "score_risk", "tags": ["graph:step:2"], "run_id": "a", "data": {}}
    mine = _seen("events", {**event, "data": {"chunk": {"risk": 0.6}}}, "events")
    theirs = _seen("events", {**event, "run_id": "b", "data": {"chunk": {"risk": 0.7}}}, "events")
    assert mine == theirs == ["on_chain_stream", "score_risk", ["graph:step:2"], ["chunk"]]
    assert _seen("events", {**event, "data": {"chunk": 1, "input": 2}}, "events") != mine
    assert _seen("values", {"risk": 0.6}, "values") == "values"


def test_a_subgraphs_events_are_compared_by_node_not_by_task_id():
    ours = _seen("updates|review:1f0a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8", {}, "updates")
    theirs = _seen("updates|review:0f9e8d7c-6b5a-4938-2716-05f4e3d2c1b0", {}, "updates")
    assert ours == theirs == "updates|review:<id>"
    assert _seen("updates|apply:1f0a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8", {}, "updates") != ours
    nested = {"event": "on_chain_end", "name": "gate", "tags": [], "data": {"output": 1}}
    assert _seen("events|review:1f0a2b3c-4d5e", nested, "events") == ["on_chain_end", "gate", [], ["output"]]


def test_both_servers_serve_the_same_graphs_and_the_nested_one_pauses_inside_its_subgraph():
    import json
    from pathlib import Path

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from bench.lgdev import nested

    lgdev = Path(__file__).resolve().parents[2] / "bench" / "lgdev"
    served = json.loads((lgdev / "langgraph.json").read_text())["graphs"]
    assert set(served) == set(json.loads((lgdev / "gatehouse.json").read_text())["graphs"]) == {c.graph for c in CASES}
    graph = nested.make_graph().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    paused = graph.invoke({"amount": 5}, config)
    [pending] = paused["__interrupt__"]
    assert pending.value["amount"] == 5
    assert [t.name for t in graph.get_state(config).tasks] == ["review"]  # the pause is the subgraph's
    assert graph.invoke(Command(resume={"decision": "approve"}), config)["status"] == "done"
