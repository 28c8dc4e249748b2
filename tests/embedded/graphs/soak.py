"""Tiny graphs for the embedded soak and launcher tests: one finishes at once, one waits for a review."""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph

from runtime.gatekeeper import request_review


class State(TypedDict, total=False):
    n: int
    outcome: str


def tick(state: State) -> dict[str, object]:
    return {"n": state.get("n", 0) + 1, "outcome": "done"}


def review(state: State) -> dict[str, object]:
    decided = request_review(title=f"Soak #{state.get('n', 0)}", decisions=("approve", "reject", "edit"))
    return {"outcome": "approved" if decided.approved else "rejected"}


def _tick() -> StateGraph[State]:
    builder = StateGraph(State)
    builder.add_node(tick)
    builder.add_edge(START, "tick")
    builder.add_edge("tick", END)
    return builder


def _review() -> StateGraph[State]:
    builder = StateGraph(State)
    builder.add_node(review)
    builder.add_edge(START, "review")
    builder.add_edge("review", END)
    return builder


tick_graph = _tick().compile()
review_graph = _review().compile()
