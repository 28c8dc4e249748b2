"""A run's stream: the chunks a ``/lg/`` client asked for, published by the worker as LangGraph yields them.

Runs execute on Celery workers; a client streams them through a web process.
So the worker writes each chunk to a per-run log, and the web process reads
that log from its start (a late subscriber misses nothing) and then follows it:

- with ``REDIS_URL`` (production, the test suite): a Redis stream per run
  (``XADD`` with an approximate ``MAXLEN``, a TTL; readers ``XREAD`` from an id,
  blocking for the next entries);
- embedded mode (SQLite, no Redis): a table in ``var/run_streams.sqlite3``
  (WAL), polled by readers every ``EMBEDDED_POLL_SECONDS``.

Only runs whose row asks for it (``Run.stream``, set in the transaction that
enqueued them) publish anything: every other run streams exactly as before.
The worker publishes raw chunks, named as LangGraph Server names its SSE events
(``updates``, ``messages/partial``, ``debug|<subgraph ns>``, ...); masking them
for a reader is the adapter's job (``lgplatform.stream``), because it
depends on who reads. ``updates`` is always published for a streamed run: the
reader's side learns from it which values to mask in free text.

Publishing never fails a run: a log that cannot be written is logged and
abandoned, and the reader falls back to the run's final values.

The worker's side (chunks → events, the hook in the executor's loop) is ``runtime.stream_tap``: the web
process reads the log without loading LangGraph.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings

from runtime.models import Run
from runtime.sqlite_wal import BUSY_SECONDS, wal_enable

log = logging.getLogger(__name__)

# The stream modes a client may ask for, as langgraph_sdk names them.
CLIENT_MODES = ("values", "updates", "messages", "messages-tuple", "events", "debug", "custom", "tasks", "checkpoints")
# The LangGraph stream mode behind each client mode ("events" come from callbacks: runtime.stream_events).
_NATIVE = {
    "values": "values",
    "updates": "updates",
    "messages": "messages",
    "messages-tuple": "messages",
    "debug": "debug",
    "custom": "custom",
    "tasks": "tasks",
    "checkpoints": "checkpoints",
}
ALWAYS_PUBLISHED = "updates"
# SSE event names that are not the mode's own name.
_EVENT_MODES = {
    "messages/partial": "messages",
    "messages/complete": "messages",
    "messages/metadata": "messages",
    "messages": "messages-tuple",
}
TTL_SECONDS = 3600  # a run's log outlives the run by this long: a client may join it late
PAGE = 500  # entries one read returns at most
MAX_EVENTS = 10_000  # per run; beyond it the oldest entries go (Redis: approximately)
EMBEDDED_POLL_SECONDS = 0.05
_REDIS_ID = re.compile(r"\d{1,20}-\d{1,20}")
_SQLITE_ID = re.compile(r"\d{1,20}")


def event_mode(event: str) -> str:
    """The client stream mode an SSE event name belongs to (``messages/partial|ns`` → ``messages``)."""
    base = event.split("|", 1)[0]
    return _EVENT_MODES.get(base, base)


def run_stream_request(*, run_id: Any, modes: Sequence[str], subgraphs: bool) -> None:
    """Ask the worker to publish ``modes`` of this run; call in the transaction that enqueues it."""
    unknown = sorted(set(modes) - set(CLIENT_MODES))
    if unknown:
        raise ValueError(f"unknown stream modes: {', '.join(unknown)}")
    Run.objects.filter(pk=run_id).update(stream={"modes": sorted(set(modes)), "subgraphs": bool(subgraphs)})


# --- the log: Redis streams, or a SQLite table in embedded mode -----------------------------------


READ_SLACK_SECONDS = 5.0  # past a read's own wait, how long the log may take to answer before it is unreadable


class RunLogUnreadable(Exception):
    """The log did not answer a read (its store is down, or hung past the read's wait and the slack)."""


@dataclass(frozen=True)
class Entry:
    id: str  # the SSE event id: a reader resumes after it (Last-Event-ID)
    event: str
    data: str  # JSON


class RunLog(Protocol):
    def append(self, run_id: str, events: Sequence[tuple[str, str]]) -> None: ...

    def valid_id(self, entry_id: str) -> bool: ...

    async def read(self, run_id: str, after: str, *, wait: float) -> list[Entry]:
        """Entries after ``after`` ("0": from the start); waits up to ``wait`` seconds for the first one.
        Raises ``RunLogUnreadable`` if the log has not answered ``READ_SLACK_SECONDS`` after that."""
        ...


class RedisRunLog:
    def __init__(self, url: str) -> None:
        self.url = url
        self._sync: Any = None
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    @staticmethod
    def key(run_id: str) -> str:
        return f"gatehouse:run-stream:{run_id}"

    def append(self, run_id: str, events: Sequence[tuple[str, str]]) -> None:
        import redis

        with self._lock:
            if self._sync is None:
                self._sync = redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=5)
        key = self.key(run_id)
        pipe = self._sync.pipeline(transaction=False)
        for event, data in events:
            pipe.xadd(key, {"e": event, "d": data}, maxlen=MAX_EVENTS, approximate=True)
        pipe.expire(key, TTL_SECONDS)
        pipe.execute()

    def valid_id(self, entry_id: str) -> bool:
        return entry_id == "0" or bool(_REDIS_ID.fullmatch(entry_id))

    def _client(self) -> Any:
        import redis.asyncio

        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            # No socket timeout: redis-py 8 reads with a 5 s one by default, blocking commands included, and
            # an XREAD BLOCK 5000 failed whenever Redis's empty answer came after the client's clock ran
            # out. One stream in a few hundred died mid-response under load, and its client waited out its
            # own 120 s timeout (the crowd benchmark's stall). Each read bounds itself instead (``read``).
            client = redis.asyncio.Redis.from_url(self.url, socket_connect_timeout=5, socket_timeout=None)
            self._async[loop] = client
        return client

    async def read(self, run_id: str, after: str, *, wait: float) -> list[Entry]:
        import redis

        block = int(wait * 1000) if wait > 0 else None
        try:
            found = await asyncio.wait_for(
                self._client().xread({self.key(run_id): after}, count=PAGE, block=block),
                timeout=max(0.0, wait) + READ_SLACK_SECONDS,
            )
        except (TimeoutError, redis.RedisError) as exc:
            raise RunLogUnreadable(f"the run's stream log did not answer: {type(exc).__name__}: {exc}") from exc
        return [
            Entry(entry_id.decode(), fields[b"e"].decode(), fields[b"d"].decode())
            for _key, entries in found or []
            for entry_id, fields in entries
        ]


