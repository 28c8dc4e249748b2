"""Large values are stored once, by content, on both checkpointers; nodes never notice."""

from __future__ import annotations

import importlib
import itertools
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict

import pytest
from django.core.files.storage import FileSystemStorage
from django.db import connection
from django.test import override_settings
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

from runtime.blobs import MARKER, DatabaseBlobStore, StorageBlobStore, blob_store_build, blobs_lazy
from runtime.checkpointer import _blob_sql, checkpointer_get
from runtime.models import Blob, BlobRef, Run, RunKind, RunStatus, Thread
from runtime.threads import thread_create
from tests.sqlite_probe import sqlite_probe

LZ4_AVAILABLE = importlib.import_module("runtime.migrations.0010_lz4_compression").LZ4_AVAILABLE

DOC = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(4000))  # ~200 KB


class State(TypedDict, total=False):
    document: str
    steps: list[str]
    seen: list[int]


def _step(name: str) -> Any:
    def node(state: State) -> State:
        return {"steps": [*state.get("steps", []), name], "seen": [*state.get("seen", []), len(state["document"])]}

    return node


def _graph(saver: Any, steps: int = 5) -> Any:
    builder = StateGraph(State)
    names = [f"s{i}" for i in range(steps)]
    for name in names:
        builder.add_node(name, _step(name))
    builder.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        builder.add_edge(a, b)
    builder.add_edge(names[-1], END)
    return builder.compile(checkpointer=saver)


def _cfg() -> Any:
    return {"configurable": {"thread_id": f"blobs-{uuid.uuid4().hex}"}}


def _pg_bytes(thread_id: str) -> int:
    with checkpointer_get()._cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(
            """SELECT (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c WHERE thread_id = %(t)s)
                    + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b WHERE thread_id = %(t)s)
                    + (SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w WHERE thread_id = %(t)s)
               AS n""",
            {"t": thread_id},
        )
        return int(cur.fetchone()["n"])


def test_nodes_see_the_document_and_it_is_stored_once(saver):
    graph, config = _graph(saver), _cfg()
    doc = DOC + uuid.uuid4().hex  # unique content: a blob of its own
    result = graph.invoke({"document": doc}, config, durability="sync")
    assert result["document"] == doc
    assert result["seen"] == [len(doc)] * 5
    [ref] = BlobRef.objects.filter(thread_id=config["configurable"]["thread_id"])
    assert Blob.objects.get(pk=ref.blob_id).size >= len(doc)
    assert graph.get_state(config).values["document"] == doc


def test_postgres_stores_a_document_thread_in_little_more_than_the_document(live_db):
    graph, config = _graph(checkpointer_get(), steps=8), _cfg()
    graph.invoke({"document": DOC + uuid.uuid4().hex}, config, durability="sync")
    thread_id = config["configurable"]["thread_id"]
    blob_bytes = sum(b.size for b in Blob.objects.filter(refs__thread_id=thread_id))
    assert (_pg_bytes(thread_id) + blob_bytes) <= 1.2 * len(DOC)


def test_a_document_shared_by_threads_is_one_blob(saver):
    graph, doc = _graph(saver, steps=2), DOC + uuid.uuid4().hex
    configs = [_cfg(), _cfg()]
    for config in configs:
        graph.invoke({"document": doc}, config, durability="sync")
    shas = {r.blob_id for r in BlobRef.objects.filter(thread_id__in=[c["configurable"]["thread_id"] for c in configs])}
    assert len(shas) == 1


def test_small_values_stay_in_the_checkpoint(saver):
    graph, config = _graph(saver, steps=2), _cfg()
    graph.invoke({"document": "short"}, config, durability="sync")
    assert not BlobRef.objects.filter(thread_id=config["configurable"]["thread_id"]).exists()


