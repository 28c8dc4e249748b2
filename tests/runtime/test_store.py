"""Long-term memory (runtime.store): the libraries' stores on SQLite and PostgreSQL, injected into runs,
every operation recorded and every write audited; vector search with a deterministic fake embedding."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.store.postgres import PostgresStore
from langgraph.store.sqlite import SqliteStore
from typing_extensions import TypedDict

from approvals.models import AuditAction, AuditEvent
from approvals.redaction import MASK
from runtime.models import Run, RunKind, RunStatus, StoreOperation, Thread
from runtime.registry import graph_get
from runtime.run_store import RecordingStore
from runtime.store import (
    StoreConfig,
    StoreConfigError,
    store_config_read,
    store_sqlite_build,
)

pytestmark = pytest.mark.usefixtures("live_db")

# A deterministic embedding (the outside world's model, faked): letter counts over 8 buckets.
EMBED_MODULE = """
def embed(texts):
    out = []
    for text in texts:
        v = [0.0] * 8
        for ch in text.lower():
            if ch.isalpha():
                v[(ord(ch) - 97) % 8] += 1.0
        norm = sum(x * x for x in v) ** 0.5 or 1.0
        out.append([x / norm for x in v])
    return out
"""


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[BaseStore, BaseCheckpointSaver[Any]]]:
    """(the process store, a checkpointer) on one database engine."""
    if request.param == "sqlite":
        store = store_sqlite_build(tmp_path / "store.sqlite3", StoreConfig())
        saver = SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
        yield store, saver
        store.conn.close()
        return
    from runtime.checkpointer import checkpointer_get
    from runtime.store import store_get

    store = store_get()  # tables created by the migration
    assert isinstance(store, PostgresStore)
    yield store, checkpointer_get()


def _run_for(graph: str = "loan_approval") -> Run:
    # Finished already: the session's sweeper must not pick these up.
    thread = Thread.objects.create(graph=graph, status="completed")
    return Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.SUCCEEDED)


def _loan_graph(store: BaseStore, saver: BaseCheckpointSaver[Any]) -> Any:
    # The demo graph as registered (tests/graphs/langgraph.json), compiled with this backend.
    return graph_get("loan_approval").builder.compile(checkpointer=saver, store=store)


def _loan(run: Run, applicant_id: str, amount: int) -> tuple[dict[str, Any], dict[str, Any]]:
    loan = {"applicant": "Ada", "applicant_id": applicant_id, "loan_id": f"L-{uuid.uuid4().hex[:6]}"}
    return {**loan, "amount": amount, "income": 40000}, {"configurable": {"thread_id": str(run.thread_id)}}


def test_the_loan_graph_remembers_an_outcome_per_applicant_across_threads(backend):
    inner, saver = backend
    applicant = f"A-{uuid.uuid4().hex[:8]}"
    first = _run_for()
    declined_input, config = _loan(first, applicant, amount=40000)  # risk > 0.8: declined, no bank call
    graph = _loan_graph(RecordingStore(inner, thread_id=first.thread_id, run_id=first.id), saver)
    assert graph.invoke(declined_input, config)["status"] == "declined"

    second = _run_for()
    borderline, config2 = _loan(second, applicant, amount=15000)  # human review
    graph = _loan_graph(RecordingStore(inner, thread_id=second.thread_id, run_id=second.id), saver)
    paused = graph.invoke(borderline, config2)
    [interrupt] = paused["__interrupt__"]
    assert interrupt.value["details"]["previous_outcome"] == {
        "loan_id": declined_input["loan_id"],
        "outcome": "declined",
        "amount": 40000,
    }
    # A first-time applicant has none.
    third = _run_for()
    fresh, config3 = _loan(third, f"A-{uuid.uuid4().hex[:8]}", amount=15000)
    graph = _loan_graph(RecordingStore(inner, thread_id=third.thread_id, run_id=third.id), saver)
    [interrupt] = graph.invoke(fresh, config3)["__interrupt__"]
    assert interrupt.value["details"]["previous_outcome"] is None


def test_every_store_operation_of_a_run_is_recorded_and_every_write_audited(backend):
    inner, saver = backend
    applicant = f"A-{uuid.uuid4().hex[:8]}"
    run = _run_for()
    loan, config = _loan(run, applicant, amount=40000)
    _loan_graph(RecordingStore(inner, thread_id=run.thread_id, run_id=run.id), saver).invoke(loan, config)

    ops = list(StoreOperation.objects.filter(run=run).values_list("op", "namespace", "key", "hits"))
    assert ops == [("put", f"applicants.{applicant}", loan["loan_id"], 1)]
    [event] = AuditEvent.objects.filter(action=AuditAction.STORE_ITEM_PUT, thread_id=run.thread_id)
    assert event.details["namespace"] == ["applicants", applicant]
    assert event.details["key"] == loan["loan_id"]
    assert event.graph == "loan_approval"
    # The audit trail never holds a namespace's sensitive field in the clear (langgraph.json: income).
    assert event.details["value"]["income"] == MASK
    assert event.details["value"]["outcome"] == "declined"

    reader = _run_for()
    store = RecordingStore(inner, thread_id=reader.thread_id, run_id=reader.id)
    assert store.get(("applicants", applicant), loan["loan_id"]) is not None
    assert store.get(("applicants", applicant), "nothing-here") is None
    assert len(store.search(("applicants", applicant))) == 1
    store.delete(("applicants", applicant), loan["loan_id"])
    recorded = list(StoreOperation.objects.filter(run=reader).order_by("id").values_list("op", "hits"))
    assert recorded == [("get", 1), ("get", 0), ("search", 1), ("delete", 1)]
    deleted = AuditEvent.objects.filter(action=AuditAction.STORE_ITEM_DELETED, thread_id=reader.thread_id)
    assert [e.details["key"] for e in deleted] == [loan["loan_id"]]


class _FailingStore(SqliteStore):
    """The store's database refusing a write (disk full, connection lost)."""

    def batch(self, ops: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")


def test_a_store_write_that_fails_leaves_no_record_and_no_audit_row(tmp_path):
    failing = _FailingStore(sqlite3.connect(str(tmp_path / "s.sqlite3"), check_same_thread=False))
    failing.setup()
    run = _run_for()
    store = RecordingStore(failing, thread_id=run.thread_id, run_id=run.id)
    with pytest.raises(sqlite3.OperationalError):
        store.put(("applicants", "x"), "k", {"outcome": "declined"})
    assert not StoreOperation.objects.filter(run=run).exists()
    assert not AuditEvent.objects.filter(thread_id=run.thread_id, action=AuditAction.STORE_ITEM_PUT).exists()


def _config_file(tmp_path: Path, store: dict[str, Any], embed: str = EMBED_MODULE) -> Path:
    (tmp_path / "embed.py").write_text(embed)
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps({"graphs": {}, "store": store}))
    return path


