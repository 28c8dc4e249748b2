"""Fencing tokens for everything a run writes: checkpoints, store items, effects, run rows.

A worker claims a run by bumping ``Thread.fence`` (``runtime.runs.run_claim``)
and carries the new value in the run's config (``configurable["gatehouse_fence"]``).
A worker that was paused (SIGSTOP, a long GC, a VM migration) or cut off from
the database past its lease wakes up still holding the old value: every write
it attempts is checked against the thread's current fence *in the same
transaction as the write*, and refused with ``LeaseLost`` if it is stale.

Checkpoint writes are checked under a shared row lock on the thread
(``FOR SHARE`` on PostgreSQL, the database write lock on SQLite), which the
claim's ``UPDATE ... SET fence = fence + 1`` must wait for. So a checkpoint
write either commits before the takeover, and the new worker (which reads the
checkpoints only after its claim committed) sees it, or it runs after the
takeover and is refused. Nothing in between. A store write is held the same
way, by the transaction that records and audits it (``fence_hold``).

This module sits below ``runtime.runs`` and the checkpointer (it imports
neither), so both can use it without an import cycle.
"""

from __future__ import annotations

import contextlib
import contextvars
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from django.db import connection

from runtime import rows

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

FENCE_KEY = "gatehouse_fence"
THREAD_TABLE = "runtime_thread"


class LeaseLost(Exception):
    """Another worker holds the run now; this one must stop writing."""


def config_fence(config: RunnableConfig | None) -> tuple[str, int] | None:
    """(thread id, fence) when ``config`` belongs to a claimed run, else None (reads, tools, the console)."""
    configurable = (config or {}).get("configurable") or {}
    fence = configurable.get(FENCE_KEY)
    if fence is None:
        return None
    return str(configurable["thread_id"]), int(fence)


def stale(thread_id: str, fence: int, current: int | None) -> LeaseLost:
    return LeaseLost(f"thread {thread_id}: write under fence {fence} refused, the thread's fence is now {current}")


# A store write's fence (runtime.store), in the transaction that records and audits the write, held
# until that transaction commits, after the store write. PostgreSQL: the run row, then the thread row,
# in the order a claim or a cancel locks them: the records' deferred foreign key to the run takes the
# run's key lock at commit, which taken after the thread's would deadlock with a claim waiting for the
# thread. The key lock does not stop the holder's own heartbeat. SQLite: a no-op update takes the
# database's write lock, and its row count says whether the fence still holds.
_STORE_HOLD_POSTGRES = (
    "SELECT t.fence FROM runtime_run r JOIN runtime_thread t ON t.id = r.thread_id "
    "WHERE r.id = %s AND t.id = %s FOR KEY SHARE OF r FOR SHARE OF t"
)
_STORE_HOLD_SQLITE = f"UPDATE {THREAD_TABLE} SET fence = fence WHERE id = %s AND fence = %s"
_THREAD_FENCE = f"SELECT fence FROM {THREAD_TABLE} WHERE id = %s"


def fence_hold(*, thread_id: str, fence: int, run_id: Any) -> None:
    """Refuse a stale fence (``LeaseLost``), else keep a claim or a cancel from moving it until the caller's
    transaction ends: what the caller writes before it commits is ordered before any takeover."""
    if not connection.in_atomic_block:
        raise RuntimeError("fence_hold holds the fence for the caller's transaction: call it inside one")
    with rows.fixed_cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_STORE_HOLD_POSTGRES, [uuid.UUID(str(run_id)), uuid.UUID(thread_id)])
            row = cursor.fetchone()
            if row is not None and int(row[0]) == fence:
                return
            current = None if row is None else int(row[0])
        else:
            cursor.execute(_STORE_HOLD_SQLITE, [uuid.UUID(thread_id).hex, fence])
            if cursor.rowcount == 1:
                return
            cursor.execute(_THREAD_FENCE, [uuid.UUID(thread_id).hex])
            row = cursor.fetchone()
            current = None if row is None else int(row[0])
    raise stale(thread_id, fence, current)


# The fence of the write in progress on this thread of execution: set by the
# saver's put/put_writes (which see the config) for the cursor they open (which does not).
_writing: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("gatehouse_fenced", default=None)


@contextlib.contextmanager
def _fenced(config: RunnableConfig) -> Iterator[None]:
    token = _writing.set(config_fence(config))
    try:
        yield
    finally:
        _writing.reset(token)


class FencedSaver:
    """Mixin for the savers: checkpoint writes of a claimed run carry its fence (must come before the saver)."""

    def put(self, config: RunnableConfig, checkpoint: Any, metadata: Any, new_versions: Any) -> RunnableConfig:
        with _fenced(config):
            return super().put(config, checkpoint, metadata, new_versions)  # type: ignore[misc,no-any-return]

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        with _fenced(config):
            return super().put_writes(config, writes, task_id, task_path)  # type: ignore[misc,no-any-return]


@contextlib.contextmanager
def saver_connection(saver: Any) -> Iterator[Any]:
    """The PostgresSaver's connection for one operation.

    From a pool, a connection of its own and no lock: LangGraph's
    ``PostgresSaver._cursor`` takes the saver's one ``threading.Lock`` around
    every operation even then, which serialises all the worker's threads
    (round trips included) on it. A single shared connection (or a shared
    pipeline) still needs the lock.
    """
    from langgraph.checkpoint.postgres import _internal
    from psycopg_pool import ConnectionPool

    if isinstance(saver.conn, ConnectionPool) and saver.pipe is None:
        with saver.conn.connection() as conn:
            yield conn
        return
    with saver.lock, _internal.get_connection(saver.conn) as conn:
        yield conn


