"""The fencing token, guard by guard: a worker whose run was taken over can change nothing.

In-process and deterministic (the pause faults in tests/faults/test_pause.py
show the same end to end with real worker processes): worker A claims a run,
its lease lapses, worker B claims it (the thread's fence moves on), and A,
still holding its stale ``Run``, tries every write it could make. Each guard is
exercised on its own, so removing any one of them fails a test here (see
docs/mutation-testing.md).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test.utils import override_settings
from langgraph.graph import END, START, StateGraph

from runtime.checkpointer import checkpointer_get, saver_blobs
from runtime.effects import perform_effect
from runtime.fencing import FENCE_KEY, LeaseLost
from runtime.models import Effect, Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.runs import (
    RunOutcome,
    _run_dead_letter,
    lease_renew,
    run_claim,
    run_fail,
    run_finish,
    run_release,
    runs_sweep,
)
from runtime.savers import GatehouseSqliteSaver
from tests.conftest import runs_settle, scaled, wait_for

pytestmark = pytest.mark.usefixtures("live_db")


_made: list[Any] = []  # the runs _run made in this test, ended at its end (_made_runs_settled)


@pytest.fixture(autouse=True)
def _made_runs_settled(live_db: None) -> Iterator[None]:
    """A run left queued, or running on a lapsed lease, is one the session's live worker's sweeper sends on:
    the worker then runs zombie_pay behind later tests' backs (audit rows, live events, global counts)."""
    _made.clear()
    yield
    runs_settle(_made)
    _made.clear()


def _run(graph: str = "zombie_pay") -> Run:
    thread = Thread.objects.create(graph=graph, status=ThreadStatus.BUSY)
    run = Run.objects.create(thread=thread, kind=RunKind.START, input={})
    _made.append(run.pk)
    return run