INDEX = {"embed": "./embed.py:embed", "dims": 8, "fields": ["text"]}
SQLITE_LOADS_EXTENSIONS = hasattr(sqlite3.Connection, "enable_load_extension")


def test_the_configured_embedding_function_is_the_stores(tmp_path):
    """langgraph.json's "./embed.py:embed" reaches the library's store as its embeddings, on both classes."""
    config = store_config_read(_config_file(tmp_path, {"index": INDEX}))
    expected = config.index["embed"](["bbbb cccc"])[0] if config.index else None
    postgres = PostgresStore(None, index=config.index)  # type: ignore[arg-type]  # no connection needed to embed
    sqlite = SqliteStore(sqlite3.connect(":memory:"), index=config.index)  # type: ignore[arg-type]
    for store in (postgres, sqlite):
        assert store.embeddings is not None
        assert store.embeddings.embed_query("bbbb cccc") == expected
        assert store.index_config and store.index_config["dims"] == 8


def test_vector_search_on_sqlite_ranks_by_the_embedding_or_is_refused_before_anything_is_written(tmp_path):
    """Where this Python's sqlite3 loads extensions, sqlite-vec ranks by the configured embedding; where it
    cannot (this machine), the build refuses naming sqlite-vec and store.index, and creates no file."""
    config = store_config_read(_config_file(tmp_path, {"index": INDEX}))
    if not SQLITE_LOADS_EXTENSIONS:
        with pytest.raises(StoreConfigError, match="cannot load extensions") as caught:
            store_sqlite_build(tmp_path / "vec.sqlite3", config)
        assert "sqlite-vec" in str(caught.value) and "store.index" in str(caught.value)
        assert not (tmp_path / "vec.sqlite3").exists()
        return
    store = store_sqlite_build(tmp_path / "vec.sqlite3", config)
    store.put(("docs",), "a", {"text": "aaaa aaaa"})
    store.put(("docs",), "b", {"text": "bcbc bcbc"})
    store.put(("docs",), "c", {"text": "hhhh"})
    results = store.search(("docs",), query="bbbb cccc", limit=3)
    assert results[0].key == "b"
    assert results[0].score is not None and results[0].score > (results[-1].score or 0)
    store.conn.close()


def _store_build_together(path: Path, barrier: threading.Barrier) -> SqliteStore:
    barrier.wait()
    return store_sqlite_build(path, StoreConfig())


