"""Large checkpoint values, stored once by content and referenced from checkpoints.

LangGraph's PostgresSaver keeps every ``str`` channel value inline in every
checkpoint row, so a 200 KB document in state is copied at each super-step;
other values go to ``checkpoint_blobs`` once per channel *version*, per
thread. ``BlobSpillingSaver`` (mixed into our savers in
``runtime.checkpointer``) moves any value whose serialised form is over
``GATEHOUSE_BLOB_THRESHOLD_BYTES`` out of the checkpoint: its bytes go to a
``BlobStore`` under their SHA-256, and the checkpoint keeps a small marker
dict. Loading swaps the marker back for the value, so graph nodes never see
it; listings can ask for a placeholder instead (``blobs_lazy()``).

Bytes live in the ``runtime_blob`` table by default, or in any Django storage
(S3 through django-storages) with ``GATEHOUSE_BLOB_STORAGE``; the table is
then only the index the garbage collector reads. ``runtime_blobref`` records
which thread references which blob; ``runtime.retention`` prunes those
references and collects blobs nobody references.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import Storage
from django.db import transaction
from django.utils import timezone

from runtime.models import Blob, BlobRef

if TYPE_CHECKING:  # types only: reading a thread's state must not load LangGraph before it is asked to
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple

MARKER = "__gatehouse_blob__"
# A plain dict/list whose large strings were replaced by markers.
ENVELOPE = "__gatehouse_blobs_inside__"

_lazy: contextvars.ContextVar[bool] = contextvars.ContextVar("gatehouse_blobs_lazy", default=False)


@contextlib.contextmanager
def blobs_lazy() -> Iterator[None]:
    """Within this block, loaded checkpoints show ``{"$blob": sha, "size": n}`` instead of large values."""
    token = _lazy.set(True)
    try:
        yield
    finally:
        _lazy.reset(token)


def is_marker(value: Any) -> bool:
    return type(value) is dict and MARKER in value


def is_envelope(value: Any) -> bool:
    return type(value) is dict and ENVELOPE in value


def _needs_resolving(value: Any) -> bool:
    return type(value) is dict and (MARKER in value or ENVELOPE in value)


def placeholder(marker: dict[str, Any]) -> dict[str, Any]:
    return {"$blob": marker[MARKER], "size": marker["n"]}


class BlobMissing(LookupError):
    def __init__(self, sha: str) -> None:
        super().__init__(f"blob {sha} is referenced by a checkpoint but is not stored")
        self.sha = sha


# --- where the bytes live --------------------------------------------------------------
#
# The hot path (a checkpoint write or load) runs in LangGraph's worker threads,
# where a Django ORM connection would be opened per thread and never returned:
# it goes through its own connection instead (the checkpointer's pool on
# PostgreSQL, one shared connection on SQLite). Retention, which runs in a
# management command or a Celery task, uses the ORM.


class Sql(Protocol):
    def run(self, sql: str, params: Sequence[Any]) -> tuple[list[tuple[Any, ...]], int]:
        """Execute one autocommitted statement (``%s`` placeholders); returns (rows, rowcount)."""
        ...


class PostgresSql:
    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def run(self, sql: str, params: Sequence[Any]) -> tuple[list[tuple[Any, ...]], int]:
        from psycopg.rows import tuple_row

        with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(sql, params, prepare=False)
            return (cur.fetchall() if cur.description else []), cur.rowcount


def sqlite_caller_transaction() -> Any:
    """Django's SQLite connection when this thread holds its transaction, else None.

    Embedded mode's transactions take SQLite's write lock at ``BEGIN`` (``transaction_mode``: IMMEDIATE), so
    a blob written on another connection by a thread inside one (an ``update_state`` or a fork of a large
    value, under the thread's lock) waited on its own transaction for the busy timeout, then failed: 30 s
    and a 500. Such a write joins the transaction instead; it commits or rolls back with it.
    """
    from django.db import connections

    conn = connections["default"]  # this thread's; made, not connected, on a thread that has none
    return conn if conn.vendor == "sqlite" and conn.in_atomic_block else None


class SqliteSql:
    def __init__(self, path: str) -> None:
        import sqlite3

        self.conn = sqlite3.connect(path, check_same_thread=False, timeout=30, isolation_level=None)
        self.lock = threading.Lock()

    def run(self, sql: str, params: Sequence[Any]) -> tuple[list[tuple[Any, ...]], int]:
        # Django's SQLite backend stores datetimes as naive UTC text.
        params = [
            timezone.make_naive(p, UTC).isoformat(" ") if hasattr(p, "tzinfo") and p.tzinfo else p for p in params
        ]
        joined = sqlite_caller_transaction()
        if joined is not None:
            with joined.cursor() as cur:
                cur.execute(sql, params)
                return (cur.fetchall() if cur.description else []), cur.rowcount
        with self.lock:
            cur = self.conn.execute(sql.replace("%s", "?"), params)
            return cur.fetchall(), cur.rowcount


class BlobStore(Protocol):
    def put(self, sha: str, data: bytes, *, thread_id: str) -> None: ...
    def get(self, sha: str) -> bytes: ...
    def delete(self, shas: Sequence[str]) -> None: ...


class DatabaseBlobStore:
    """Bytes in ``runtime_blob.data``, in Django's default database."""

    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    def put(self, sha: str, data: bytes, *, thread_id: str) -> None:
        _index_put(self.sql, sha, data, thread_id=thread_id, keep_data=True)

    def get(self, sha: str) -> bytes:
        rows, _ = self.sql.run("SELECT data FROM runtime_blob WHERE sha256 = %s", [sha])
        if not rows or rows[0][0] is None:
            raise BlobMissing(sha)
        return bytes(rows[0][0])

    def delete(self, shas: Sequence[str]) -> None:
        Blob.objects.filter(sha256__in=list(shas)).delete()


class StorageBlobStore:
    """Bytes in a Django storage (S3 via django-storages, or a FileSystemStorage); the table is the index."""

    def __init__(self, storage: Storage, sql: Sql, prefix: str = "blobs") -> None:
        self.storage = storage
        self.sql = sql
        self.prefix = prefix.strip("/")

    def name(self, sha: str) -> str:
        return f"{self.prefix}/{sha[:2]}/{sha}"

    def put(self, sha: str, data: bytes, *, thread_id: str) -> None:
        # Upload before the index row exists: a row always means the bytes are there.
        rows, _ = self.sql.run("SELECT 1 FROM runtime_blob WHERE sha256 = %s", [sha])
        if not rows and not self.storage.exists(self.name(sha)):
            self.storage.save(self.name(sha), ContentFile(data))
        _index_put(self.sql, sha, data, thread_id=thread_id, keep_data=False)

    def get(self, sha: str) -> bytes:
        try:
            with self.storage.open(self.name(sha), "rb") as fh:
                return fh.read()  # type: ignore[no-any-return]
        except FileNotFoundError:
            raise BlobMissing(sha) from None

    def delete(self, shas: Sequence[str]) -> None:
        for sha in shas:
            self.storage.delete(self.name(sha))
        Blob.objects.filter(sha256__in=list(shas)).delete()


# PostgreSQL: the three statements below in one (one round trip, one commit). The insert sees the update's
# result, not its row: a blob found is touched and not inserted again.
_INDEX_PUT_POSTGRESQL = (
    "WITH touched AS (UPDATE runtime_blob SET touched_at = %s WHERE sha256 = %s RETURNING 1), "
    "stored AS (INSERT INTO runtime_blob (sha256, size, created_at, touched_at, data) "
    "SELECT %s, %s, %s, %s, %s WHERE NOT EXISTS (SELECT 1 FROM touched) ON CONFLICT (sha256) DO NOTHING) "
    "INSERT INTO runtime_blobref (thread_id, sha256) VALUES (%s, %s) ON CONFLICT (thread_id, sha256) DO NOTHING"
)


def _index_put(sql: Sql, sha: str, data: bytes, *, thread_id: str, keep_data: bool) -> None:
    now = timezone.now()
    if isinstance(sql, PostgresSql):
        kept = data if keep_data else None
        sql.run(_INDEX_PUT_POSTGRESQL, [now, sha, sha, len(data), now, now, kept, thread_id, sha])
        return
    _, touched = sql.run("UPDATE runtime_blob SET touched_at = %s WHERE sha256 = %s", [now, sha])
    if not touched:
        sql.run(
            "INSERT INTO runtime_blob (sha256, size, created_at, touched_at, data) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (sha256) DO NOTHING",
            [sha, len(data), now, now, data if keep_data else None],
        )
    sql.run(
        "INSERT INTO runtime_blobref (thread_id, sha256) VALUES (%s, %s) ON CONFLICT (thread_id, sha256) DO NOTHING",
        [thread_id, sha],
    )


def blob_store_build(sql: Sql) -> BlobStore:
    """The store ``GATEHOUSE_BLOB_STORAGE`` selects: ``db`` (default), ``s3``, or ``storage:<STORAGES alias>``."""
    kind = settings.GATEHOUSE_BLOB_STORAGE
    if kind == "db":
        return DatabaseBlobStore(sql)
    from django.core.files.storage import storages

    alias = "gatehouse_blobs" if kind == "s3" else kind.removeprefix("storage:")
    return StorageBlobStore(storages[alias], sql)


# --- the saver mixin ------------------------------------------------------------------------


class _Lru:
    """A small thread-safe LRU map bounded by total weight (bytes) and entry count."""

    def __init__(self, max_weight: int, max_items: int = 10_000) -> None:
        self.max_weight, self.max_items = max_weight, max_items
        self.weight = 0
        self._items: OrderedDict[Any, tuple[Any, int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, max_age: float | None = None) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            if max_age is not None and time.monotonic() - item[2] > max_age:
                self._drop(key)
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Any, value: Any, weight: int = 1) -> None:
        if weight > self.max_weight:
            return
        with self._lock:
            if key in self._items:
                self._drop(key)
            self._items[key] = (value, weight, time.monotonic())
            self.weight += weight
            while self._items and (self.weight > self.max_weight or len(self._items) > self.max_items):
                self._drop(next(iter(self._items)))

    def _drop(self, key: Any) -> None:
        _, weight, _ = self._items.pop(key)
        self.weight -= weight

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.weight = 0


_PRIMITIVES = (int, float, bool, type(None))


class BlobSpillingSaver:
    """Mixin for a ``BaseCheckpointSaver``: large values out of checkpoints and writes, into a ``BlobStore``.

    Must come before the saver class in the bases. Subclasses set
    ``blob_store`` and ``blob_threshold`` in ``__init__`` (see
    ``runtime.checkpointer``).
    """

    blob_store: BlobStore
    blob_threshold: int
    serde: Any

    def _blobs_init(self, store: BlobStore, threshold: int) -> None:
        self.blob_store, self.blob_threshold = store, threshold
        # (thread, ns, channel, version) → marker: a channel version is immutable,
        # so an unchanged large value is neither re-serialised nor re-hashed at
        # each step. Entries expire well inside the collector's grace period.
        self._spilled = _Lru(max_weight=50_000, max_items=50_000)
        # (thread, sha) this process stored (blob row touched, the thread's reference made), for as long:
        # one step writes the same document several times (the start input's write, then the first
        # checkpoint's input channel and its own channel), and each put sent its bytes again to touch a row
        # it had just written, about 1 ms for 200 KB each (bench/storage.py).
        self._stored = _Lru(max_weight=50_000, max_items=50_000)
        # (thread, sha) being stored now: LangGraph writes a step's pending writes and its checkpoint on two
        # threads at once, both with the document. The second waits for the first's put (and its error).
        self._storing: dict[tuple[str, str], Future[None]] = {}
        self._storing_lock = threading.Lock()
        # id(str) → (the str, its serialised form and sha): a step's write and checkpoint hold the same
        # document object; serialising and hashing it again cost ~0.1 ms per 200 KB. Small (the entries
        # keep their strings alive): the documents of the runs under way.
        self._leaves = _Lru(max_weight=32 * 1024 * 1024, max_items=16)
        # sha → value bytes, immutable by construction.
        self._loaded = _Lru(max_weight=settings.GATEHOUSE_BLOB_CACHE_BYTES)

    # writing ----------------------------------------------------------------

    def _spill(self, thread_id: str, value: Any) -> dict[str, Any] | None:
        """The marker (or envelope) to store instead of ``value``, or None to store it as it is."""
        if isinstance(value, _PRIMITIVES) or type(value).__name__ == "_DeltaSnapshot" or is_marker(value):
            return None
        if isinstance(value, (str, bytes)):
            return self._spill_leaf(thread_id, value)
        envelope: dict[str, Any] | None = None
        if type(value) in (dict, list):
            # Large strings inside plain containers (the start input {"document": ...},
            # a list of pages) get their own blobs, so the same document in several
            # channels and writes is stored once.
            walked = self._spill_nested(thread_id, value, 3)
            if walked is not value:
                envelope = {ENVELOPE: 1, "v": walked}
        target = envelope if envelope is not None else value
        type_, data = self.serde.dumps_typed(target)
        if len(data) <= self.blob_threshold:
            return envelope
        return self._store(thread_id, type_, data)

    def _spill_leaf(self, thread_id: str, value: str | bytes) -> dict[str, Any] | None:
        if len(value) <= self.blob_threshold // 4:
            return None  # cheaper than serialising: even 4-byte characters stay under the threshold
        seen = self._leaves.get(id(value))
        if seen is not None and seen[0] is value:  # the very object (held here, so its id is not reused)
            type_, data, sha = seen[1]
        else:
            type_, data = self.serde.dumps_typed(value)
            if len(data) <= self.blob_threshold:
                return None
            sha = hashlib.sha256(data).hexdigest()
            self._leaves.put(id(value), (value, (type_, data, sha)), len(data))
        return self._store(thread_id, type_, data, sha)

    def _spill_nested(self, thread_id: str, value: Any, depth: int) -> Any:
        if isinstance(value, (str, bytes)):
            return self._spill_leaf(thread_id, value) or value
        if depth <= 0 or type(value) not in (dict, list):
            return value
        if type(value) is dict:
            items = {k: self._spill_nested(thread_id, v, depth - 1) for k, v in value.items()}
            return items if any(items[k] is not value[k] for k in value) else value
        listed = [self._spill_nested(thread_id, v, depth - 1) for v in value]
        return listed if any(a is not b for a, b in zip(listed, value, strict=True)) else value

    def _store(self, thread_id: str, type_: str, data: bytes, sha: str | None = None) -> dict[str, Any]:
        sha = sha or hashlib.sha256(data).hexdigest()
        self._store_once(thread_id, sha, data)
        self._loaded.put(sha, (type_, data), len(data))
        return {MARKER: sha, "t": type_, "n": len(data)}

    def _store_once(self, thread_id: str, sha: str, data: bytes) -> None:
        """Store the blob and the thread's reference to it, unless this process did within the cache's age.
        Returns once they are stored (by this call or by one already under way), or raises why not: a
        checkpoint naming the blob must never be written before the blob is."""
        key = (thread_id, sha)
        if self._stored.get(key, settings.GATEHOUSE_BLOB_GRACE_SECONDS / 2) is not None:
            return
        with self._storing_lock:
            under_way = self._storing.get(key)
            if under_way is None:
                mine = self._storing[key] = Future()
        if under_way is not None:
            under_way.result()
            return
        try:
            self.blob_store.put(sha, data, thread_id=thread_id)
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        else:
            if isinstance(getattr(self.blob_store, "sql", None), SqliteSql) and sqlite_caller_transaction():
                # Stored in the caller's transaction (SqliteSql): remembered once it commits, not before.
                transaction.on_commit(lambda: self._stored.put(key, True))
            else:
                self._stored.put(key, True)
            mine.set_result(None)
        finally:
            with self._storing_lock:
                del self._storing[key]

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        versions = checkpoint["channel_versions"]
        values = dict(checkpoint["channel_values"])
        forced: dict[str, Any] = {}
        max_age = settings.GATEHOUSE_BLOB_GRACE_SECONDS / 2
        for channel, value in checkpoint["channel_values"].items():
            key = (thread_id, ns, channel, versions.get(channel))
            marker = self._spilled.get(key, max_age) if key[3] is not None else None
            if marker is None:
                marker = self._spill(thread_id, value)
                if marker is None:
                    continue
                if key[3] is not None:
                    self._spilled.put(key, marker)
            values[channel] = marker
            if channel in versions:
                # A str used to be stored inline; now it must have a blob row for
                # its version even when the channel did not change this step
                # (the row is a tiny marker; an existing row is left alone).
                forced[channel] = versions[channel]
        if forced:
            new_versions = {**new_versions, **forced}
        return super().put(config, {**checkpoint, "channel_values": values}, metadata, new_versions)  # type: ignore[misc,no-any-return]

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        thread_id = str(config["configurable"]["thread_id"])
        spilled = [(channel, self._spill(thread_id, value) or value) for channel, value in writes]
        return super().put_writes(config, spilled, task_id, task_path)  # type: ignore[misc,no-any-return]

    # reading ----------------------------------------------------------------

    def blob_value(self, marker: dict[str, Any]) -> Any:
        return self._resolve(self._blob_raw(marker))

    def _blob_raw(self, marker: dict[str, Any]) -> Any:
        sha = marker[MARKER]
        cached = self._loaded.get(sha)
        if cached is None:
            cached = (marker["t"], self.blob_store.get(sha))
            self._loaded.put(sha, cached, len(cached[1]))
        return self.serde.loads_typed(cached)

    def _resolve(self, value: Any) -> Any:
        if is_marker(value):
            return placeholder(value) if _lazy.get() else self.blob_value(value)
        if is_envelope(value):
            return self._unwalk(value["v"])
        return value

    def _unwalk(self, value: Any) -> Any:
        if is_marker(value):
            return self._resolve(value)
        if type(value) is dict:
            return {k: self._unwalk(v) for k, v in value.items()}
        if type(value) is list:
            return [self._unwalk(v) for v in value]
        return value

    def _resolve_tuple(self, tup: CheckpointTuple | None) -> CheckpointTuple | None:
        if tup is None:
            return None
        values = tup.checkpoint["channel_values"]
        writes = tup.pending_writes or []
        if not any(_needs_resolving(v) for v in values.values()) and not any(_needs_resolving(w[2]) for w in writes):
            return tup
        checkpoint: Checkpoint = {**tup.checkpoint, "channel_values": {k: self._resolve(v) for k, v in values.items()}}
        pending = [(task, channel, self._resolve(value)) for task, channel, value in writes]
        return tup._replace(checkpoint=checkpoint, pending_writes=pending)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._resolve_tuple(super().get_tuple(config))  # type: ignore[misc]

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        for tup in super().list(config, **kwargs):  # type: ignore[misc]
            resolved = self._resolve_tuple(tup)
            assert resolved is not None  # noqa: S101 - a listed tuple always resolves; narrows the type
            yield resolved

    def blob_markers(self, thread_id: str) -> set[str]:
        """The shas the thread's stored checkpoints and pending writes reference (for the collector)."""
        found: set[str] = set()

        def scan(value: Any, depth: int = 0) -> None:
            if is_marker(value):
                if value[MARKER] not in found:
                    found.add(value[MARKER])
                    if value["t"] != "str" and depth < 3:
                        scan(self._blob_raw(value), depth + 1)  # a container blob may hold more markers
            elif is_envelope(value):
                scan(value["v"], depth)
            elif type(value) is dict:
                for v in value.values():
                    scan(v, depth)
            elif type(value) is list:
                for v in value:
                    scan(v, depth)

        for tup in super().list({"configurable": {"thread_id": thread_id}}):  # type: ignore[misc]
            for value in tup.checkpoint["channel_values"].values():
                if _needs_resolving(value):
                    scan(value)
            for _task, _channel, value in tup.pending_writes or []:
                if _needs_resolving(value):
                    scan(value)
        return found

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)  # type: ignore[misc]
        BlobRef.objects.filter(thread_id=str(thread_id)).delete()
        # A thread made again under this id must store its references again (rare: forget everything).
        self._spilled.clear()
        self._stored.clear()


def blobs_collect(store: BlobStore, *, dry_run: bool = False, grace: timedelta | None = None) -> list[str]:
    """Delete blobs no thread references and nobody touched within the grace period; returns their shas."""
    grace = grace if grace is not None else timedelta(seconds=settings.GATEHOUSE_BLOB_GRACE_SECONDS)
    cutoff = timezone.now() - grace
    shas = list(Blob.objects.filter(touched_at__lt=cutoff, refs__isnull=True).values_list("sha256", flat=True)[:10_000])
    if shas and not dry_run:
        store.delete(shas)
    return shas


def blob_refs_set(thread_id: str, shas: Iterable[str]) -> None:
    """Make the thread's references exactly ``shas`` (after its checkpoints were pruned)."""
    BlobRef.objects.filter(thread_id=thread_id).exclude(blob_id__in=list(shas)).delete()
