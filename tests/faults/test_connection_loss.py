"""Database connection loss: the worker's PostgreSQL connections killed mid-run lead to a retry, not a broken thread.

Only the worker's connections are cut: it runs with its own libpq
application_name (PGAPPNAME, honoured by Django's connections and the
checkpoint pool alike), so the test process keeps its own.

PostgreSQL itself is not restarted here: the server is shared by every test
session on the machine, and restarting it would break theirs.
"""

from __future__ import annotations

import pytest
from django.db import connection

from approvals.models import ApprovalTask
from runtime.models import Effect, Run
from tests.conftest import api_decide, loan_input, pending_tasks, thread_settled, thread_start, wait_for
from tests.faults.conftest import app_name

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.usefixtures("live_db")]

ENV = {"GATEHOUSE_RETRY_BACKOFF_SECONDS": "0.2"}


def _terminate(application_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = %s",
            [application_name],
        )
        return int(cursor.fetchone()[0])


def _connections(application_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [application_name])
        return int(cursor.fetchone()[0])


def test_connections_killed_during_a_slow_action_lead_to_a_retry_and_one_effect(fault_worker, operator, reviewer, bank):
    name = app_name()
    fault_worker(PGAPPNAME=name, **ENV)
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"], timeout=30)
    key = f"gh:{thread['id']}:disburse"

    with bank.held():  # the connections are cut while the call is in flight, however long that takes here
        response = api_decide(reviewer, task)
        assert response.status_code == 201, response.content
        wait_for(lambda: bank.holding(key) == 1, timeout=15, what="the action's call to reach the bank")
        killed = _terminate(name)
        assert killed >= 2  # Django's connection(s) and the checkpoint pool's
    # Released: the bank answers a worker whose connections are gone.
    done = thread_settled(reviewer, thread["id"], timeout=40)

    assert done["status"] == "completed", done
    assert done["values"]["status"] == "disbursed"
    assert bank.ledger.executions[key] == 1  # the retry replayed the same idempotency key
    effect = Effect.objects.get(key=key)
    assert effect.status == "done"
    resume = Run.objects.get(thread_id=thread["id"], kind="resume")
    assert resume.status == "succeeded" and resume.attempts == 2
    assert "transient (attempt 1)" in resume.error
    assert ApprovalTask.objects.filter(thread_id=thread["id"]).count() == 1
    # Nothing corrupted: the history reads back whole, newest first, ending at the action.
    history = operator.client.get(f"/api/threads/{thread['id']}/history").json()
    assert history and history[0]["values"]["status"] == "disbursed"


def test_connections_killed_while_the_worker_is_idle_are_replaced_before_the_next_run(fault_worker, operator, reviewer):
    name = app_name()
    fault_worker(PGAPPNAME=name, **ENV)
    warm = thread_start(operator, "loan_approval", loan_input())
    pending_tasks(reviewer, warm["id"], timeout=30)  # the worker has opened its pools
    wait_for(lambda: _connections(name) > 0, timeout=10, what="worker connections")

    assert _terminate(name) >= 1
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"], timeout=30)
    api_decide(reviewer, task)
    done = thread_settled(reviewer, thread["id"], timeout=30)

    assert done["values"]["status"] == "disbursed"
    assert not Run.objects.filter(thread_id=thread["id"]).exclude(status="succeeded").exclude(kind="start").exists()
    assert Run.objects.get(thread_id=thread["id"], kind="start").attempts == 1  # health-checked, not retried
