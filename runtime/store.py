"""Long-term memory: one LangGraph ``BaseStore`` per process, injected into every run.

PostgreSQL → the library's ``PostgresStore`` on the checkpointer's connection
pool; SQLite (embedded) → ``SqliteStore`` on its own file beside the
checkpoints. Tables are created by the library's ``setup()`` from a migration
(``runtime/migrations/0006_store.py``) or ``manage.py store_setup``, never per
request.

Configuration is read from ``langgraph.json`` as LangGraph Server reads it::

    "store": {"index": {"embed": "./embed.py:embed", "dims": 64, "fields": ["$"]}}

``embed`` is a ``./file.py:function`` (``list[str] -> list[list[float]]``)
relative to the file, or a ``"provider:model"`` string the library resolves.
With an index, SQLite uses ``sqlite-vec`` and PostgreSQL needs the ``pgvector``
extension (``store_preflight`` says so clearly when it is missing).

Gatehouse's own per-namespace rules live in the ``"gatehouse"`` section::

    "gatehouse": {"store": {"namespaces": {"applicants": {"graphs": ["loan_approval"],
                                                          "sensitive_paths": ["notes"]}}}}

keyed by a namespace's first label (see ``approvals.store`` for the policy).

A run gets the store wrapped in ``runtime.run_store.RecordingStore``: every get / put / delete /
search / list it makes is recorded as a ``StoreOperation`` (thread, run,
namespace, key) in one insert per batch, and writes send ``signals.store_written``
inside that insert's transaction so the domain audits them. A write made by a
claimed run's graph code is fenced in that transaction (``runtime.fencing.fence_hold``):
refused under a stale fence, ordered before any takeover otherwise.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from runtime.sqlite_wal import wal_enable

if TYPE_CHECKING:  # LangGraph's stores are imported when one is built: Django's start reads the config alone
    from langgraph.store.base import BaseStore
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.sqlite import SqliteStore


class StoreConfigError(ImproperlyConfigured):
    pass


@dataclass(frozen=True)
class NamespaceRule:
    """What ``gatehouse.store.namespaces.<first label>`` says about a namespace."""

    graphs: tuple[str, ...] = ()
    sensitive_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoreConfig:
    index: dict[str, Any] | None = None
    ttl: dict[str, Any] | None = None
    namespaces: dict[str, NamespaceRule] = field(default_factory=dict)

    def rule(self, namespace: tuple[str, ...] | list[str]) -> NamespaceRule | None:
        return self.namespaces.get(namespace[0]) if namespace else None


_lock = threading.Lock()
_store: BaseStore | None = None
_config: StoreConfig | None = None


def store_config() -> StoreConfig:
    global _config
    if _config is None:
        _config = store_config_read(Path(settings.GATEHOUSE_GRAPHS))
    return _config


def store_config_load(path: Path) -> StoreConfig:
    """Read ``path``'s store configuration, as the registry loads (``registry_load``), so a bad one stops
    start-up; kept as the process's when ``path`` is the configured file (an embedding module is
    imported once)."""
    global _config
    config = store_config_read(path)
    if path == Path(settings.GATEHOUSE_GRAPHS):
        _config = config
    return config


def store_config_read(path: Path) -> StoreConfig:
    """Parse the ``store`` and ``gatehouse.store`` sections; bad values stop start-up, naming the file and the key."""
    if not path.exists():  # said as the registry says it (a misspelt GATEHOUSE_GRAPHS read as a store problem)
        raise StoreConfigError(f"GATEHOUSE_GRAPHS: {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreConfigError(f"{path}: cannot read the store configuration: {exc}") from None
    section = data.get("store") or {}
    if not isinstance(section, dict):
        raise StoreConfigError(f'{path}: "store" must be an object')
    index = section.get("index")
    if index is not None:
        try:
            index = _index_parse(path.parent.resolve(), index)
        except StoreConfigError as exc:
            raise StoreConfigError(f"{path}: {exc}") from exc.__cause__
    ttl = section.get("ttl")
    if ttl is not None and not isinstance(ttl, dict):
        raise StoreConfigError(f'{path}: "store.ttl" must be an object')
    rules: dict[str, NamespaceRule] = {}
    raw_rules = ((data.get("gatehouse") or {}).get("store") or {}).get("namespaces") or {}
    if not isinstance(raw_rules, dict):
        raise StoreConfigError(f'{path}: "gatehouse.store.namespaces" must map a first label to a rule')
    for label, rule in raw_rules.items():
        where = f"gatehouse.store.namespaces.{label}"
        if not isinstance(rule, dict):
            raise StoreConfigError(f'{path}: "{where}" must be an object')
        graphs, paths = rule.get("graphs", []), rule.get("sensitive_paths", [])
        for key, values in (("graphs", graphs), ("sensitive_paths", paths)):
            if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
                raise StoreConfigError(f'{path}: "{where}.{key}" must be a list of non-empty strings')
        rules[label] = NamespaceRule(tuple(graphs), tuple(paths))
    return StoreConfig(index=index, ttl=ttl, namespaces=rules)


def _index_parse(base: Path, index: Any) -> dict[str, Any]:
    if not isinstance(index, dict):
        raise StoreConfigError('"store.index" must be an object like {"embed": "./embed.py:fn", "dims": 64}')
    dims = index.get("dims")
    if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
        raise StoreConfigError('"store.index.dims" must be an integer >= 1')
    fields = index.get("fields")
    if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
        raise StoreConfigError('"store.index.fields" must be a list of paths')
    embed = index.get("embed")
    if not isinstance(embed, str) or not embed:
        raise StoreConfigError('"store.index.embed" must be "./file.py:function" or "provider:model"')
    out = dict(index)
    out["embed"] = _embed_load(base, embed) if ".py:" in embed else embed
    return out


def _embed_load(base: Path, spec: str) -> Any:
    file_part, _, attr = spec.rpartition(":")
    file_path = (base / file_part).resolve()
    if not file_path.is_file():
        raise StoreConfigError(f'"store.index.embed": {file_path} does not exist')
    module_spec = importlib.util.spec_from_file_location(f"gatehouse_store_embed_{file_path.stem}", file_path)
    if module_spec is None or module_spec.loader is None:
        raise StoreConfigError(f'"store.index.embed": cannot import {file_path}')
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise StoreConfigError(f'"store.index.embed": importing {file_path} failed: {exc!r}') from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise StoreConfigError(f'"store.index.embed": {file_path.name} has no function {attr!r}')
    return fn


def store_get() -> BaseStore:
    """The process's store (built on first use)."""
    global _store
    store = _store
    if store is None or _on_closed_pool(store):
        with _lock:
            if _store is None or _on_closed_pool(_store):
                _store = _store_build(store_config())
            store = _store
    return store