# runtime/migrations/0009: takes the thread row FOR SHARE and raises this SQLSTATE if the fence moved on
# (its detail: the thread's fence now, empty when the thread is gone).
_HOLD_SQL = "SELECT gatehouse_fence_hold(%s::uuid, %s)"
FENCE_SQLSTATE = "GHFEN"


class FencedPostgresSaver(FencedSaver):
    """PostgresSaver writes through ``_cursor(pipeline=True)``: a fenced one runs in a transaction whose
    first statement takes the thread row ``FOR SHARE`` and refuses a stale fence, in the server.

    ``BEGIN``, the check (``gatehouse_fence_hold``), the writes and ``COMMIT`` go out in one pipeline:
    one round trip. The server runs them in order, so the row lock is held before any write executes;
    if the fence moved on, the check raises, the server skips the writes and the commit, the
    transaction is rolled back and the caller gets ``LeaseLost``. Nothing of a stale write commits.
    """

    @contextlib.contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
        fenced = _writing.get() if pipeline else None
        if fenced is None:
            with super()._cursor(pipeline=pipeline) as cur:  # type: ignore[misc]
                yield cur
            return
        import psycopg
        from psycopg.rows import dict_row

        thread_id, fence = fenced
        failed: BaseException | None = None
        with saver_connection(self) as conn:
            try:
                if self.pipe is not None or not self.supports_pipeline:  # type: ignore[attr-defined]
                    # A shared connection already in pipeline mode, or a libpq without pipelines:
                    # one statement at a time, the check before the writes.
                    with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                        cur.execute(_HOLD_SQL, [thread_id, fence])
                        yield cur
                    return
                with (
                    conn.pipeline(),
                    # Not conn.transaction(): in pipeline mode it syncs after BEGIN, a round trip of its own.
                    psycopg.Transaction(conn),
                    conn.cursor(binary=True, row_factory=dict_row) as cur,
                ):
                    cur.execute(_HOLD_SQL, [thread_id, fence])
                    yield cur
                # Leaving the transaction queued COMMIT (ROLLBACK on an exception); leaving the pipeline
                # sent it with a sync and raised the first error the server reported.
            except psycopg.Error as exc:
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    conn.rollback()  # the check or a write failed: the server skipped the rest, COMMIT included
                error = _reported(exc)
                failed = _lease_lost(thread_id, fence, error) if error.sqlstate == FENCE_SQLSTATE else error
        if failed is not None:
            # Raised here, outside the handler: a PipelineAborted it replaces must not become its
            # context, where runtime.retry (which follows contexts) would take it for a lost connection.
            raise failed


def _reported(exc: Any) -> Any:
    """The error the server reported for a failed pipeline, not the ``PipelineAborted`` raised after it.

    When the failure surfaces as the pipeline is left, psycopg goes on to fetch the statements the
    server skipped and raises ``PipelineAborted`` (an ``OperationalError``) over the real error: a
    write the database refused would then look like a lost connection (``runtime.retry`` retries those).
    """
    import psycopg

    current = exc
    while isinstance(current, psycopg.errors.PipelineAborted):
        current = current.__context__ or current.__cause__
    return current if isinstance(current, psycopg.Error) else exc


def _lease_lost(thread_id: str, fence: int, error: Any) -> LeaseLost:
    detail = error.diag.message_detail or ""
    return stale(thread_id, fence, int(detail) if detail.lstrip("-").isdigit() else None)


class FencedSqliteSaver(FencedSaver):
    """SqliteSaver: checkpoints live in their own file, the fence in the app database.

    The app database is attached to the saver's connection, and a fenced write
    opens with a no-op ``UPDATE`` of the thread row guarded by the fence: it takes
    the app database's write lock (so a claim, itself a write, waits for this
    transaction) and its row count says whether the fence still holds. The lock
    is held until the checkpoint transaction commits. Atomicity across the two
    files is not needed (the app database is only read); isolation is what the
    lock gives.
    """

    conn: sqlite3.Connection
    app_db_path: str | None = None

    @contextlib.contextmanager
    def cursor(self, transaction: bool = True) -> Iterator[sqlite3.Cursor]:
        fenced = _writing.get() if transaction else None
        if fenced is None:
            with super().cursor(transaction) as cur:  # type: ignore[misc]
                yield cur
            return
        thread_id, fence = fenced
        with self.lock:  # type: ignore[attr-defined]
            self.setup()  # type: ignore[attr-defined]
            self._attach_app_db()
            cur = self.conn.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                cur.execute(
                    f"UPDATE gatehouse_app.{THREAD_TABLE} SET fence = fence WHERE id = ? AND fence = ?",
                    [uuid.UUID(thread_id).hex, fence],
                )
                if cur.rowcount != 1:
                    row = self.conn.execute(
                        f"SELECT fence FROM gatehouse_app.{THREAD_TABLE} WHERE id = ?", [uuid.UUID(thread_id).hex]
                    ).fetchone()
                    raise stale(thread_id, fence, None if row is None else int(row[0]))
                yield cur
            except BaseException:
                self.conn.rollback()
                raise
            else:
                self.conn.commit()
            finally:
                cur.close()

    def _attach_app_db(self) -> None:
        if self.app_db_path is None:
            raise RuntimeError("fenced SQLite checkpoint writes need the app database (set app_db_path)")
        attached = {row[1] for row in self.conn.execute("PRAGMA database_list")}
        if "gatehouse_app" not in attached:
            self.conn.execute("ATTACH DATABASE ? AS gatehouse_app", [self.app_db_path])
