"""WAL on an embedded SQLite file, when two processes open a new file at the same moment.

Switching a new file to WAL takes an exclusive lock, and SQLite answers a second connection
switching it at that moment "database is locked" at once, without waiting on its busy timeout.
Embedded mode's web process and worker open some files lazily and together (the run log of a
fresh var dir: a stream's reader and its run's publisher; the broker's file at start-up), so the
loser's first use failed. A file is switched once (WAL persists in it): retry it, as the busy
timeout would have waited.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

BUSY_SECONDS = 30.0  # as the connections' own busy timeout


def wal_enable(conn: Any, *, seconds: float = BUSY_SECONDS) -> None:
    """``PRAGMA journal_mode=WAL`` on ``conn`` (a sqlite3 connection or cursor), retried while another
    connection is switching the same file."""
    deadline = time.monotonic() + seconds
    pause = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
