"""One checkpointer per process: PostgresSaver on PostgreSQL, SqliteSaver embedded (``runtime.savers``).

The connection details come from Django's default database, read when first
used, so tests (which rename the database) and forked workers get the right one.

Both are the libraries' own savers with three mixins: ``FencedPostgresSaver`` /
``FencedSqliteSaver`` (a claimed run's checkpoint writes are refused once
another worker took the run over, see ``runtime.fencing``), ``BlobSpillingSaver``
(large values stored once by content, see ``runtime.blobs``) and
``SchemaVersionedSaver`` (schema version stamped on checkpoints, old ones
upcast on load, see ``runtime.upcasters``).

The savers' classes (``runtime.savers``) are imported when the first saver is built: importing this module
does not load LangGraph, so Django's start and the management commands that run no graph do without it.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import threading
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from psycopg_pool import ConnectionPool

from runtime.blobs import BlobStore, PostgresSql, Sql, SqliteSql, blob_store_build
from runtime.pool_checks import connection_check_if_doubtful
from runtime.sqlite_wal import wal_enable

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

_lock = threading.Lock()
_saver: BaseCheckpointSaver[str] | None = None
_pool = None


def checkpointer_get() -> BaseCheckpointSaver[str]:
    global _saver
    if _saver is None:
        with _lock:
            if _saver is None:
                _saver = _saver_build()
    return _saver


def checkpointer_setup() -> None:
    """Create or migrate the checkpointer's tables (from a migration, never per request)."""
    checkpointer_get().setup()  # type: ignore[attr-defined]


def checkpointer_close() -> None:
    global _saver, _pool
    with _lock:
        if _pool is not None:
            _pool.close()
        _saver, _pool = None, None


def _forget_after_fork() -> None:
    # A pool or SQLite handle inherited through fork() is not ours to use.
    global _saver, _pool
    _saver, _pool = None, None


os.register_at_fork(after_in_child=_forget_after_fork)


def saver_blobs() -> BlobStore:
    """Where a saver spills large values: Django's default database, reached without the ORM (runtime.blobs)."""
    return blob_store_build(_blob_sql())


def _blob_sql() -> Sql:
    db = connections["default"].settings_dict
    if connections["default"].vendor == "postgresql":
        return PostgresSql(_pool_get(db))
    return SqliteSql(str(db["NAME"]))


def _saver_build() -> BaseCheckpointSaver[str]:
    if settings.GATEHOUSE_CHECKPOINTER == "redis":
        checkpointer_preflight()
        return _redis_saver()
    db = connections["default"].settings_dict
    if connections["default"].vendor == "postgresql":
        return _postgres_saver(db)
    return _sqlite_saver()


def _postgres_saver(db: dict[str, object]) -> BaseCheckpointSaver[str]:
    from runtime.savers import GatehousePostgresSaver

    return GatehousePostgresSaver(_pool_get(db), blobs=saver_blobs())


def checkpointer_pool() -> Any:
    """The PostgreSQL connection pool of the savers (the long-term memory store shares it)."""
    return _pool_get(connections["default"].settings_dict)


def _pool_get(db: dict[str, object]) -> Any:
    global _pool
    if _pool is not None:
        return _pool
    from psycopg.rows import dict_row

    conninfo = checkpointer_conninfo(db)
    _pool = ConnectionPool(
        conninfo,
        min_size=1,
        max_size=settings.GATEHOUSE_CHECKPOINT_POOL_SIZE,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        # A connection killed under us (failover, pg_terminate_backend) is
        # discarded on checkout instead of failing the next run.
        check=connection_check_if_doubtful,
        open=True,
        name="gatehouse-checkpoints",
        # Bounded backoff, as Django's pool (console/settings.py): back within seconds after an outage.
        reconnect_timeout=settings.GATEHOUSE_DB_POOL_RECONNECT_SECONDS,
    )
    return _pool


def checkpointer_conninfo(db: dict[str, Any]) -> str:
    """A libpq connection string for Django's database settings, OPTIONS included.

    ``make_conninfo`` quotes every value (a password with a space or a quote) and
    keeps what Django passes through OPTIONS — ``sslmode``, ``sslrootcert``,
    ``options``, ``service``, ``target_session_attrs`` … — so the checkpointer
    connects exactly as Django does.
    """
    from psycopg import pq
    from psycopg.conninfo import make_conninfo

    # OPTIONS also holds Django's own keys (pool, isolation_level …) and psycopg.connect()
    # keywords (prepare_threshold …): keep only what libpq knows as a connection parameter.
    libpq_keys = {option.keyword.decode() for option in pq.Conninfo.get_defaults()}
    params: dict[str, Any] = {
        key: value for key, value in (db.get("OPTIONS") or {}).items() if key in libpq_keys and value is not None
    }
    for key, setting in (("dbname", "NAME"), ("user", "USER"), ("password", "PASSWORD"), ("host", "HOST")):
        if db.get(setting):
            params[key] = db[setting]
    if db.get("PORT"):
        params["port"] = str(db["PORT"])
    return make_conninfo("", **params)


