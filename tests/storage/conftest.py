"""Fixtures of the storage tests."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.checkpointer import checkpointer_get, saver_blobs
from runtime.savers import GatehouseSqliteSaver


@pytest.fixture(params=["sqlite", "postgres"])
def saver(request: pytest.FixtureRequest, live_db: None) -> Iterator[Any]:
    """Gatehouse's saver on an in-memory SQLite database, and the process's PostgreSQL one."""
    if request.param == "sqlite":
        yield GatehouseSqliteSaver(sqlite3.connect(":memory:", check_same_thread=False), blobs=saver_blobs())
    else:
        yield checkpointer_get()
