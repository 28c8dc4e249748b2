"""Schema v2: ``customer`` renamed to ``client_name`` (required), with an upcaster from v1."""

from typing import Any, Required, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    client_name: Required[str]
    note: str
    priority: int  # additive: nodes read it with a default
    result: str


def prepare(state: State) -> State:
    return {"note": "prepared under v2"}


def gate(state: State) -> State:
    answer = interrupt({"question": f"approve {state['client_name']}?"})
    return {"result": f"v2:{state['client_name']}:{state.get('priority', 0)}:{answer}"}


def _rename_customer(values: dict[str, Any]) -> dict[str, Any]:
    values["client_name"] = values.pop("customer")
    return values


gatehouse_upcasters = {1: _rename_customer}

builder = StateGraph(State)
builder.add_node("prepare", prepare)
builder.add_node("gate", gate)
builder.add_edge(START, "prepare")
builder.add_edge("prepare", "gate")
builder.add_edge("gate", END)
graph = builder
