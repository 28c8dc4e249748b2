"""The embedded broker (console.broker) under several processes: what kombu's SQLAlchemy transport leaves open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from kombu import Connection
from sqlalchemy import event

pytestmark = pytest.mark.embedded


def test_a_queue_declared_by_another_process_meanwhile_is_used_not_a_crash(tmp_path: Path) -> None:
    """Two workers starting at once both find no queue row and both insert one: the loser's insert
    breaks the name's unique constraint (a worker crashed with it in the soak test). The race is
    forced here: the other process's row lands between this channel's lookup and its insert."""
    path = tmp_path / "broker.sqlite3"
    with Connection(f"sqlite:///{path}", transport="console.broker:Transport") as conn:
        channel = conn.default_channel
        channel._get_or_create("warm-up")  # the tables exist, as after any earlier start
        raced = []

        def other_process_declares(session, *_):
            if not raced:
                with sqlite3.connect(path) as other:
                    other.execute("INSERT INTO kombu_queue (name) VALUES ('celery-race')")
                raced.append(True)

        event.listen(channel.session, "before_flush", other_process_declares)
        queue = channel._get_or_create("celery-race")
        assert raced, "the other process's declaration ran between lookup and insert"
        with sqlite3.connect(path) as db:
            rows = db.execute("SELECT id FROM kombu_queue WHERE name = 'celery-race'").fetchall()
        assert [queue.id] == [row[0] for row in rows]  # theirs, and only one
        channel._put("celery-race", {"body": "after the race"})
        assert channel._get("celery-race")["body"] == "after the race"
