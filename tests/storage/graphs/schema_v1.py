"""Schema v1 of a paused-thread graph: the customer's name is in ``customer``."""

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    customer: str
    note: str
    result: str


def prepare(state: State) -> State:
    return {"note": "prepared under v1"}


def gate(state: State) -> State:
    answer = interrupt({"question": f"approve {state['customer']}?"})
    return {"result": f"v1:{state['customer']}:{answer}"}


builder = StateGraph(State)
builder.add_node("prepare", prepare)
builder.add_node("gate", gate)
builder.add_edge(START, "prepare")
builder.add_edge("prepare", "gate")
builder.add_edge("gate", END)
graph = builder
