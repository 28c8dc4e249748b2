"""Runtime behaviour that must hold on both checkpointers: SQLite (embedded) and PostgreSQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde import _msgpack
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.errors import UnknownInterruptError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from runtime.executor import outcome_read, resume_guard
from runtime.models import RunStatus
from tests.graphs import shapes


@pytest.fixture(params=["sqlite", "postgres"])
def saver(request: pytest.FixtureRequest) -> Iterator[BaseCheckpointSaver[Any]]:
    if request.param == "sqlite":
        yield SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
        return
    request.getfixturevalue("live_db")
    from runtime.checkpointer import checkpointer_get

    yield checkpointer_get()


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "__pregel_strict_resume": True}}


def _thread_id(request: pytest.FixtureRequest) -> str:
    import uuid

    return f"{request.node.name}-{uuid.uuid4().hex}"


def test_parallel_interrupts_share_one_checkpoint(saver, request):
    graph = shapes.parallel_review.compile(checkpointer=saver)
    config = _config(_thread_id(request))
    graph.invoke({"subject": "x"}, config, durability="sync")
    outcome = outcome_read(graph.get_state(config, subgraphs=True))
    assert outcome.status == RunStatus.INTERRUPTED
    assert sorted(i.node for i in outcome.interrupts) == ["legal", "risk"]
    assert {i.checkpoint_id for i in outcome.interrupts} == {outcome.checkpoint_id}


def test_a_subgraph_interrupt_carries_its_namespace_and_the_root_checkpoint(saver, request):
    graph = shapes.nested_review.compile(checkpointer=saver)
    config = _config(_thread_id(request))
    graph.invoke({"subject": "x"}, config, durability="sync")
    outcome = outcome_read(graph.get_state(config, subgraphs=True))
    [item] = outcome.interrupts
    assert item.node == "inner_gate"
    assert item.checkpoint_ns.startswith("child:")
    assert (
        item.checkpoint_id == outcome.checkpoint_id == graph.get_state(config).config["configurable"]["checkpoint_id"]
    )


def test_a_static_breakpoint_is_reported_without_an_interrupt_object(saver, request):
    graph = shapes._breakpoint().builder.compile(checkpointer=saver, interrupt_before=["commit"])
    config = _config(_thread_id(request))
    graph.invoke({"subject": "x", "amount": 1}, config, durability="sync")
    outcome = outcome_read(graph.get_state(config, subgraphs=True))
    [item] = outcome.interrupts
    assert item.kind == "breakpoint" and item.node == "commit"
    assert item.interrupt_id == f"breakpoint:{outcome.checkpoint_id}"


def test_a_finished_thread_is_reported_with_its_values(saver, request):
    graph = shapes.parallel_review.compile(checkpointer=saver)
    config = _config(_thread_id(request))
    graph.invoke({"subject": "x"}, config, durability="sync")
    ids = [i.id for i in graph.get_state(config).interrupts]
    graph.invoke(Command(resume={i: {"decision": "approve"} for i in ids}), config, durability="sync")
    outcome = outcome_read(graph.get_state(config, subgraphs=True))
    assert outcome.status == RunStatus.SUCCEEDED
    assert outcome.values["done"] is True


@pytest.mark.parametrize("graph_name", ["parallel_review", "nested_review"])
def test_the_resume_guard_refuses_an_unknown_or_answered_interrupt(saver, request, graph_name):
    graph = getattr(shapes, graph_name).compile(checkpointer=saver)
    config = _config(_thread_id(request))
    graph.invoke({"subject": "x"}, config, durability="sync")
    with pytest.raises(UnknownInterruptError, match="not-an-interrupt"):
        resume_guard(graph, config, Command(resume={"not-an-interrupt": 1}))
    answers = {i.id: {"decision": "approve"} for i in graph.get_state(config, subgraphs=True).interrupts}
    resume_guard(graph, config, Command(resume=answers))  # all pending: allowed
    graph.invoke(Command(resume=answers), config, durability="sync")
    with pytest.raises(UnknownInterruptError):
        resume_guard(graph, config, Command(resume=answers))


def test_langgraph_strict_resume_alone_misses_a_wrong_id_for_a_subgraph_interrupt(saver, request):
    # Why resume_guard exists: if this starts failing, LangGraph closed the gap.
    graph = shapes.nested_review.compile(checkpointer=saver)
    config = _config(_thread_id(request))
    graph.invoke({"subject": "x"}, config, durability="sync")
    result = graph.invoke(Command(resume={"not-an-interrupt": {"decision": "x"}}), config, durability="sync")
    assert result["answers"] == ["inner_gate:None"]


@dataclass
class Unregistered:
    secret: str


def test_checkpoint_deserialisation_refuses_unregistered_types(saver):
    # settings set LANGGRAPH_STRICT_MSGPACK before LangGraph loads.
    assert _msgpack.STRICT_MSGPACK_ENABLED is True
    typed = saver.serde.dumps_typed(Unregistered("x"))
    loaded = saver.serde.loads_typed(typed)
    assert not isinstance(loaded, Unregistered)


@dataclass
class Ticket:
    amount: int


def test_a_compiled_graph_allows_its_own_schema_types(saver, request):
    from typing import TypedDict

    class State(TypedDict, total=False):
        ticket: Ticket

    builder = StateGraph(State)
    builder.add_node("make", lambda s: {"ticket": Ticket(5)})
    builder.add_edge(START, "make")
    builder.add_edge("make", END)
    graph = builder.compile(checkpointer=saver)
    config = _config(_thread_id(request))
    graph.invoke({}, config, durability="sync")
    assert graph.get_state(config).values["ticket"] == Ticket(5)