def test_listings_get_a_placeholder_instead_of_the_document(saver):
    graph, config = _graph(saver, steps=2), _cfg()
    graph.invoke({"document": DOC}, config, durability="sync")
    with blobs_lazy():
        history = list(graph.get_state_history(config))
    shown = [s.values["document"] for s in history if "document" in s.values]
    assert shown and all(set(v) == {"$blob", "size"} for v in shown)


def test_a_thread_whose_document_was_inline_keeps_it_after_the_upgrade(live_db):
    # Written by a plain PostgresSaver (the document inline), continued by Gatehouse's.
    plain = PostgresSaver(checkpointer_get().conn)  # type: ignore[attr-defined]
    config = _cfg()
    doc = DOC + uuid.uuid4().hex
    _graph(plain, steps=2).invoke({"document": doc}, config, durability="sync")
    graph = _graph(checkpointer_get(), steps=2)
    graph.update_state(config, {"steps": []})  # a new checkpoint; the document channel is unchanged
    checkpointer_get()._loaded.clear()  # type: ignore[attr-defined]
    assert graph.get_state(config).values["document"] == doc


@dataclass
class Page:
    number: int
    text: str


class PagesState(TypedDict, total=False):
    pages: list[Page]


def test_the_graphs_own_types_round_trip_through_a_blob_under_strict_msgpack(saver):
    builder = StateGraph(PagesState)
    builder.add_node("make", lambda s: {"pages": [Page(i, "x" * 500) for i in range(40)]})
    builder.add_edge(START, "make")
    builder.add_edge("make", END)
    graph, config = builder.compile(checkpointer=saver), _cfg()
    graph.invoke({}, config, durability="sync")
    assert BlobRef.objects.filter(thread_id=config["configurable"]["thread_id"]).exists()
    saver._loaded.clear()
    pages = graph.get_state(config).values["pages"]
    assert pages[3] == Page(3, "x" * 500)


def test_the_storage_setting_selects_the_store(live_db):
    assert isinstance(blob_store_build(_blob_sql()), DatabaseBlobStore)
    storages = {"gatehouse_blobs": {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {"bucket_name": "b"}}}
    with override_settings(GATEHOUSE_BLOB_STORAGE="s3", STORAGES=storages):
        from storages.backends.s3 import S3Storage

        store = blob_store_build(_blob_sql())
        assert isinstance(store, StorageBlobStore) and isinstance(store.storage, S3Storage)
    with override_settings(
        GATEHOUSE_BLOB_STORAGE="storage:files",
        STORAGES={"files": {"BACKEND": "django.core.files.storage.FileSystemStorage"}},
    ):
        assert isinstance(blob_store_build(_blob_sql()).storage, FileSystemStorage)  # type: ignore[attr-defined]


def test_a_storage_store_keeps_bytes_in_the_storage_and_the_index_in_the_table(live_db, tmp_path):
    store = StorageBlobStore(FileSystemStorage(location=tmp_path), _blob_sql())
    sha = uuid.uuid4().hex * 2
    store.put(sha, b"payload", thread_id="t-storage")
    assert store.get(sha) == b"payload"
    assert Blob.objects.get(pk=sha).data is None
    assert (tmp_path / "blobs" / sha[:2] / sha).read_bytes() == b"payload"
    store.delete([sha])
    assert not Blob.objects.filter(pk=sha).exists() and not (tmp_path / "blobs" / sha[:2] / sha).exists()


def blob_stored_again_check(store: DatabaseBlobStore) -> None:
    """The index write (``runtime.blobs._index_put``: one statement on PostgreSQL, three on SQLite): a new
    blob gets its row and the thread's reference; the same bytes stored again, by another thread or the
    same one, leave the row as it was but for ``touched_at``, which moves on (the collector spares a blob
    touched within its grace: a checkpoint may be about to reference it), and add only the reference that
    was missing."""
    sha, data = uuid.uuid4().hex * 2, b"x" * 5000
    store.put(sha, data, thread_id="t-first")
    first = Blob.objects.get(pk=sha)
    an_hour_ago = first.touched_at - timedelta(hours=1)
    Blob.objects.filter(pk=sha).update(touched_at=an_hour_ago)
    store.put(sha, data, thread_id="t-second")
    store.put(sha, data, thread_id="t-first")
    again = Blob.objects.get(pk=sha)
    assert (bytes(again.data), again.size, again.created_at) == (data, len(data), first.created_at)
    assert again.touched_at >= first.touched_at > an_hour_ago
    assert sorted(BlobRef.objects.filter(blob_id=sha).values_list("thread_id", flat=True)) == ["t-first", "t-second"]


