"""The embedded broker: kombu's SQLAlchemy transport on one SQLite file, safe for several processes.

kombu's filesystem transport crashed workers (``JSONDecodeError`` in ``_get``,
celery/kombu#1551): a reader can rename a message file away before its writer
has written it. A SQLite table has no such window: a message is inserted and
taken inside transactions. What kombu's SQLAlchemy transport leaves to us:

- WAL, so the web process and the workers read while one of them writes, and
  a busy timeout, so writers queue for the lock instead of failing;
- ``BEGIN IMMEDIATE`` for the take, so two consumers never take the same row;
- deleting a taken message: kombu only marks it invisible, so the table would
  grow forever (an unacknowledged message is put back by the channel on close,
  and a run lost with a killed worker is re-dispatched by the sweeper);
- one Core statement per message instead of kombu's ORM unit of work;
- ``polling_interval`` is a transport option kombu also hands to
  ``create_engine``, which rejects it;
- a warm shutdown noticed while waiting: Celery's loop for a polling transport
  waits up to 2 s for a message before it looks at its stop flag;
- a queue declared by two processes at once (two workers starting): kombu guards
  the declaration within a process only, and the loser's insert broke the
  name's unique constraint and crashed its worker.

Selected in ``console/settings.py`` (``CELERY_BROKER_TRANSPORT``) when no
``REDIS_URL`` is set; the choice is measured in ``bench/embedded_broker.py``
and explained in ``docs/embedded.md``.
"""

from __future__ import annotations

import sqlite3
from queue import Empty
from time import monotonic
from typing import Any

from kombu.transport.sqlalchemy import Channel as SqlaChannel
from kombu.transport.sqlalchemy import Transport as SqlaTransport
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads
from sqlalchemy import create_engine, delete, event, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from runtime.sqlite_wal import wal_enable

# kombu's retry/table options, and ours: none of them is a create_engine() argument.
_NOT_ENGINE_OPTIONS = (
    "queue_tablename",
    "message_tablename",
    "callback",
    "errback",
    "max_retries",
    "interval_start",
    "interval_step",
    "interval_max",
    "retry_errors",
    "polling_interval",
    "busy_timeout",
)


def _sqlite_pragmas(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    wal_enable(cursor)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def engine_create(url: str, *, busy_timeout: float = 30.0, **options: Any) -> Engine:
    """An engine for the broker file: WAL on every connection, writers wait up to ``busy_timeout`` s."""
    engine = create_engine(url, connect_args={"timeout": busy_timeout, "check_same_thread": False}, **options)
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


class Channel(SqlaChannel):
    def _engine_from_config(self) -> Engine:
        conninfo = self.connection.client
        options = {k: v for k, v in conninfo.transport_options.items() if k not in _NOT_ENGINE_OPTIONS}
        busy_timeout = float(conninfo.transport_options.get("busy_timeout", 30.0))
        return engine_create(conninfo.hostname, busy_timeout=busy_timeout, **options)

    def _open(self) -> Any:
        # Several processes start at once: two may both see no table and both
        # CREATE it; the loser's "already exists" is harmless, so try again.
        try:
            return super()._open()
        except OperationalError as exc:
            if "already exists" not in str(exc):
                raise
            self._engines.pop(self.connection.client.hostname, None)
            return super()._open()

    def _get_or_create(self, queue: str) -> Any:
        try:
            return super()._get_or_create(queue)
        except IntegrityError:  # another process created it since our lookup: use theirs
            self.session.rollback()
            return self.session.query(self.queue_cls).filter(self.queue_cls.name == queue).one()

    # kombu's ORM path (a queue lookup and a unit of work per message) cost about 16 ms of CPU per
    # publish; with the queue's id cached, one Core statement per message does the same work.
    def _queue_id(self, queue: str) -> int:
        ids: dict[str, int] = self.__dict__.setdefault("_queue_ids", {})
        if queue not in ids:
            ids[queue] = int(self._get_or_create(queue).id)
        return ids[queue]

    # kombu's two base classes name the argument differently (message, payload): mypy cannot satisfy both.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        table = self.message_cls.__table__
        engine, _ = self._open()
        with engine.begin() as conn:
            conn.execute(table.insert().values(queue_id=self._queue_id(queue), payload=dumps(payload)))

    def _get(self, queue: str, timeout: Any = None) -> Any:
        table = self.message_cls.__table__
        waiting = (
            select(table.c.id, table.c.payload)
            .where(table.c.queue_id == self._queue_id(queue), table.c.visible.is_(True))
            .order_by(table.c.id)
            .limit(1)
        )
        engine, _ = self._open()
        with engine.connect() as conn:
            # An idle poll only reads (WAL readers never wait), so idle consumers
            # do not queue for the write lock that publishers need.
            if conn.execute(waiting).first() is None:
                conn.rollback()
                raise Empty()
            conn.rollback()
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock first: one taker per message
            try:
                row = conn.execute(waiting).first()
                if row is None:
                    raise Empty()  # another consumer took it
                conn.execute(delete(table).where(table.c.id == row.id))
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
        return loads(bytes_to_str(row.payload))


# How often a consumer waiting for messages looks whether its worker is shutting down.
SHUTDOWN_CHECK_SECONDS = 0.1


def _worker_stopping() -> bool:
    from celery.worker import state  # a consumer's concern only: the web process never drains

    # As celery.worker.state.maybe_shutdown reads them: a flag holds an exit code, and 0 (EX_OK) is set.
    return any(flag is not None and flag is not False for flag in (state.should_stop, state.should_terminate))


class Transport(SqlaTransport):
    Channel = Channel

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:  # type: ignore[override]
        """kombu's wait for a message, in slices that end early once the worker is shutting down.

        Celery's loop calls this with a 2 s timeout and only then sees a Ctrl-C or SIGTERM: the
        shutdown waited out the rest of the 2 s, and with it the launcher's stop.
        """
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            left = SHUTDOWN_CHECK_SECONDS if deadline is None else max(0.0, deadline - monotonic())
            try:
                super().drain_events(connection, timeout=min(left, SHUTDOWN_CHECK_SECONDS))
                return
            except TimeoutError:
                if _worker_stopping() or (deadline is not None and monotonic() >= deadline):
                    raise