def _lapse(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(lease_expires_at=Now() - timedelta(seconds=1))


def _taken_over() -> tuple[Run, Run]:
    """(A's stale view of the run, B's claim of it): A claimed, its lease lapsed, B claimed."""
    run = _run()
    a = run_claim(run_id=str(run.id), worker="host:1:a")
    assert a is not None
    _lapse(a)
    b = run_claim(run_id=str(run.id), worker="host:2:b")
    assert b is not None and b.fence == a.fence + 1
    return a, b


def _row(run: Run) -> tuple[Any, ...]:
    return tuple(
        Run.objects.filter(pk=run.pk).values_list("status", "fence", "lease_owner", "lease_expires_at", "error").get()
    )


def _outcome() -> RunOutcome:
    return RunOutcome(RunStatus.SUCCEEDED, "zombie-checkpoint", {"paid_by": "zombie"})


# --- run rows -----------------------------------------------------------------------------


def test_a_claim_takes_the_lease_and_a_takeover_keeps_the_first_start():
    a, b = _taken_over()
    run = Run.objects.get(pk=b.pk)
    assert (run.status, run.attempts, run.lease_owner, run.fence) == (RunStatus.RUNNING, 2, "host:2:b", a.fence + 1)
    assert run.started_at is not None and run.started_at == a.started_at
    assert Thread.objects.get(pk=run.thread_id).fence == run.fence


@override_settings(GATEHOUSE_MAX_RUN_ATTEMPTS=2)
def test_a_claim_past_the_last_attempt_dead_letters_the_run():
    run = _run()
    Run.objects.filter(pk=run.pk).update(attempts=2)
    assert run_claim(run_id=str(run.id), worker="host:1:a") is None
    failed = Run.objects.select_related("thread").get(pk=run.pk)
    assert failed.status == RunStatus.FAILED and failed.error.startswith("gave up after 2 attempts")
    assert failed.thread.status == ThreadStatus.FAILED
    once_more = _run()
    Run.objects.filter(pk=once_more.pk).update(attempts=1)
    assert run_claim(run_id=str(once_more.id), worker="host:1:a") is not None  # the last attempt is allowed


def test_a_live_lease_is_not_claimed_again():
    run = _run()
    assert run_claim(run_id=str(run.id), worker="host:1:a") is not None
    assert run_claim(run_id=str(run.id), worker="host:2:b") is None


def test_the_zombie_cannot_renew_the_lease_it_lost():
    a, b = _taken_over()
    before = _row(b)
    with pytest.raises(LeaseLost, match=f"run {a.id} was taken over"):
        lease_renew(run=a)
    assert _row(b) == before
    lease_renew(run=b)  # the holder still can


def test_the_zombie_cannot_record_its_outcome_over_the_run_another_worker_holds():
    a, b = _taken_over()
    before = _row(b)
    with pytest.raises(LeaseLost, match=f"run {a.id} was taken over"):
        run_finish(run=a, outcome=_outcome())
    assert _row(b) == before
    thread = Thread.objects.get(pk=a.thread_id)
    assert thread.values == {} and thread.checkpoint_id == ""


def test_the_zombie_cannot_record_its_outcome_over_the_one_the_new_holder_recorded():
    a, b = _taken_over()
    run_finish(run=b, outcome=RunOutcome(RunStatus.SUCCEEDED, "b-checkpoint", {"paid_by": "b"}))
    before = _row(b)
    with pytest.raises(LeaseLost):
        run_finish(run=a, outcome=_outcome())
    assert _row(b) == before
    assert Thread.objects.get(pk=a.thread_id).values == {"paid_by": "b"}


def test_the_zombie_cannot_fail_the_run_another_worker_holds():
    a, b = _taken_over()
    before = _row(b)
    with pytest.raises(LeaseLost, match=f"run {a.id} was taken over"):
        run_fail(run=a, error="zombie says no")
    assert _row(b) == before


def test_the_zombie_cannot_hand_back_the_run_another_worker_holds():
    a, b = _taken_over()
    before = _row(b)
    assert run_release(run=a, error="transient (attempt 1): zombie") is False
    assert _row(b) == before


@override_settings(GATEHOUSE_MAX_RUN_ATTEMPTS=1)
def test_a_run_dead_lettered_while_its_worker_was_paused_stays_failed():
    # The dead letter does not bump the fence: only the status tells the zombie it lost the run.
    run = _run()
    a = run_claim(run_id=str(run.id), worker="host:1:a")
    assert a is not None
    _lapse(a)
    _run_dead_letter(run_id=a.id)
    before = _row(a)
    assert before[0] == RunStatus.FAILED
    with pytest.raises(LeaseLost):
        lease_renew(run=a)
    with pytest.raises(LeaseLost):
        run_finish(run=a, outcome=_outcome())
    with pytest.raises(LeaseLost):
        run_fail(run=a, error="zombie")
    assert run_release(run=a, error="zombie") is False
    assert _row(a) == before
    assert Thread.objects.get(pk=a.thread_id).status == ThreadStatus.FAILED


# --- what the holder of the lease does (so a guard that refuses everyone fails too) -----------


def _signals() -> Any:
    from runtime import signals

    received: list[tuple[str, dict[str, Any]]] = []

    def receiver(name: str) -> Any:
        def on(sender: Any, **kwargs: Any) -> None:
            received.append((name, kwargs))

        return on

    handlers = {name: receiver(name) for name in ("run_interrupted", "run_completed", "run_failed")}
    for name, handler in handlers.items():
        getattr(signals, name).connect(handler, sender=Run, weak=False)
    return received, handlers


@pytest.fixture
def emitted() -> Any:
    from runtime import signals

    received, handlers = _signals()
    yield received
    for name, handler in handlers.items():
        getattr(signals, name).disconnect(handler, sender=Run)


def test_the_holder_records_a_completed_outcome(emitted):
    _, b = _taken_over()
    Thread.objects.filter(pk=b.thread_id).update(error="an earlier failure")
    run_finish(run=b, outcome=RunOutcome(RunStatus.SUCCEEDED, "cp-1", {"paid_by": "b"}))
    run = Run.objects.select_related("thread").get(pk=b.pk)
    assert run.status == RunStatus.SUCCEEDED and run.finished_at is not None and run.lease_expires_at is None
    assert (run.thread.status, run.thread.values, run.thread.checkpoint_id, run.thread.error) == (
        ThreadStatus.COMPLETED,
        {"paid_by": "b"},
        "cp-1",
        "",
    )
    assert b.status == RunStatus.SUCCEEDED
    [(name, kwargs)] = [e for e in emitted if e[1]["run"].pk == b.pk]
    assert name == "run_completed" and kwargs["values"] == {"paid_by": "b"}


def test_the_holder_records_a_pause(emitted):
    from runtime.runs import PendingInterrupt

    _, b = _taken_over()
    pending = [PendingInterrupt(interrupt_id="i-1", value={"title": "t"}, node="gate", checkpoint_id="cp-2")]
    run_finish(run=b, outcome=RunOutcome(RunStatus.INTERRUPTED, "cp-2", {"n": 1}, pending))
    run = Run.objects.select_related("thread").get(pk=b.pk)
    assert run.status == RunStatus.INTERRUPTED and run.thread.status == ThreadStatus.INTERRUPTED
    [(name, kwargs)] = [e for e in emitted if e[1]["run"].pk == b.pk]
    assert name == "run_interrupted" and kwargs["interrupts"] == pending


def test_the_holder_records_a_failure(emitted):
    _, b = _taken_over()
    run_fail(run=b, error="node raised", checkpoint_id="cp-3")
    run = Run.objects.select_related("thread").get(pk=b.pk)
    assert (run.status, run.error, run.lease_expires_at) == (RunStatus.FAILED, "node raised", None)
    assert run.finished_at is not None
    assert (run.thread.status, run.thread.error, run.thread.checkpoint_id) == (
        ThreadStatus.FAILED,
        "node raised",
        "cp-3",
    )
    [(name, kwargs)] = [e for e in emitted if e[1]["run"].pk == b.pk]
    assert name == "run_failed" and kwargs["error"] == "node raised"


def test_the_holder_hands_its_run_back_for_a_later_attempt():
    _, b = _taken_over()
    assert run_release(run=b, error="transient (attempt 2): connection reset") is True
    run = Run.objects.get(pk=b.pk)
    assert run.status == RunStatus.RUNNING and run.lease_owner == ""
    assert run.error == "transient (attempt 2): connection reset"
    assert run.lease_expires_at is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT STATEMENT_TIMESTAMP()")
        assert run.lease_expires_at <= cursor.fetchone()[0]  # lapsed at once: the sweeper may resend it


# --- the database's clock -------------------------------------------------------------------


def _skew(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    from django.utils import timezone

    real = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real() + timedelta(seconds=seconds))


def test_a_claimer_whose_clock_runs_ahead_does_not_take_a_live_run(monkeypatch):
    run = _run()
    assert run_claim(run_id=str(run.id), worker="host:1:a") is not None
    _skew(monkeypatch, 30)
    assert run_claim(run_id=str(run.id), worker="host:2:b") is None


def test_a_lease_written_by_a_process_whose_clock_runs_ahead_still_lapses_on_time(monkeypatch):
    run = _run()
    _skew(monkeypatch, 600)
    a = run_claim(run_id=str(run.id), worker="host:1:a")
    assert a is not None
    lease_renew(run=a)
    a.refresh_from_db()
    with connection.cursor() as cursor:
        cursor.execute("SELECT STATEMENT_TIMESTAMP()")
        db_now = cursor.fetchone()[0]
    from django.conf import settings

    assert a.lease_expires_at is not None
    assert abs((a.lease_expires_at - db_now).total_seconds() - settings.GATEHOUSE_LEASE_SECONDS) < 5


def test_a_sweeper_whose_clock_runs_behind_still_sees_a_lapsed_lease(monkeypatch):
    from runtime import runs

    run = _run()
    a = run_claim(run_id=str(run.id), worker="host:1:a")
    assert a is not None
    Run.objects.filter(pk=a.pk).update(lease_expires_at=Now() - timedelta(seconds=120))
    sent: list[Any] = []
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: sent.append(run_id))
    _skew(monkeypatch, -600)
    runs_sweep()
    assert a.id in sent


