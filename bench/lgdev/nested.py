"""A graph with a subgraph that pauses, for the stream-parity scenarios (bench/sdk_compat.py).

The same module is served by ``langgraph dev`` (bench/lgdev/langgraph.json) and
by the bench's Gatehouse (bench/lgdev/gatehouse.json), so ``stream_subgraphs``
can be compared: the parent prepares, the ``review`` subgraph checks and asks
at its ``gate`` (an ``interrupt``), then applies; the parent finishes.
"""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class Case(TypedDict, total=False):
    amount: int
    checked: bool
    decision: str
    status: str


def prepare(state: Case) -> dict[str, Any]:
    return {"status": "prepared"}


def check(state: Case) -> dict[str, Any]:
    return {"checked": True}


def gate(state: Case) -> dict[str, Any]:
    answer = interrupt({"title": "Review the case", "amount": state.get("amount")})
    return {"decision": str((answer or {}).get("decision", ""))}


def apply(state: Case) -> dict[str, Any]:
    return {"status": f"applied: {state.get('decision')}"}


def finish(state: Case) -> dict[str, Any]:
    return {"status": "done"}


def _review() -> Any:
    inner = StateGraph(Case)
    inner.add_node(check)
    inner.add_node(gate)
    inner.add_node(apply)
    inner.add_edge(START, "check")
    inner.add_edge("check", "gate")
    inner.add_edge("gate", "apply")
    inner.add_edge("apply", END)
    return inner.compile()


def make_graph() -> StateGraph[Case]:
    builder = StateGraph(Case)
    builder.add_node(prepare)
    builder.add_node("review", _review())
    builder.add_node(finish)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "review")
    builder.add_edge("review", "finish")
    builder.add_edge("finish", END)
    return builder


graph = make_graph().compile()  # for langgraph dev, which supplies its checkpointer
