"""Schema v2 without an upcaster: ``client_name`` is required but v1 checkpoints only have ``customer``."""

from typing import Required, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    client_name: Required[str]
    note: str
    result: str


def prepare(state: State) -> State:
    return {"note": "v2"}


def gate(state: State) -> State:
    answer = interrupt({"question": "approve?"})
    return {"result": f"{state['client_name']}:{answer}"}


gatehouse_schema_version = 2

builder = StateGraph(State)
builder.add_node("prepare", prepare)
builder.add_node("gate", gate)
builder.add_edge(START, "prepare")
builder.add_edge("prepare", "gate")
builder.add_edge("gate", END)
graph = builder
