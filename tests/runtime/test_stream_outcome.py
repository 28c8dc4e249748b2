"""A run that ran to its end takes its outcome from its stream; it must be what the checkpoints say.

``runtime.executor._stream`` keeps the last "checkpoints" event; for a run that
ended (no next task, no interrupt) the executor records that instead of reading
the thread back with ``get_state``. These tests hold the two side by side, on
both checkpointers, for shapes whose values do and do not survive a JSON trip
unchanged, and check that a pause still defers to the checkpoints.
"""

from __future__ import annotations

import operator
import sqlite3
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command

from runtime import executor
from runtime.controls import RuntimeControls
from runtime.executor import outcome_read
from runtime.models import Run, RunKind
from runtime.threads import thread_create
from tests.graphs import shapes


@pytest.fixture(params=["sqlite", "postgres"])
def saver(request: pytest.FixtureRequest) -> Iterator[BaseCheckpointSaver[Any]]:
    if request.param == "sqlite":
        yield SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
        return
    request.getfixturevalue("live_db")
    from runtime.checkpointer import checkpointer_get

    yield checkpointer_get()


class _Heartbeat:
    def check(self) -> None:
        pass


def _config() -> Any:
    return {"configurable": {"thread_id": f"stream-outcome-{uuid.uuid4().hex}", "__pregel_strict_resume": True}}


def _stream(graph: Any, graph_input: Any, config: Any, durability: str = "sync", run: Run | None = None) -> Any:
    controls = RuntimeControls(durability=durability)  # type: ignore[arg-type]
    # A run no /lg/ client streams (an unsaved row: only async/exit durability asks the database about it).
    return executor._stream(graph, graph_input, config, _Heartbeat(), controls, run or Run(stream=None))  # type: ignore[arg-type]


@pytest.fixture
def run(live_db: None) -> Run:
    """A run row: under async/exit durability the stream asks the database whether it was cancelled."""
    thread = thread_create(graph="parallel_review", metadata={}, created_by=None)
    return Run.objects.create(thread=thread, kind=RunKind.START, input={})


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    pair: tuple[int, int]
    tags: Annotated[list[str], operator.add]


def _chat() -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", lambda s: {"messages": [AIMessage("hello")], "pair": (1, 2), "tags": ["a"]})
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_finished_run_reports_what_the_checkpoints_hold(saver, durability, run):
    graph = shapes.parallel_review.compile(checkpointer=saver)
    config = _config()
    paused = _stream(graph, {"subject": "x"}, config, durability, run)
    assert paused.completed(graph) is None  # a pause is read from the checkpoints
    answers = {i.id: {"decision": "approve"} for i in graph.get_state(config, subgraphs=True).interrupts}
    done = _stream(graph, Command(resume=answers), config, durability, run).completed(graph)
    assert done == outcome_read(graph.get_state(config, subgraphs=True))
    assert done is not None and done.values["done"] is True


def test_a_finished_subgraph_run_reports_what_the_checkpoints_hold(saver):
    graph = shapes.nested_review.compile(checkpointer=saver)
    config = _config()
    assert _stream(graph, {"subject": "x"}, config).completed(graph) is None
    [pending] = graph.get_state(config, subgraphs=True).interrupts
    done = _stream(graph, Command(resume={pending.id: {"decision": "approve"}}), config).completed(graph)
    assert done == outcome_read(graph.get_state(config, subgraphs=True))


def test_values_that_are_not_plain_json_come_back_as_stored(saver):
    graph = _chat().compile(checkpointer=saver)
    config = _config()
    done = _stream(graph, {"messages": [HumanMessage("hi")]}, config).completed(graph)
    assert done == outcome_read(graph.get_state(config, subgraphs=True))
    assert done is not None and [m["content"] for m in done.values["messages"]] == ["hi", "hello"]


def test_a_static_breakpoint_is_read_from_the_checkpoints(saver):
    graph = shapes._breakpoint().builder.compile(checkpointer=saver, interrupt_before=["commit"])
    config = _config()
    assert _stream(graph, {"subject": "x", "amount": 1}, config).completed(graph) is None
    [item] = outcome_read(graph.get_state(config, subgraphs=True)).interrupts
    assert item.kind == "breakpoint"


def test_the_pause_key_is_langgraphs():
    from langgraph._internal._constants import INTERRUPT

    assert executor.INTERRUPT_KEY == INTERRUPT
