"""Transient-error classification and retry backoff (no services needed)."""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg_pool
import pytest
from django.db import utils as db_utils

from runtime.retry import concurrent_change, is_transient, retry_backoff

pytestmark = [pytest.mark.faults]


def _wrapped(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    "exc,transient",
    [
        (psycopg.OperationalError("server closed the connection unexpectedly"), True),
        (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), True),
        (psycopg.errors.DeadlockDetected("deadlock detected"), True),
        (psycopg.errors.IdleInTransactionSessionTimeout("terminating connection due to idle-in-transaction"), True),
        (psycopg_pool.PoolTimeout("couldn't get a connection after 10 sec"), True),
        (db_utils.InterfaceError("connection already closed"), True),
        (_wrapped(db_utils.OperationalError("wrapped"), psycopg.OperationalError("cut")), True),
        (_wrapped(RuntimeError("node failed while saving"), db_utils.OperationalError("cut")), True),
        # The embedded checkpointer's driver, unwrapped: another process held the write lock too long.
        (sqlite3.OperationalError("database is locked"), True),
        (psycopg.errors.UniqueViolation("duplicate key"), False),
        (db_utils.IntegrityError("duplicate key"), False),
        (RuntimeError("downstream system unavailable"), False),
        (ValueError("bad amount"), False),
    ],
)
def test_it_classifies_connection_level_database_errors_as_transient(exc, transient):
    assert is_transient(exc) is transient


def test_backoff_doubles_per_attempt_and_is_capped(settings):
    settings.GATEHOUSE_RETRY_BACKOFF_SECONDS = 0.5
    settings.GATEHOUSE_RETRY_BACKOFF_MAX_SECONDS = 3.0
    assert [retry_backoff(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(
    "exc,concurrent",
    [
        (_wrapped(db_utils.OperationalError("deadlock detected"), psycopg.errors.DeadlockDetected("deadlock")), True),
        (psycopg.errors.SerializationFailure("could not serialize access"), True),
        (_wrapped(db_utils.OperationalError("cut"), psycopg.OperationalError("server closed the connection")), False),
        (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), False),
        (psycopg_pool.PoolTimeout("couldn't get a connection after 10 sec"), False),
    ],
)
def test_a_deadlock_is_a_concurrent_change_not_an_unreachable_database(exc, concurrent):
    """The APIs and the console answer a transaction PostgreSQL rolled back for a concurrent one with a 409
    to send again, not the 503 "the database cannot be reached" (runtime.retry.concurrent_change)."""
    assert concurrent_change(exc) is concurrent
