"""Embedded SQLite files switched to WAL by processes that open a new file at the same moment
(runtime.sqlite_wal): every opener gets WAL, and one that cannot get it within its time says so."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from runtime.sqlite_wal import wal_enable
from tests.conftest import scaled


def test_connections_switching_a_new_file_together_all_get_wal(tmp_path: Path):
    failures: list[str] = []
    for attempt in range(150):
        path = tmp_path / f"new-{attempt}.sqlite3"
        ready = threading.Barrier(4)

        def open_wal(path: Path = path, ready: threading.Barrier = ready) -> None:
            conn = sqlite3.connect(str(path), timeout=scaled(30), check_same_thread=False)
            ready.wait()
            try:
                wal_enable(conn)
                conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
            except sqlite3.Error as exc:
                failures.append(repr(exc))
            finally:
                conn.close()

        openers = [threading.Thread(target=open_wal) for _ in range(4)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join()
        assert sqlite3.connect(str(path)).execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert failures == []


def test_a_file_locked_longer_than_the_wait_is_an_error_not_a_hang(tmp_path: Path):
    path = str(tmp_path / "held.sqlite3")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")  # a rollback-journal file, locked: the switch cannot happen
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            wal_enable(sqlite3.connect(path, timeout=0.05), seconds=0.2)
    finally:
        holder.execute("ROLLBACK")
    conn = sqlite3.connect(path)
    wal_enable(conn)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