def test_a_sweeper_whose_clock_runs_ahead_does_not_resend_a_live_run(monkeypatch):
    from runtime import runs

    run = _run()
    a = run_claim(run_id=str(run.id), worker="host:1:a")
    assert a is not None
    sent: list[Any] = []
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: sent.append(run_id))
    _skew(monkeypatch, 600)
    runs_sweep()
    assert a.id not in sent


# --- checkpoint writes ------------------------------------------------------------------------


def _graph(saver: Any) -> Any:
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1}

    builder: StateGraph[Any] = StateGraph(dict)  # type: ignore[type-var]
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _fenced_config(thread: Thread, fence: int) -> Any:
    return {"configurable": {"thread_id": str(thread.id), FENCE_KEY: fence}}


def _checkpoint_rows(thread_id: str) -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", [thread_id])
        checkpoints = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s", [thread_id])
        return int(checkpoints), int(cursor.fetchone()[0])


def test_checkpoint_writes_under_the_current_fence_are_stored_and_stamped():
    thread = Thread.objects.create(graph="zombie_pay", fence=7)
    graph = _graph(checkpointer_get())
    graph.invoke({"n": 0}, _fenced_config(thread, 7), durability="sync")
    tuples = list(checkpointer_get().list({"configurable": {"thread_id": str(thread.id)}}))
    assert tuples and {t.metadata.get(FENCE_KEY) for t in tuples} == {7}
    with connection.cursor() as cursor:  # the writes keep their task path (LangGraph orders them by it)
        cursor.execute(
            "SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s AND task_path <> ''", [str(thread.id)]
        )
        assert cursor.fetchone()[0] > 0


