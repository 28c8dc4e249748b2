"""A worker paused in the middle of a transaction (SIGSTOP, a long GC, a VM migrated) past PostgreSQL's
``idle_in_transaction_session_timeout`` finds its session ended. That is a cut connection, and the run
must be retried, not failed: classed as an ``InternalError``, it failed a loan the bank had paid for good,
and left its store write unaudited (found by an outside chaos run)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction

from runtime.retry import is_transient
from tests.conftest import wait_for

pytestmark = pytest.mark.usefixtures("live_db")


def test_a_session_ended_for_idling_in_a_transaction_is_a_transient_error():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    try:
        with pytest.raises(DatabaseError) as raised, transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL idle_in_transaction_session_timeout = '50ms'")
                cursor.execute("SELECT 1")
            # Idle in the transaction, as a paused worker is, until the server has ended the session.
            db = connection.settings_dict
            with psycopg.connect(
                dbname=db["NAME"], user=db["USER"], host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432,
                autocommit=True,
            ) as watcher:  # fmt: skip

                def ended() -> bool:
                    row = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
                    return row is not None and row[0] == 0

                wait_for(ended, timeout=30, what="PostgreSQL to end the idle session")
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        assert is_transient(raised.value), repr(raised.value)
    finally:
        connection.close()
