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
from tests.conftest import scaled, wait_for
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


# --- the PostgreSQL saver's pool ----------------------------------------------------------------


def _backend_gone(pid: int) -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0] == 0


class _Executes:
    """Records the connection of every statement psycopg sends (the pool's empty-query check included).

    Per connection: the pool's own threads (a connection added in the background and configured) and
    any other thread of the process send statements meanwhile, on other connections."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import psycopg

        self.on: list[int] = []
        original = psycopg.Cursor.execute

        def counted(cursor: Any, *args: Any, **kwargs: Any) -> Any:
            self.on.append(id(cursor.connection))
            return original(cursor, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", counted)

    def sent_on(self, conn: Any) -> int:
        return self.on.count(id(conn))


@pytest.mark.usefixtures("live_db")
def test_a_pooled_connection_killed_while_idle_is_replaced_on_checkout():
    from django.db import connection

    from runtime.checkpointer import checkpointer_get, checkpointer_pool

    checkpointer_get()
    pool = checkpointer_pool()
    with pool.connection() as conn:  # just used: not old enough for the round-trip check
        pid = conn.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    wait_for(lambda: _backend_gone(pid), timeout=10, what="the backend to exit")
    for _ in range(pool.max_size + 1):  # whichever connection comes out, it works
        with pool.connection(timeout=scaled(10)) as conn:
            assert conn.execute("SELECT pg_backend_pid()").fetchone()["pg_backend_pid"] != pid


@pytest.mark.usefixtures("live_db")
def test_a_pooled_connection_just_returned_is_handed_out_without_a_round_trip(monkeypatch):
    from runtime import checkpointer, pool_checks

    checkpointer.checkpointer_get()
    pool = checkpointer.checkpointer_pool()
    used = set()
    for _ in range(2 * pool.max_size):  # each connection of the pool used and returned once (checked then)
        with pool.connection() as conn:
            conn.execute("SELECT 1")
            used.add(id(conn))
    executes = _Executes(monkeypatch)
    again = 0
    for _ in range(pool.max_size):
        with pool.connection() as conn:
            pass
        # The pool may have added a connection meanwhile (replacing one an earlier test killed): never
        # handed out, that one is rightly checked. Every connection handed out before goes out unchecked.
        if id(conn) in used:
            again += 1
            assert executes.sent_on(conn) == 0
    assert again > 0
    monkeypatch.setattr(pool_checks, "POOL_CHECK_IDLE_SECONDS", 0.0)  # handed out too long ago: checked
    start = len(executes.on)
    with pool.connection() as conn:
        checked = executes.on[start:].count(id(conn))
    # One round trip, the check; a connection the pool has just opened may also have been configured.
    assert checked == 1 if id(conn) in used else checked >= 1


@pytest.mark.usefixtures("live_db")
def test_checkpoint_operations_on_the_pool_do_not_wait_for_each_other():
    import threading

    from runtime.checkpointer import checkpointer_get

    saver = checkpointer_get()
    read: dict[str, Any] = {}
    done = threading.Event()

    def other_thread() -> None:
        read["tuple"] = saver.get_tuple({"configurable": {"thread_id": "no-such-thread", "checkpoint_ns": ""}})
        done.set()

    with saver._cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT 1")
        reader = threading.Thread(target=other_thread)
        reader.start()
        assert done.wait(scaled(10)), "a checkpoint read waited for another thread's operation"
    reader.join(scaled(10))
    assert read == {"tuple": None}


@pytest.mark.usefixtures("live_db")
def test_listing_checkpoints_holds_no_pooled_connection_while_it_yields(request):
    from runtime.checkpointer import checkpointer_get, checkpointer_pool

    saver = checkpointer_get()
    graph = shapes.parallel_review.compile(checkpointer=saver)
    config = _config(_thread_id(request))
    graph.invoke({"answers": []}, config)
    pool = checkpointer_pool()
    listed = saver.list(config)
    next(listed)

    def every_connection_back() -> bool:
        # pool_size also counts a connection the pool is still opening in the background (it grows on
        # demand): wait for that to settle; a connection held by the generator would never come back.
        stats = pool.get_stats()
        return bool(stats["pool_size"] == stats["pool_available"])

    wait_for(every_connection_back, timeout=10, what="every pooled connection back while list() is paused")
    assert list(listed)
