"""A document is stored once per thread, however many writes of one step carry it, and never after the fact.

One step of a graph hands its saver the same document several times: the start input's pending write, then
the first checkpoint's input channel and its own channel, the write and the checkpoint on two of LangGraph's
threads at once. Each sent its 200 KB to the database again (bench/storage.py: the document's throughput at
0.7x the small state's). ``BlobSpillingSaver`` now stores a (thread, blob) once per process for as long as it
remembers spilled versions, lets a concurrent writer of the same blob wait for the first one's put (a
checkpoint naming a blob is never written before the blob), and serialises and hashes one document object
once.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.blobs import MARKER
from runtime.models import Blob, BlobRef
from tests.conftest import scaled, wait_for
from tests.storage.test_blobs import DOC, _cfg, _graph


class CountingStore:
    """The saver's real blob store, its puts counted; the first one can be held until ``release`` is set."""

    def __init__(self, store: Any, *, hold_first: bool = False, fail_first: bool = False) -> None:
        self.store, self.hold_first, self.fail_first = store, hold_first, fail_first
        self.puts: list[tuple[str, str]] = []
        self.entered, self.release, self.stored = threading.Event(), threading.Event(), threading.Event()

    def put(self, sha: str, data: bytes, *, thread_id: str) -> None:
        self.puts.append((thread_id, sha))
        first = len(self.puts) == 1
        if first and self.hold_first:
            self.entered.set()
            assert self.release.wait(scaled(30)), "the held put was never released"
        if first and self.fail_first:
            raise ConnectionError("the database went away during the blob's put")
        self.store.put(sha, data, thread_id=thread_id)
        if first:
            self.stored.set()

    def get(self, sha: str) -> bytes:
        return self.store.get(sha)  # type: ignore[no-any-return]


@pytest.fixture
def counted(saver: Any) -> Iterator[CountingStore]:
    real = saver.blob_store
    saver.blob_store = counting = CountingStore(real)
    try:
        yield counting
    finally:
        saver.blob_store = real


def _thread(config: Any) -> str:
    return str(config["configurable"]["thread_id"])


def test_a_document_is_stored_once_per_thread_whatever_carries_it(saver, counted):
    graph, doc = _graph(saver, steps=3), DOC + uuid.uuid4().hex
    first, second = _cfg(), _cfg()
    assert graph.invoke({"document": doc}, first, durability="sync")["document"] == doc
    assert [thread for thread, _ in counted.puts] == [_thread(first)]  # the write, its checkpoint, its channel
    graph.invoke({"document": doc}, second, durability="sync")
    assert [thread for thread, _ in counted.puts] == [_thread(first), _thread(second)]  # each its reference
    [sha] = {sha for _, sha in counted.puts}
    assert set(BlobRef.objects.filter(blob_id=sha).values_list("thread_id", flat=True)) >= {
        _thread(first),
        _thread(second),
    }
    for config in (first, second):
        assert graph.get_state(config).values["document"] == doc


def test_a_thread_made_again_under_its_id_references_its_document_again(saver, counted):
    graph, config, doc = _graph(saver, steps=2), _cfg(), DOC + uuid.uuid4().hex
    graph.invoke({"document": doc}, config, durability="sync")
    saver.delete_thread(_thread(config))
    assert not BlobRef.objects.filter(thread_id=_thread(config)).exists()
    graph.invoke({"document": doc}, config, durability="sync")  # the same id, the same document, again
    [sha] = {sha for _, sha in counted.puts}
    assert BlobRef.objects.filter(thread_id=_thread(config), blob_id=sha).exists(), "its blob is unreferenced"


def _waiting_in_result(thread: threading.Thread) -> bool:
    """Whether ``thread`` is blocked waiting for another writer's put (``Future.result``), or has returned."""
    frame = sys._current_frames().get(thread.ident or -1)
    names = set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return not thread.is_alive() or {"_store_once", "result"} <= names


def _race(
    saver: Any, store: CountingStore, thread_id: str, sha: str, data: bytes
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first writer's put is held; the second writer of the same (thread, blob) comes meanwhile."""
    outcomes: tuple[dict[str, Any], dict[str, Any]] = ({}, {})

    def write(outcome: dict[str, Any]) -> None:
        try:
            saver._store_once(thread_id, sha, data)
            outcome["stored_before_return"] = store.stored.is_set()
        except Exception as exc:
            outcome["raised"] = exc

    first = threading.Thread(target=write, args=(outcomes[0],), daemon=True)
    first.start()
    assert store.entered.wait(scaled(10)), "the first writer never reached its put"
    second = threading.Thread(target=write, args=(outcomes[1],), daemon=True)
    second.start()
    wait_for(lambda: _waiting_in_result(second), timeout=10, what="the second writer to wait or return")
    assert second.is_alive(), f"the second writer returned while the blob was not stored yet: {outcomes[1]}"
    assert len(store.puts) == 1, "the second writer sent the blob again"
    store.release.set()
    first.join(scaled(10))
    second.join(scaled(10))
    assert not first.is_alive() and not second.is_alive()
    return outcomes


@pytest.mark.parametrize("saver", ["postgres"], indirect=True)
def test_a_second_writer_of_a_blob_returns_only_once_the_first_has_stored_it(saver):
    data = (DOC + uuid.uuid4().hex).encode()
    sha = hashlib.sha256(data).hexdigest()
    real, saver.blob_store = saver.blob_store, CountingStore(saver.blob_store, hold_first=True)
    try:
        first, second = _race(saver, saver.blob_store, f"blobs-{uuid.uuid4().hex}", sha, data)
    finally:
        saver.blob_store = real
    assert first == second == {"stored_before_return": True}
    assert Blob.objects.filter(pk=sha).exists()


@pytest.mark.parametrize("saver", ["postgres"], indirect=True)
def test_a_second_writer_of_a_blob_whose_put_failed_fails_too_and_the_next_stores_it(saver):
    data = (DOC + uuid.uuid4().hex).encode()
    sha = hashlib.sha256(data).hexdigest()
    store = CountingStore(saver.blob_store, hold_first=True, fail_first=True)
    real, saver.blob_store = saver.blob_store, store
    try:
        thread_id = f"blobs-{uuid.uuid4().hex}"
        first, second = _race(saver, store, thread_id, sha, data)
        assert isinstance(first.get("raised"), ConnectionError) and isinstance(second.get("raised"), ConnectionError)
        assert not Blob.objects.filter(pk=sha).exists()
        saver._store_once(thread_id, sha, data)  # a failure is not remembered as stored: this one stores it
    finally:
        saver.blob_store = real
    assert len(store.puts) == 2 and BlobRef.objects.filter(thread_id=thread_id, blob_id=sha).exists()


@pytest.mark.parametrize("saver", ["postgres"], indirect=True)
def test_each_document_object_gets_its_own_blob_though_object_ids_are_reused(saver, counted):
    """One document object is serialised and hashed once (its id remembered); a new object that Python gives
    the id of a freed one must not be taken for it."""
    thread_id = f"blobs-{uuid.uuid4().hex}"
    for i in range(40):
        document = f"{DOC}{i}-{uuid.uuid4().hex}"  # freed at the next round: its id is free to reuse
        marker = saver._spill_leaf(thread_id, document)
        _, data = saver.serde.dumps_typed(document)
        assert marker[MARKER] == hashlib.sha256(data).hexdigest(), f"round {i} got another document's blob"
        again = saver._spill_leaf(thread_id, document)
        assert again == marker
        del document, marker, again
    assert len(counted.puts) == 40
