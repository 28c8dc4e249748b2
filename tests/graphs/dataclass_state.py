"""A graph whose state is a dataclass with a required field (``q``) and no input schema.

LangGraph builds the dataclass when a node reads the state (``D(**values)``): a start without ``q`` is
accepted, writes its checkpoints, and its first node fails with ``TypeError: D.__init__() missing 1
required positional argument: 'q'``, leaving a thread whose latest checkpoint the graph cannot load. A
``TypeError`` is not a ``ValueError`` (as a Pydantic state's refusal is), which pages caught.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


@dataclass
class D:
    q: str
    n: int = 0
    tags: list[str] = field(default_factory=list)


def dgate(state: D) -> dict[str, Any]:
    answer = interrupt({"question": f"Go ahead with {state.q}?"})
    return {"n": state.n + 1, "tags": [*state.tags, str(answer)]}


def _dc_gate() -> StateGraph[D, Any, D, Any]:
    builder = StateGraph(D)
    builder.add_node(dgate)
    builder.add_edge(START, "dgate")
    builder.add_edge("dgate", END)
    return builder


dc_gate = _dc_gate()
