"""A payment behind a gate, with an in-process provider, for the time-travel tests (runtime.branches).

``CALLS`` records every idempotency key the provider was called with.
``crash`` in the state makes ``pay`` fail after the provider answered, once
per key (a worker dying after the call, before the checkpoint), so a retry
must get the recorded result back.
"""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from runtime.effects import perform_effect

CALLS: list[str] = []
CRASHED: set[str] = set()


class TravelState(TypedDict, total=False):
    amount: int
    secret: str
    decision: str
    crash: bool
    payment: dict[str, Any]


def prepare(state: TravelState) -> dict[str, Any]:
    return {"amount": int(state.get("amount", 0))}


def gate(state: TravelState) -> dict[str, Any]:
    answer = interrupt({"title": f"Pay {state.get('amount')}", "amount": state.get("amount")})
    return {"decision": str((answer or {}).get("decision", ""))}


def _provider(key: str, amount: int) -> dict[str, Any]:
    CALLS.append(key)
    return {"paid": amount, "key": key}


def pay(state: TravelState) -> dict[str, Any]:
    amount = int(state.get("amount", 0))
    payment = perform_effect("pay", lambda key: _provider(key, amount), args={"amount": amount})
    if state.get("crash") and payment["key"] not in CRASHED:
        CRASHED.add(payment["key"])
        raise RuntimeError("worker lost after the provider answered")
    return {"payment": payment}


def _travel_pay() -> StateGraph[TravelState]:
    builder = StateGraph(TravelState)
    builder.add_node(prepare)
    builder.add_node(gate)
    builder.add_node(pay)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "gate")
    builder.add_edge("gate", "pay")
    builder.add_edge("pay", END)
    return builder


travel_pay = _travel_pay()


def inner_gate(state: TravelState) -> dict[str, Any]:
    # The payload carries no state: what a reviewer sees of the secret is the (redacted) state.
    answer = interrupt({"title": "inner check", "amount": state.get("amount")})
    return {"decision": str((answer or {}).get("decision", ""))}


def _running(node: str, subgraph: Any) -> StateGraph[TravelState]:
    """A graph that runs ``subgraph`` (compiled) as its one node ``node``."""
    builder = StateGraph(TravelState)
    builder.add_node(node, subgraph)
    builder.add_edge(START, node)
    builder.add_edge(node, END)
    return builder


def _travel_nested() -> StateGraph[TravelState]:
    inner = StateGraph(TravelState)
    inner.add_node(inner_gate)
    inner.add_edge(START, "inner_gate")
    return _running("child", inner.compile())


travel_nested = _travel_nested()


def _travel_deep() -> StateGraph[TravelState]:
    """Three subgraphs down: the root runs ``outer``, which runs travel_nested, whose ``child`` pauses."""
    return _running("outer", _running("child", _travel_nested().compile()).compile())


travel_deep = _travel_deep()