def test_a_blob_stored_again_is_touched_not_stored_twice_and_referenced_by_each_thread(live_db):
    blob_stored_again_check(DatabaseBlobStore(_blob_sql()))


_SQLITE_PROBE = """
import json
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from runtime.blobs import DatabaseBlobStore
from runtime.checkpointer import _blob_sql
from tests.storage.test_blobs import blob_stored_again_check
sql = _blob_sql()
blob_stored_again_check(DatabaseBlobStore(sql))
print(json.dumps({"checked": type(sql).__name__}))
"""


@pytest.mark.slow
def test_on_sqlite_a_blob_stored_again_is_touched_not_stored_twice_and_referenced_by_each_thread(tmp_path):
    """The same, on the embedded database's statements (the code paths part by database)."""
    assert sqlite_probe(_SQLITE_PROBE, tmp_path / "var") == {"checked": "SqliteSql"}


def test_markers_are_never_seen_by_nodes(saver):
    graph, config = _graph(saver, steps=3), _cfg()
    graph.invoke({"document": DOC}, config, durability="sync")
    values = graph.get_state(config).values
    assert MARKER not in str(values)[:1000]


def test_a_document_is_stored_compressed_with_lz4_where_the_server_has_it(live_db):
    """pglz gave up on documents like this one after the work (stored as they came, 3.5x the time LZ4 takes):
    the blob column compresses with LZ4 (runtime/migrations/0010_lz4_compression), and the document reads back whole."""
    with connection.cursor() as cursor:
        cursor.execute(LZ4_AVAILABLE)
        assert cursor.fetchone() is not None, "this suite's PostgreSQL has LZ4 (Debian's 15 does): the test needs it"
    graph, config = _graph(checkpointer_get(), steps=2), _cfg()
    doc = "".join(f'{{"row": {i}, "note": "{uuid.uuid4().hex[:8]} checked, register"}}\n' for i in range(5000))
    graph.invoke({"document": doc}, config, durability="sync")
    [ref] = BlobRef.objects.filter(thread_id=config["configurable"]["thread_id"])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_compression(data), pg_column_size(data), length(data) FROM runtime_blob "
            "WHERE sha256 = %s",
            [ref.blob_id],
        )
        method, stored, size = cursor.fetchone()
    assert method == "lz4"
    assert stored < 0.8 * size, (stored, size)
    assert graph.get_state(config).values["document"] == doc


def test_a_threads_values_and_a_runs_input_are_compressed_with_lz4(live_db):
    """A start's input and the thread's mirrored values hold the same documents as the checkpoints."""
    rows = [{"row": i, "note": f"{uuid.uuid4().hex[:8]} checked against the register"} for i in range(3000)]
    doc = {"document": rows}
    thread = thread_create(graph="loan_approval", metadata={}, created_by=None)
    Thread.objects.filter(pk=thread.pk).update(values=doc)
    # A finished run: a queued one, never dispatched, is one the session worker's sweeper would send.
    run = Run.objects.create(
        thread=thread, kind=RunKind.START, status=RunStatus.SUCCEEDED, input=doc, command={"update": doc}
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_compression(t.values), pg_column_compression(r.input), pg_column_compression(r.command) "
            "FROM runtime_thread t JOIN runtime_run r ON r.thread_id = t.id WHERE r.id = %s",
            [run.pk],
        )
        assert cursor.fetchone() == ("lz4", "lz4", "lz4")
