"""A prefork worker keeps its database sessions from task to task, as a threads worker does.

Celery 5.7's Django fixup closed Django's connection pool around every task in a
prefork pool process: each run opened about three new PostgreSQL sessions, and a
prefork worker spent more CPU connecting than running graphs (console/worker_fixup.py).
"""

from __future__ import annotations

import pytest
from django.db import connection

from tests.conftest import (
    WorkerProcess,
    api_decide,
    loan_input,
    pending_tasks,
    thread_settled,
    thread_start,
    worker_env,
)

pytestmark = [pytest.mark.usefixtures("live_db"), pytest.mark.integration, pytest.mark.slow]


def _sessions_opened() -> int:
    """Sessions ever opened to this test database (counted by PostgreSQL, whoever opened them)."""
    with connection.cursor() as cursor:  # autocommit (live_db): a fresh statistics snapshot each time
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def _thread_through(operator, reviewer) -> None:
    thread = thread_start(operator, "loan_approval", loan_input())
    api_decide(reviewer, pending_tasks(reviewer, thread["id"])[0])
    assert thread_settled(operator, thread["id"])["status"] == "completed"


def test_a_prefork_worker_opens_no_sessions_per_run(worker, bank, operator, reviewer, tmp_path):
    worker.stop()  # the session worker would take the runs; later tests restart it (live_worker)
    # One pool process, so the warm-up below opens every pool it will use.
    prefork = WorkerProcess(worker_env(bank), tmp_path, pool="prefork", concurrency=1)
    prefork.start()
    try:
        _thread_through(operator, reviewer)  # the pool process opens its pools
        before = _sessions_opened()
        for _ in range(5):  # ten runs: a session per run, as the fixup's pool close made, would be ten or more
            _thread_through(operator, reviewer)
        opened = _sessions_opened() - before
    finally:
        prefork.stop()
    # Not zero: any process's pool may replace a connection now and then (0-1 seen on a loaded machine).
    assert opened <= 5, f"{opened} sessions opened for 10 runs; worker log:\n{prefork.log_tail()}"