def _on_closed_pool(store: BaseStore) -> bool:
    # PostgreSQL: the store shares the checkpointer's pool, which checkpointer_close closes (a test
    # session's end, a shutdown); a store kept on it would fail every operation with PoolClosed.
    from langgraph.store.postgres import PostgresStore

    return isinstance(store, PostgresStore) and bool(getattr(store.conn, "closed", False))


def store_setup() -> None:
    """Create or migrate the store's tables (from a migration or ``manage.py store_setup``)."""
    store_preflight()
    store_get().setup()  # type: ignore[attr-defined]


def store_close() -> None:
    global _store, _config
    with _lock:
        store, _store, _config = _store, None, None
    if store is None:
        return
    from langgraph.store.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        store.conn.close()


def _forget_after_fork() -> None:
    global _store, _config
    _store, _config = None, None


os.register_at_fork(after_in_child=_forget_after_fork)


def _is_postgres() -> bool:
    return connections["default"].vendor == "postgresql"


def store_preflight() -> None:
    """Refuse a vector index the database cannot hold (no pgvector; no sqlite-vec), before anything is written."""
    config = store_config()
    if not config.index:
        return
    if not _is_postgres():
        sqlite_vectors_check(config)
        return
    from runtime.checkpointer import checkpointer_pool

    with checkpointer_pool().connection(timeout=10) as conn:
        row = conn.execute("SELECT 1 AS ok FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if row is None:
        raise StoreConfigError(
            '"store.index" is configured, but this PostgreSQL server has no pgvector extension '
            "(pg_available_extensions has no 'vector'): install pgvector, or remove \"store.index\" "
            "from langgraph.json to use the store without vector search"
        )


def _store_build(config: StoreConfig) -> BaseStore:
    if _is_postgres():
        from runtime.checkpointer import checkpointer_pool

        return store_postgres_build(checkpointer_pool(), config)
    return store_sqlite_build(Path(settings.GATEHOUSE_STORE_SQLITE), config)


def store_postgres_build(pool: Any, config: StoreConfig) -> PostgresStore:
    # The library's own class on the checkpointer's pool (autocommit, dict rows: what it requires).
    from langgraph.store.postgres import PostgresStore

    return PostgresStore(pool, index=config.index, ttl=config.ttl)  # type: ignore[arg-type]


def sqlite_vectors_check(config: StoreConfig) -> None:
    """sqlite-vec is a loadable extension: a Python whose sqlite3 cannot load one cannot search vectors."""
    if config.index and not hasattr(sqlite3.Connection, "enable_load_extension"):
        raise StoreConfigError(
            '"store.index" is configured, but this Python\'s sqlite3 cannot load extensions (it was built without '
            "--enable-loadable-sqlite-extensions), and SqliteStore's vector search needs the sqlite-vec extension: "
            'run a Python built with it, use PostgreSQL with pgvector, or remove "store.index" from langgraph.json'
        )


def store_sqlite_build(path: Path | str, config: StoreConfig) -> SqliteStore:
    from langgraph.store.sqlite import SqliteStore

    sqlite_vectors_check(config)
    in_memory = str(path) == ":memory:"
    if not in_memory:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30, isolation_level=None)
    wal_enable(conn)
    conn.execute("PRAGMA busy_timeout=30000")
    store = SqliteStore(conn, index=config.index, ttl=config.ttl)  # type: ignore[arg-type]
    # Idempotent and cheap once the tables exist; it also loads sqlite-vec into this connection when an index
    # is configured. On a new file it is not safe to run twice at once: the library reads the schema version
    # and then inserts the next, so two workers building their store together both insert it and one fails
    # its run with a UNIQUE error. One process sets up at a time; the next finds the version and does nothing.
    with nullcontext() if in_memory else _one_process_at_a_time(Path(f"{path}.setup.lock")):
        store.setup()
    return store


@contextmanager
def _one_process_at_a_time(lock_path: Path) -> Iterator[None]:
    # flock on a file of its own: a lock on the database file would be SQLite's POSIX locks' business, and
    # closing a second descriptor of it would drop those.
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and the lock with it


# --- what a run does with the store ---------------------------------------------------------


OP_GET, OP_PUT, OP_DELETE, OP_SEARCH, OP_LIST = "get", "put", "delete", "search", "list_namespaces"


def namespace_label(namespace: tuple[str, ...] | list[str]) -> str:
    # Labels cannot contain "." (the library refuses them), so the dotted form is unambiguous.
    return ".".join(namespace)[:512]