def test_workers_building_their_store_on_a_new_file_at_once_all_get_it(tmp_path):
    """The embedded stack's workers each build their store on first use; on a new store file they used to
    race the library's schema setup (read the version, apply the next migrations) and the losers failed
    their runs with "UNIQUE constraint failed: store_migrations.v" or "duplicate column name". Builders
    released together, round after round: each gets a working store and the schema is recorded once."""
    builders = 6
    with ThreadPoolExecutor(builders) as pool:
        for round_ in range(5):
            path = tmp_path / f"store-{round_}.sqlite3"
            barrier = threading.Barrier(builders)
            futures = [pool.submit(_store_build_together, path, barrier) for _ in range(builders)]
            failures = [f.exception() for f in futures if f.exception() is not None]
            assert failures == []
            stores = [f.result() for f in futures]
            for i, store in enumerate(stores):
                store.put(("notes",), f"k{i}", {"by": i})
            assert len(stores[0].search(("notes",), limit=20)) == builders
            versions = [v for (v,) in stores[0].conn.execute("SELECT v FROM store_migrations ORDER BY v")]
            assert versions == list(range(len(SqliteStore.MIGRATIONS)))
            assert oct(Path(f"{path}.setup.lock").stat().st_mode & 0o777) == "0o600"
            for store in stores:
                store.conn.close()


def test_postgres_refuses_a_vector_index_without_pgvector_clearly(monkeypatch, tmp_path):
    import runtime.store as store_module
    from runtime.checkpointer import checkpointer_pool

    with checkpointer_pool().connection() as conn:
        has_pgvector = bool(conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone())
    config = store_config_read(_config_file(tmp_path, {"index": {"embed": "./embed.py:embed", "dims": 8}}))
    monkeypatch.setattr(store_module, "_config", config)
    if has_pgvector:  # a PostgreSQL with pgvector sets the vector tables up instead
        store_module.store_setup()
        return
    with pytest.raises(StoreConfigError, match="no pgvector extension"):
        store_module.store_setup()


@pytest.mark.parametrize(
    "store,message",
    [
        ({"index": {"embed": "./embed.py:embed", "dims": 0}}, '"store.index.dims" must be an integer >= 1'),
        ({"index": {"embed": "./missing.py:embed", "dims": 8}}, "missing.py does not exist"),
        ({"index": {"embed": "./embed.py:nothing", "dims": 8}}, "has no function 'nothing'"),
        ({"index": {"embed": "./embed.py:embed", "dims": 8, "fields": "text"}}, '"store.index.fields" must be'),
        ({"index": "yes"}, '"store.index" must be an object'),
    ],
)
def test_a_bad_store_configuration_stops_start_up_naming_the_key(tmp_path, store, message):
    with pytest.raises(StoreConfigError, match="store") as caught:
        store_config_read(_config_file(tmp_path, store))
    assert message in str(caught.value)


def test_namespace_rules_are_read_from_the_gatehouse_section(tmp_path):
    path = tmp_path / "langgraph.json"
    rules = {"applicants": {"graphs": ["loan_approval"], "sensitive_paths": ["income"]}}
    path.write_text(json.dumps({"graphs": {}, "gatehouse": {"store": {"namespaces": rules}}}))
    config = store_config_read(path)
    rule = config.rule(("applicants", "A-1"))
    assert rule is not None and rule.graphs == ("loan_approval",) and rule.sensitive_paths == ("income",)
    assert config.rule(("other",)) is None
    path.write_text(json.dumps({"graphs": {}, "gatehouse": {"store": {"namespaces": {"x": {"graphs": "all"}}}}}))
    with pytest.raises(StoreConfigError, match=r"gatehouse.store.namespaces.x.graphs"):
        store_config_read(path)


def test_a_graph_node_declaring_store_gets_the_runs_store(backend):
    inner, saver = backend

    class S(TypedDict, total=False):
        seen: Any

    def remember(state: S, *, store: BaseStore) -> dict[str, Any]:
        store.put(("notes",), "n", {"text": "hello"})
        item = store.get(("notes",), "n")
        return {"seen": item.value if item else None}

    builder = StateGraph(S)
    builder.add_node(remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    run = _run_for("built_per_run")
    graph = builder.compile(checkpointer=saver, store=RecordingStore(inner, thread_id=run.thread_id, run_id=run.id))
    out = graph.invoke({}, {"configurable": {"thread_id": str(run.thread_id)}})
    assert out["seen"] == {"text": "hello"}
    assert list(StoreOperation.objects.filter(run=run).order_by("id").values_list("op", flat=True)) == ["put", "get"]