def checkpointer_ping() -> None:
    """One round trip through the checkpointer's own connection (pool or SQLite handle); raises if it fails."""
    saver = checkpointer_get()
    db = connections["default"].settings_dict
    if connections["default"].vendor == "postgresql":
        with _pool_get(db).connection(timeout=3) as conn:
            conn.execute("SELECT 1")
        return
    with saver.lock:  # type: ignore[attr-defined]
        saver.conn.execute("SELECT 1")  # type: ignore[attr-defined]


def _sqlite_saver() -> BaseCheckpointSaver[str]:
    from runtime.savers import GatehouseSqliteSaver

    path = settings.GATEHOUSE_CHECKPOINT_SQLITE
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
    wal_enable(conn)
    conn.execute("PRAGMA busy_timeout=30000")
    return GatehouseSqliteSaver(conn, blobs=saver_blobs())


# --- Redis checkpointer (GATEHOUSE_CHECKPOINTER=redis; docs/runtime-controls.md) -------------------

# langgraph-checkpoint-redis stores checkpoints as JSON documents and finds them with
# FT.SEARCH: it needs these Redis modules (MODULE LIST name → what to install).
REDIS_MODULES = {"rejson": "RedisJSON", "search": "RediSearch"}
REDIS_PACKAGE = "langgraph-checkpoint-redis"


class CheckpointerUnavailable(ImproperlyConfigured):
    """The configured checkpointer cannot work here; raised at start-up, naming what is missing."""


def checkpointer_preflight() -> None:
    """Refuse a Redis checkpointer at start-up when Redis lacks its modules or the package is missing.

    Without this, ``langgraph-checkpoint-redis`` would fail at the first
    checkpoint write with ``unknown command 'JSON.SET'`` — mid-run, after the
    run was claimed. No-op for the PostgreSQL and SQLite savers.
    """
    if settings.GATEHOUSE_CHECKPOINTER != "redis":
        return
    import redis

    url = settings.GATEHOUSE_CHECKPOINTER_REDIS_URL
    problems: list[str] = []
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        loaded = {_module_name(m) for m in client.module_list()}
    except redis.RedisError as exc:
        raise CheckpointerUnavailable(
            f"GATEHOUSE_CHECKPOINTER=redis: cannot list the modules of the Redis at {_safe_url(url)} "
            f"(MODULE LIST failed: {exc})"
        ) from None
    finally:
        client.close()
    missing = [label for name, label in REDIS_MODULES.items() if name not in loaded]
    if missing:
        problems.append(
            f"the Redis at {_safe_url(url)} lacks the module(s) {', '.join(missing)} that {REDIS_PACKAGE} needs "
            f"(MODULE LIST shows: {', '.join(sorted(loaded)) or 'no modules'}); use Redis 8 or Redis Stack"
        )
    if importlib.util.find_spec("langgraph.checkpoint.redis") is None:
        problems.append(f"the package {REDIS_PACKAGE} is not installed (pip install {REDIS_PACKAGE})")
    if problems:
        raise CheckpointerUnavailable("GATEHOUSE_CHECKPOINTER=redis: " + "; and ".join(problems))


def _module_name(module: Any) -> str:
    name = module.get(b"name", module.get("name", b"")) if isinstance(module, dict) else b""
    return (name.decode() if isinstance(name, bytes) else str(name)).lower()


def _safe_url(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


def _redis_saver() -> BaseCheckpointSaver[str]:  # pragma: no cover - the package is not installed here
    # The library's own saver, as is: run fencing, blob spilling and schema upcasting are
    # PostgreSQL/SQLite mixins and do not apply (docs/runtime-controls.md says what that costs).
    from langgraph.checkpoint.redis import RedisSaver

    saver = RedisSaver(redis_url=settings.GATEHOUSE_CHECKPOINTER_REDIS_URL)
    saver.setup()
    return saver  # type: ignore[no-any-return]
