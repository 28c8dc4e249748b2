"""The process's checkpoint savers: the libraries' own, under Gatehouse's mixins (``runtime.checkpointer``
builds one, with the blob store it spills to; importing this module loads LangGraph)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import connections
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from runtime.as_saved import ReplaySourceAsSaved
from runtime.blobs import BlobSpillingSaver, BlobStore
from runtime.fencing import FencedPostgresSaver, FencedSqliteSaver, saver_connection
from runtime.upcasters import SchemaVersionedSaver


class PooledPostgresSaver:
    """Mixin for ``PostgresSaver`` on a pool: each operation on a connection of its own, without the saver's lock.

    The library's ``_cursor`` holds one lock per saver (per process) around
    every operation, pool or not, so the worker's threads took turns for
    their checkpoint reads and writes, round trips included. With a pool the
    lock protects nothing (see ``runtime.fencing.saver_connection``).
    """

    @contextlib.contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
        from psycopg.rows import dict_row

        if self.pipe is not None:  # type: ignore[attr-defined]
            with super()._cursor(pipeline=pipeline) as cur:  # type: ignore[misc]
                yield cur
            return
        with saver_connection(self) as conn:
            if not pipeline:
                with conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
            elif self.supports_pipeline:  # type: ignore[attr-defined]
                with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
            else:
                with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        # The library yields while it holds its connection: whoever iterates would hold it
        # meanwhile, and a nested checkout (a blob's bytes, a subgraph's state) from as many
        # threads as the pool has connections would wait on the pool forever. Read, give the
        # connection back, then yield.
        yield from [*super().list(config, **kwargs)]  # type: ignore[misc]


# The fence mixin comes first: its put/put_writes mark the write as fenced for
# the library's cursor, underneath the blob spilling and schema stamping.
class GatehousePostgresSaver(
    ReplaySourceAsSaved,
    FencedPostgresSaver,
    SchemaVersionedSaver,
    BlobSpillingSaver,
    PooledPostgresSaver,
    PostgresSaver,
):
    def __init__(self, conn: Any, *, blobs: BlobStore, **kwargs: Any) -> None:
        super().__init__(conn, **kwargs)
        self._blobs_init(blobs, settings.GATEHOUSE_BLOB_THRESHOLD_BYTES)


class GatehouseSqliteSaver(
    ReplaySourceAsSaved, FencedSqliteSaver, SchemaVersionedSaver, BlobSpillingSaver, SqliteSaver
):
    def __init__(self, conn: sqlite3.Connection, *, blobs: BlobStore, **kwargs: Any) -> None:
        super().__init__(conn, **kwargs)
        db = connections["default"].settings_dict
        if db["ENGINE"] == "django.db.backends.sqlite3":
            self.app_db_path = str(db["NAME"])
        self._blobs_init(blobs, settings.GATEHOUSE_BLOB_THRESHOLD_BYTES)