def test_a_stale_fence_writes_no_checkpoint(caplog):
    thread = Thread.objects.create(graph="zombie_pay", fence=7)
    graph = _graph(checkpointer_get())
    graph.invoke({"n": 0}, _fenced_config(thread, 7), durability="sync")
    before = _checkpoint_rows(str(thread.id))
    Thread.objects.filter(pk=thread.pk).update(fence=8)  # another worker claimed it
    with caplog.at_level(logging.WARNING, logger="psycopg.pool"), pytest.raises(LeaseLost) as refused:
        graph.invoke({"n": 5}, _fenced_config(thread, 7), durability="sync")
    assert f"thread {thread.id}: write under fence 7 refused, the thread's fence is now 8" in str(refused.value)
    assert _checkpoint_rows(str(thread.id)) == before
    # The refused transaction was rolled back before its connection went back to the pool.
    assert not [r for r in caplog.records if r.name == "psycopg.pool"], caplog.text


def test_a_saver_on_one_connection_keeps_working_after_a_refused_write():
    """Without a pool nobody else rolls the refused transaction back: the saver does, or the connection is dead."""
    import psycopg
    from psycopg.rows import dict_row

    from runtime.savers import GatehousePostgresSaver

    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        graph = _graph(GatehousePostgresSaver(conn, blobs=saver_blobs()))
        thread = Thread.objects.create(graph="zombie_pay", fence=7)
        with pytest.raises(LeaseLost):
            graph.invoke({"n": 0}, _fenced_config(thread, 6), durability="sync")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        graph.invoke({"n": 0}, _fenced_config(thread, 7), durability="sync")  # the holder's write goes through
    assert _checkpoint_rows(str(thread.id))[0] > 0


def test_a_stale_fence_writes_no_pending_writes():
    thread = Thread.objects.create(graph="zombie_pay", fence=7)
    saver = checkpointer_get()
    config = _fenced_config(thread, 7)
    graph = _graph(saver)
    graph.invoke({"n": 0}, config, durability="sync")
    latest = saver.get_tuple(config)
    assert latest is not None
    Thread.objects.filter(pk=thread.pk).update(fence=8)
    before = _checkpoint_rows(str(thread.id))
    with pytest.raises(LeaseLost):
        saver.put_writes(
            {**latest.config, "configurable": {**latest.config["configurable"], FENCE_KEY: 7}},
            [("n", 99)],
            "zombie-task",
        )
    assert _checkpoint_rows(str(thread.id)) == before


def test_a_fenced_write_for_a_thread_that_is_gone_is_refused_naming_no_fence():
    thread_id = uuid.uuid4()  # no such thread: deleted, or never there
    with pytest.raises(
        LeaseLost, match=f"thread {thread_id}: write under fence 1 refused, the thread's fence is now None"
    ):
        _graph(checkpointer_get()).invoke(
            {"n": 0}, {"configurable": {"thread_id": str(thread_id), FENCE_KEY: 1}}, durability="sync"
        )
    assert _checkpoint_rows(str(thread_id)) == (0, 0)


