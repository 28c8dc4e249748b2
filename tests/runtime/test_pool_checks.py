"""Django's connection pool checks a connection on checkout only when it may be dead
(runtime.postgresql, runtime.pool_checks): a request or a run no longer pays a round trip for the
check, and a connection the server killed is still replaced, not handed out."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from django.db import connection

from runtime import pool_checks
from tests.conftest import scaled, wait_for
from tests.runtime.test_checkpointers import _Executes

pytestmark = pytest.mark.usefixtures("live_db")


def _checkout_pid() -> int:
    """Give this thread's connection back to the pool and take one out again, as a request does."""
    connection.close()
    connection.ensure_connection()
    return int(connection.connection.info.backend_pid)


def test_the_settings_use_the_backend_with_the_doubtful_check():
    assert connection.settings_dict["ENGINE"] == "runtime.postgresql"
    assert connection.vendor == "postgresql"
    assert connection.pool is not None and connection.pool._check is pool_checks.connection_check_if_doubtful


def test_django_checks_out_a_just_returned_connection_without_a_round_trip(monkeypatch):
    used = set()
    for _ in range(2 * connection.pool.max_size):  # each connection handed out once (checked then)
        _checkout_pid()
        used.add(id(connection.connection))
    executes = _Executes(monkeypatch)  # per connection: other threads send statements on their own
    again = 0
    for _ in range(connection.pool.max_size):
        _checkout_pid()
        if id(connection.connection) in used:  # not one the pool opened meanwhile (rightly checked)
            again += 1
            assert executes.sent_on(connection.connection) == 0
    assert again > 0  # the loop checked at least one connection handed out before
    monkeypatch.setattr(pool_checks, "POOL_CHECK_IDLE_SECONDS", 0.0)  # last handed out too long ago
    start = len(executes.on)
    _checkout_pid()
    checked = executes.on[start:].count(id(connection.connection))
    assert checked == 1 if id(connection.connection) in used else checked >= 1


def test_django_replaces_a_pooled_connection_the_server_killed():
    import psycopg

    from runtime.checkpointer import checkpointer_conninfo

    victim = _checkout_pid()
    connection.close()  # back in the pool, idle, then killed there
    with psycopg.connect(checkpointer_conninfo(connection.settings_dict), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [victim])

        def gone() -> bool:
            row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [victim]).fetchone()
            return bool(row and row[0] == 0)

        wait_for(gone, timeout=scaled(10), what="the backend to exit")
    for _ in range(connection.pool.max_size + 1):  # whichever connection comes out, it works
        assert _checkout_pid() != victim
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")


def _in_a_forked_child(work: Callable[[], str]) -> str:
    """What ``work()`` returns in a forked child of this process (as a prefork pool process is made)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.write(write, str(work()).encode())
        except BaseException as exc:  # reported to the parent
            os.write(write, f"error: {exc!r}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as out:
        return out.read()


def test_a_forked_child_opens_its_own_pool_and_leaves_its_parent_s_sessions_alone():
    parent_pid = _checkout_pid()  # this process's pool, with its sessions, before the fork
    parent_pool = connection.pool

    def child() -> str:
        inherited = connection.pool is parent_pool
        # What Celery's fixup does in a new pool process: the inherited descriptor dropped, the pool closed.
        os.close(connection.connection.fileno())
        connection.connection = None
        connection.close_pool()
        connection.ensure_connection()
        return f"{inherited} {connection.connection.info.backend_pid}"

    answer = _in_a_forked_child(child)
    assert not answer.startswith("error"), answer
    inherited, child_pid = answer.split()
    assert inherited == "False"  # forgotten at the fork: the parent's pool is not the child's
    assert int(child_pid) != parent_pid
    # Closing "its" pool in the child ended none of the parent's sessions.
    for _ in range(connection.pool.max_size):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
        connection.close()
    assert connection.pool is parent_pool
