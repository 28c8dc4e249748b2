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
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from langchain_core.messages import BaseMessage, BaseMessageChunk, message_chunk_to_message
from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel
from langgraph.types import Interrupt, Send

from runtime.jsonable import to_jsonable
from runtime.models import Run
from runtime.sqlite_wal import BUSY_SECONDS, wal_enable
from runtime.stream_events import events_config

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
                self._client().xread({self.key(run_id): after}, count=500, block=block),
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
                "SELECT seq, event, data FROM chunk WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT 500",
                (run_id, int(after)),
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


# --- the worker's side: chunks → named JSON events -----------------------------------------------


def chunk_jsonable(value: Any) -> Any:
    """A chunk as JSON values, with LangGraph's objects in the Platform API's shapes."""
    if isinstance(value, Interrupt):
        # ``response_schema`` is null when the interrupt declared none, as LangGraph Server sends it.
        return {
            "value": chunk_jsonable(value.value),
            "id": value.id,
            "response_schema": to_jsonable(getattr(value, "response_schema", None)),
        }
    if isinstance(value, Send):
        return {"node": value.node, "arg": chunk_jsonable(value.arg)}
    if isinstance(value, Mapping):
        return {str(k): chunk_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [chunk_jsonable(v) for v in value]
    return to_jsonable(value)


def _checkpoint_ref(config: Any) -> dict[str, Any] | None:
    configurable = (config or {}).get("configurable") if isinstance(config, Mapping) else None
    if not configurable:
        return None
    ref = {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": configurable.get("checkpoint_id"),
    }
    if configurable.get("checkpoint_map"):
        ref["checkpoint_map"] = configurable["checkpoint_map"]
    return ref


def _debug_checkpoint(payload: Any) -> Any:
    # As LangGraph Server sends a ``debug`` checkpoint: the configs also as checkpoint references, and a
    # subgraph task by its checkpoint. (Its ``checkpoints`` chunks are LangGraph's own: the configs alone,
    # and a subgraph task's ``state`` the config naming the subgraph's checkpoints.)
    if not isinstance(payload, dict) or "config" not in payload:
        return payload
    out = dict(payload)
    out["checkpoint"] = _checkpoint_ref(payload.get("config"))
    out["parent_checkpoint"] = _checkpoint_ref(payload.get("parent_config"))
    tasks = []
    for task in payload.get("tasks") or []:
        task = dict(task)
        state = task.get("state")
        if isinstance(state, Mapping) and state.get("configurable"):
            task["checkpoint"] = state["configurable"]
            del task["state"]
        tasks.append(task)
    out["tasks"] = tasks
    return out


class Publisher:
    """Names and publishes one run attempt's chunks; thread-safe (callbacks may run on the graph's executor)."""

    def __init__(self, run_id: str, modes: set[str], subgraphs: bool, sink: RunLog) -> None:
        self.run_id = run_id
        self.modes = modes
        self.subgraphs = subgraphs
        self.sink: RunLog | None = sink
        self._messages: dict[str, BaseMessage] = {}
        self._lock = threading.Lock()

    def chunk(self, namespace: tuple[str, ...], mode: str, chunk: Any) -> None:
        if namespace and not self.subgraphs:
            return
        suffix = "|" + "|".join(namespace) if namespace else ""
        events: list[tuple[str, Any]] = []
        if mode == "messages":
            message, metadata = chunk
            if "messages-tuple" in self.modes:
                events.append(("messages" + suffix, [message, metadata]))
            if "messages" in self.modes:
                events.extend(self._accumulated(message, metadata))
        elif mode == "debug":
            if "debug" in self.modes:
                payload = chunk.get("payload") if isinstance(chunk, dict) else None
                if isinstance(chunk, dict) and chunk.get("type") == "checkpoint":
                    chunk = {**chunk, "payload": _debug_checkpoint(payload)}
                events.append(("debug" + suffix, chunk))
        elif mode in self.modes or mode == ALWAYS_PUBLISHED:
            events.append((mode + suffix, chunk))
        self.publish(events)

    def _accumulated(self, message: BaseMessage, metadata: Any) -> list[tuple[str, Any]]:
        # "messages" as LangGraph Server streams it: the message so far, re-sent whole on every token.
        events: list[tuple[str, Any]] = []
        key = str(message.id)
        seen = self._messages.get(key)
        if seen is None:
            events.append(("messages/metadata", {key: {"metadata": metadata}}))
            self._messages[key] = message
        elif isinstance(seen, BaseMessageChunk) and isinstance(message, BaseMessageChunk):
            self._messages[key] = seen + message
        else:
            self._messages[key] = message
        name = "messages/partial" if isinstance(message, BaseMessageChunk) else "messages/complete"
        events.append((name, [message_chunk_to_message(self._messages[key])]))
        return events

    def publish(self, events: Sequence[tuple[str, Any]]) -> None:
        if not events or self.sink is None:
            return
        try:
            encoded = [(name, json.dumps(chunk_jsonable(data), separators=(",", ":"))) for name, data in events]
            with self._lock:
                self.sink.append(self.run_id, encoded)
        except Exception:  # a stream is a view of the run: it must never fail it
            log.warning(
                "run %s: its stream could not be published; readers get the final values", self.run_id, exc_info=True
            )
            self.sink = None


# --- the hook in the executor's stream loop ----------------------------------------------------------


def stream_tap(
    run: Run, graph: Pregel[Any, Any, Any, Any], graph_input: Any, config: RunnableConfig, **kwargs: Any
) -> Iterator[Any]:
    """``graph.stream(graph_input, config, **kwargs)``, unchanged for the executor.

    When a client streams this run (``run.stream``), LangGraph is asked for the
    client's modes as well, every chunk is published to the run's log, and the
    executor still gets only the chunks, in the shape, it asked for.
    """
    options = run.stream or {}
    if not options.get("modes"):
        return graph.stream(graph_input, config, **kwargs)
    return _tapped(run, options, graph, graph_input, config, kwargs)


def _tapped(
    run: Run,
    options: dict[str, Any],
    graph: Pregel[Any, Any, Any, Any],
    graph_input: Any,
    config: RunnableConfig,
    kwargs: dict[str, Any],
) -> Iterator[Any]:
    asked = kwargs.pop("stream_mode", None) or graph.stream_mode
    asked_modes = [asked] if isinstance(asked, str) else list(asked)
    asked_subgraphs = bool(kwargs.pop("subgraphs", False))
    client = set(options["modes"])
    publisher = Publisher(str(run.id), client, bool(options.get("subgraphs")), run_log())
    modes: Any = sorted({*asked_modes, ALWAYS_PUBLISHED, *(_NATIVE[m] for m in client if m in _NATIVE)})
    if "events" in client:
        config = events_config(config, publisher)
    subgraphs = publisher.subgraphs or asked_subgraphs
    for item in graph.stream(graph_input, config, stream_mode=modes, subgraphs=subgraphs, **kwargs):
        namespace, mode, chunk = item if subgraphs else ((), *item)
        namespace = tuple(namespace)
        publisher.chunk(namespace, mode, chunk)
        if mode not in asked_modes or (namespace and not asked_subgraphs):
            continue
        if asked_subgraphs:
            yield (namespace, chunk) if isinstance(asked, str) else (namespace, mode, chunk)
        else:
            yield chunk if isinstance(asked, str) else (mode, chunk)