def test_a_fenced_pending_write_without_a_task_path_keeps_the_librarys_default():
    # LangGraph orders pending writes by task path; a caller that gives none stores "" (the library's default).
    thread = Thread.objects.create(graph="zombie_pay", fence=7)
    saver = checkpointer_get()
    config = _fenced_config(thread, 7)
    _graph(saver).invoke({"n": 0}, config, durability="sync")
    latest = saver.get_tuple(config)
    assert latest is not None
    saver.put_writes(
        {**latest.config, "configurable": {**latest.config["configurable"], FENCE_KEY: 7}}, [("n", 1)], "t"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT task_path FROM checkpoint_writes WHERE thread_id = %s AND task_id = 't'", [str(thread.id)]
        )
        assert [row[0] for row in cursor.fetchall()] == [""]


def test_a_claim_waits_for_a_checkpoint_write_in_flight():
    """The fence check and the write are one transaction holding the thread row: the claim's bump waits."""
    from runtime import fencing

    thread = Thread.objects.create(graph="zombie_pay", fence=3)
    saver = checkpointer_get()
    token = fencing._writing.set((str(thread.id), 3))
    outcome: dict[str, Any] = {}
    inside, done = threading.Event(), threading.Event()

    def claim() -> None:
        inside.wait(scaled(10))
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '300ms'")
                Thread.objects.filter(pk=thread.pk).update(fence=4)
            outcome["claim"] = "bumped"
        except Exception as exc:  # the lock timeout
            outcome["claim"] = type(exc.__cause__ or exc).__name__
        finally:
            connection.close()
            done.set()

    bumper = threading.Thread(target=claim)
    bumper.start()
    try:
        with saver._cursor(pipeline=True):  # type: ignore[attr-defined]
            # The check went out in the pipeline; the claim starts once the server has run it (its session
            # then waits inside the transaction, holding the row), not merely once it was sent.
            wait_for(_write_holds_the_thread, what="the write's fence check to hold the thread row")
            inside.set()
            assert done.wait(scaled(15))
    finally:
        fencing._writing.reset(token)
        bumper.join(scaled(10))
    assert outcome["claim"] == "LockNotAvailable"
    assert Thread.objects.get(pk=thread.pk).fence == 3


