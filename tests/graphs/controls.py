"""Graphs for runtime controls (gatehouse.runtime in langgraph.json): one never stops, one is slow."""

from __future__ import annotations

import time
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class Counter(TypedDict, total=False):
    steps: int


def _step(state: Counter) -> Counter:
    return {"steps": state.get("steps", 0) + 1}


def _slow_step(state: Counter) -> Counter:
    time.sleep(0.2)  # the graph's own work: each super-step takes a while
    return {"steps": state.get("steps", 0) + 1}


def _loop(node: str, step: object, stop_after: int) -> StateGraph[Counter]:
    builder: StateGraph[Counter] = StateGraph(Counter)
    builder.add_node(node, step)  # type: ignore[call-overload]
    builder.add_edge(START, node)
    builder.add_conditional_edges(node, lambda s: END if s.get("steps", 0) >= stop_after else node)
    return builder


never_stops = _loop("again", _step, stop_after=10**9)
slow_steps = _loop("slowly", _slow_step, stop_after=200)