class SqliteRunLog:
    """Embedded mode: one SQLite file shared by the web process and the workers."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        self._appends = 0

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
            wal_enable(conn)  # the web process and a worker open a fresh var dir's log together
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS chunk (seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, "
                "event TEXT NOT NULL, data TEXT NOT NULL, at REAL NOT NULL)"
            )
            conn.execute("CREATE INDEX IF NOT EXISTS chunk_run ON chunk (run_id, seq)")
            self._local.conn = conn
        return conn

    def append(self, run_id: str, events: Sequence[tuple[str, str]]) -> None:
        conn = self._connection()
        now = time.time()
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO chunk (run_id, event, data, at) VALUES (?, ?, ?, ?)",
                [(run_id, event, data, now) for event, data in events],
            )
        self._appends += 1
        if self._appends % 200 == 1:  # now and then: expired logs go, and each log keeps its newest MAX_EVENTS
            with conn:
                conn.execute("DELETE FROM chunk WHERE at < ?", (now - TTL_SECONDS,))
                conn.execute(
                    "DELETE FROM chunk WHERE run_id = ? AND seq <= "
                    "(SELECT seq FROM chunk WHERE run_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                    (run_id, run_id, MAX_EVENTS),
                )

    def valid_id(self, entry_id: str) -> bool:
        return bool(_SQLITE_ID.fullmatch(entry_id))

    def _read_now(self, run_id: str, after: str) -> list[Entry]:
        rows = (
            self._connection()
            .execute(
                "SELECT seq, event, data FROM chunk WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (run_id, int(after), PAGE),
            )
            .fetchall()
        )
        return [Entry(str(seq), event, data) for seq, event, data in rows]

    async def read(self, run_id: str, after: str, *, wait: float) -> list[Entry]:
        deadline = time.monotonic() + wait
        while True:
            try:
                entries = await asyncio.to_thread(self._read_now, run_id, after)
            except sqlite3.Error as exc:  # locked past its busy timeout, or the file gone
                raise RunLogUnreadable(f"the run's stream log could not be read: {exc}") from exc
            if entries or time.monotonic() >= deadline:
                return entries
            await asyncio.sleep(min(EMBEDDED_POLL_SECONDS, max(0.0, deadline - time.monotonic())))


_logs: dict[str, RunLog] = {}
_logs_lock = threading.Lock()


def run_log() -> RunLog:
    """This deployment's run log (see the module doc)."""
    key = settings.REDIS_URL or str(settings.VAR_DIR)
    with _logs_lock:
        found = _logs.get(key)
        if found is None:
            if settings.REDIS_URL:
                found = RedisRunLog(settings.REDIS_URL)
            else:
                found = SqliteRunLog(str(settings.VAR_DIR / "run_streams.sqlite3"))
            _logs[key] = found
        return found