def _write_waiting_after(statement: str) -> bool:
    """Whether a session has run ``statement`` (and, inside a pipeline, waits for the client's next message)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND wait_event = 'ClientRead' AND query LIKE %s",
            [f"%{statement}%"],
        )
        return cursor.fetchone() is not None


def _write_holds_the_thread() -> bool:
    return _write_waiting_after("gatehouse_fence_hold")


@pytest.mark.parametrize("leave", ["at_once", "after_the_refusal"])
def test_a_write_the_database_refuses_fails_with_its_error_not_as_a_lost_connection(leave):
    """Whether the failure surfaces inside the write or as the pipeline is left, the run sees the database's
    error: a PipelineAborted over it would be taken for a lost connection and the run retried (runtime.retry)."""
    from runtime import fencing
    from runtime.retry import is_transient

    thread = Thread.objects.create(graph="zombie_pay", fence=3)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS fencing_refused (id int)")
        cursor.execute(
            "CREATE OR REPLACE FUNCTION fencing_refuse() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'injected: write refused'; END $$ LANGUAGE plpgsql"
        )
        cursor.execute("DROP TRIGGER IF EXISTS fencing_refuse ON fencing_refused")
        cursor.execute(
            "CREATE TRIGGER fencing_refuse BEFORE INSERT ON fencing_refused "
            "FOR EACH ROW EXECUTE FUNCTION fencing_refuse()"
        )
    saver = checkpointer_get()
    token = fencing._writing.set((str(thread.id), 3))
    try:
        for _ in range(10 if leave == "after_the_refusal" else 30):
            with pytest.raises(Exception) as refused, saver._cursor(pipeline=True) as cur:  # type: ignore[attr-defined]
                cur.executemany("INSERT INTO fencing_refused (id) VALUES (%s)", [(1,), (2,)])
                if leave == "after_the_refusal":  # the error is on its way back before the pipeline is left
                    wait_for(lambda: _write_waiting_after("fencing_refused"), what="the server to refuse the write")
            assert type(refused.value).__name__ == "RaiseException", repr(refused.value)
            assert "injected: write refused" in str(refused.value)
            assert not is_transient(refused.value)
    finally:
        fencing._writing.reset(token)
    with checkpointer_get()._cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT 1")  # the pool's connections were given back usable


def test_unfenced_checkpoint_writes_are_not_checked():
    # Reads, the console's state edits and the libraries' own tests carry no fence.
    graph = _graph(checkpointer_get())
    thread_id = f"unfenced-{uuid.uuid4().hex}"
    graph.invoke({"n": 0}, {"configurable": {"thread_id": thread_id}}, durability="sync")
    assert _checkpoint_rows(thread_id)[0] > 0


def _sqlite_saver(tmp_path: Path) -> tuple[GatehouseSqliteSaver, sqlite3.Connection]:
    app = sqlite3.connect(tmp_path / "app.sqlite3", isolation_level=None)
    app.execute("CREATE TABLE runtime_thread (id char(32) PRIMARY KEY, fence bigint NOT NULL)")
    saver = GatehouseSqliteSaver(
        sqlite3.connect(tmp_path / "checkpoints.sqlite3", check_same_thread=False), blobs=saver_blobs()
    )
    saver.app_db_path = str(tmp_path / "app.sqlite3")
    return saver, app


def test_sqlite_a_stale_fence_writes_no_checkpoint(tmp_path):
    saver, app = _sqlite_saver(tmp_path)
    thread_id = uuid.uuid4()
    app.execute("INSERT INTO runtime_thread VALUES (?, 7)", [thread_id.hex])
    graph = _graph(saver)
    config = {"configurable": {"thread_id": str(thread_id), FENCE_KEY: 7}}
    graph.invoke({"n": 0}, config, durability="sync")
    stored = len(list(saver.list({"configurable": {"thread_id": str(thread_id)}})))
    assert stored > 0
    app.execute("UPDATE runtime_thread SET fence = 8 WHERE id = ?", [thread_id.hex])
    with pytest.raises(LeaseLost):
        graph.invoke({"n": 5}, config, durability="sync")
    latest = saver.get_tuple({"configurable": {"thread_id": str(thread_id)}})
    assert latest is not None
    with pytest.raises(LeaseLost):
        saver.put_writes({"configurable": {**latest.config["configurable"], FENCE_KEY: 7}}, [("n", 9)], "zombie")
    assert len(list(saver.list({"configurable": {"thread_id": str(thread_id)}}))) == stored
    assert latest.pending_writes == []


def test_sqlite_fenced_writes_attach_the_app_database_once(tmp_path):
    saver, app = _sqlite_saver(tmp_path)
    thread_id = uuid.uuid4()
    app.execute("INSERT INTO runtime_thread VALUES (?, 7)", [thread_id.hex])
    graph = _graph(saver)
    config = {"configurable": {"thread_id": str(thread_id), FENCE_KEY: 7}}
    graph.invoke({"n": 0}, config, durability="sync")
    graph.invoke({"n": 1}, config, durability="sync")  # a second fenced write on the same connection
    attached = [row[1] for row in saver.conn.execute("PRAGMA database_list")]
    assert attached.count("gatehouse_app") == 1


def test_sqlite_fenced_writes_need_the_app_database(tmp_path):
    saver, app = _sqlite_saver(tmp_path)
    saver.app_db_path = None
    thread_id = uuid.uuid4()
    app.execute("INSERT INTO runtime_thread VALUES (?, 7)", [thread_id.hex])
    with pytest.raises(RuntimeError, match="need the app database"):
        _graph(saver).invoke({"n": 0}, {"configurable": {"thread_id": str(thread_id), FENCE_KEY: 7}})


def test_sqlite_a_claim_waits_for_a_checkpoint_write_in_flight(tmp_path):
    from runtime import fencing

    saver, app = _sqlite_saver(tmp_path)
    thread_id = uuid.uuid4()
    app.execute("INSERT INTO runtime_thread VALUES (?, 3)", [thread_id.hex])
    app.execute("PRAGMA busy_timeout = 200")
    token = fencing._writing.set((str(thread_id), 3))
    try:
        with saver.cursor(), pytest.raises(sqlite3.OperationalError, match="locked"):
            app.execute("UPDATE runtime_thread SET fence = 4 WHERE id = ?", [thread_id.hex])
    finally:
        fencing._writing.reset(token)
    app.execute("UPDATE runtime_thread SET fence = 4 WHERE id = ?", [thread_id.hex])  # free once it committed


# --- effects ------------------------------------------------------------------------------------


def _effect_graph(calls: list[str]) -> Any:
    def act(state: dict[str, Any]) -> dict[str, Any]:
        return {"result": perform_effect("charge", lambda key: calls.append(key) or {"charged": True})}

    builder: StateGraph[Any] = StateGraph(dict)  # type: ignore[type-var]
    builder.add_node("act", act)
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    return builder.compile()  # no checkpointer: only the effect's own fence is under test


def test_an_effect_under_the_current_fence_runs_once():
    thread = Thread.objects.create(graph="zombie_pay", fence=2)
    calls: list[str] = []
    graph = _effect_graph(calls)
    graph.invoke({}, _fenced_config(thread, 2))
    graph.invoke({}, _fenced_config(thread, 2))
    assert len(calls) == 1
    assert Effect.objects.get(thread=thread).calls == 1


def test_an_effect_under_a_stale_fence_is_refused_before_it_calls_out():
    thread = Thread.objects.create(graph="zombie_pay", fence=2)
    calls: list[str] = []
    with pytest.raises(
        LeaseLost, match=f"thread {thread.id}: write under fence 1 refused, the thread's fence is now 2"
    ):
        _effect_graph(calls).invoke({}, _fenced_config(thread, 1))
    assert calls == []
    assert not Effect.objects.filter(thread=thread).exists()


# --- store writes -----------------------------------------------------------------------------


def _store_graph(run: Run, inner: Any = None) -> Any:
    """A node that writes the long-term store, as the loan graph's ``disburse`` does, through the run's store."""
    from langgraph.store.base import BaseStore

    from runtime.run_store import RecordingStore
    from runtime.store import store_get

    def remember(state: dict[str, Any], *, store: BaseStore) -> dict[str, Any]:
        store.put(("zombies", str(run.thread_id)), "loan", {"paid_by": state["by"]})
        return {}

    builder: StateGraph[Any] = StateGraph(dict)  # type: ignore[type-var]
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    recording = RecordingStore(
        inner or store_get(), thread_id=run.thread_id, run_id=run.id, lease_owner=run.lease_owner
    )
    return builder.compile(store=recording)  # no checkpointer: only the store's own fence is under test


def _memory(run: Run) -> tuple[Any, ...]:
    """Everything a store write leaves: the item (value, last update), its operation rows, its audit rows."""
    from approvals.models import AuditAction, AuditEvent
    from runtime.models import StoreOperation
    from runtime.store import store_get

    item = store_get().get(("zombies", str(run.thread_id)), "loan")
    return (
        None if item is None else (item.value, item.updated_at),
        StoreOperation.objects.filter(thread_id=run.thread_id).count(),
        list(
            AuditEvent.objects.filter(thread_id=run.thread_id, action=AuditAction.STORE_ITEM_PUT).values_list(
                "actor_label", flat=True
            )
        ),
    )


def test_a_store_write_under_the_current_fence_is_stored_recorded_and_audited():
    _, b = _taken_over()
    _store_graph(b).invoke({"by": "b"}, _fenced_config(b.thread, b.fence))
    value, operations, audited = _memory(b)
    assert value is not None and value[0] == {"paid_by": "b"}
    assert operations == 1
    assert audited == ["worker:host:2:b"]


def test_a_store_write_under_a_stale_fence_changes_nothing_after_a_takeover():
    a, b = _taken_over()
    _store_graph(b).invoke({"by": "b"}, _fenced_config(b.thread, b.fence))
    before = _memory(b)
    with pytest.raises(
        LeaseLost,
        match=f"thread {a.thread_id}: write under fence {a.fence} refused, the thread's fence is now {b.fence}",
    ):
        _store_graph(a).invoke({"by": "zombie"}, _fenced_config(a.thread, a.fence))
    assert _memory(b) == before


def test_a_store_write_of_a_cancelled_run_changes_nothing():
    from runtime.cancel import run_cancel

    run = _run()
    claimed = run_claim(run_id=str(run.id), worker="host:1:a")
    assert claimed is not None
    before = _memory(claimed)
    with transaction.atomic():
        run_cancel(run=claimed, action="interrupt", actor_label="op", reason="stop")
    with pytest.raises(LeaseLost, match=f"write under fence {claimed.fence} refused"):
        _store_graph(claimed).invoke({"by": "zombie"}, _fenced_config(claimed.thread, claimed.fence))
    assert _memory(claimed) == before


def _claim_waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        # Polled inside the store write's transaction, which would otherwise see its first snapshot of the stats.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            ["%FOR UPDATE%"],
        )
        return cursor.fetchone() is not None


def test_a_claim_waits_for_a_store_write_in_flight_then_takes_the_run():
    """The fence is held from the check until the write's records commit: a takeover waits for it, then goes
    ahead; neither deadlocks (the records' key on the run is taken in a claim's own order: run, then thread)."""
    from langgraph.store.base import BaseStore

    from runtime.store import store_get

    a = run_claim(run_id=str(_run().id), worker="host:1:a")
    assert a is not None
    _lapse(a)
    # Kept from the live worker's sweeper (when one runs in this process's session): re-sent now, the lapsed run
    # was claimed by it and not by the takeover below. Finished at the end, so no later test waits for it.
    Run.objects.filter(pk=a.pk).update(dispatched_at=Now() + timedelta(days=1))
    outcome: dict[str, Any] = {}

    class _Slow(BaseStore):  # the real store, its write held until the takeover waits (a slow bank, a pause)
        def batch(self, ops: Any) -> Any:
            taker.start()
            wait_for(_claim_waiting_on_a_lock, what="the takeover to wait for the store write")
            return store_get().batch(ops)

        async def abatch(self, ops: Any) -> Any:
            raise NotImplementedError

    def takeover() -> None:
        try:
            outcome["claim"] = run_claim(run_id=str(a.id), worker="host:2:b")
        except Exception as exc:  # a deadlock
            outcome["claim"] = exc
        finally:
            connection.close()

    taker = threading.Thread(target=takeover)
    try:
        _store_graph(a, inner=_Slow()).invoke({"by": "a"}, _fenced_config(a.thread, a.fence))
    finally:
        taker.join(scaled(15))
        Run.objects.filter(pk=a.pk).update(status=RunStatus.SUCCEEDED, lease_expires_at=None)
    assert isinstance(outcome["claim"], Run) and outcome["claim"].fence == a.fence + 1, outcome
    value, operations, audited = _memory(a)
    assert value is not None and value[0] == {"paid_by": "a"} and operations == 1 and audited == ["worker:host:1:a"]


def test_a_store_write_naming_a_run_of_another_thread_is_refused():
    from runtime.fencing import fence_hold

    run, other = _run(), _run()
    with pytest.raises(LeaseLost, match="the thread's fence is now None"), transaction.atomic():
        fence_hold(thread_id=str(other.thread_id), fence=0, run_id=run.id)


def test_store_writes_outside_a_claimed_run_are_not_fenced():
    # The API's store endpoints and an operator's edits carry no fence; nor does a graph driven directly.
    a, _ = _taken_over()
    _store_graph(a).invoke({"by": "console"}, {"configurable": {"thread_id": str(a.thread_id)}})
    assert _memory(a)[0][0] == {"paid_by": "console"}


def test_a_store_fence_is_held_only_inside_a_transaction():
    # Outside one the hold would end with its own statement, before the write it should order.
    from runtime.fencing import fence_hold

    run = _run()
    with pytest.raises(RuntimeError, match="inside one"):
        fence_hold(thread_id=str(run.thread_id), fence=0, run_id=run.id)


# --- what the operator is told (mutation survivors: the tests above match a few words) -------------------


def test_a_store_fence_asked_outside_a_transaction_tells_the_caller_exactly_what_to_do():
    from runtime.fencing import fence_hold

    run = _run()
    with pytest.raises(RuntimeError) as refused:
        fence_hold(thread_id=str(run.thread_id), fence=0, run_id=run.id)
    assert str(refused.value) == "fence_hold holds the fence for the caller's transaction: call it inside one"


def test_sqlite_fenced_writes_without_the_app_database_name_the_setting_to_set(tmp_path):
    saver, app = _sqlite_saver(tmp_path)
    saver.app_db_path = None
    thread_id = uuid.uuid4()
    app.execute("INSERT INTO runtime_thread VALUES (?, 7)", [thread_id.hex])
    with pytest.raises(RuntimeError) as refused:
        _graph(saver).invoke({"n": 0}, {"configurable": {"thread_id": str(thread_id), FENCE_KEY: 7}})
    assert str(refused.value) == "fenced SQLite checkpoint writes need the app database (set app_db_path)"
