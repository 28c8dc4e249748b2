"""PostgreSQL restarted while a run's action is in flight: the run is retried, the thread completes, one payment.

A restart drops every connection on the server, the test process's included,
and each pool must replace them on its own. It would drop every other test
session's connections too, so it is marked ``serial``: ``make test`` runs it
alone, after the parallel part. CI runs alone on its machine, so the shared
server may be restarted here; the command is the one ``scripts/services-up``
uses to start it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.db import connection

from approvals.models import ApprovalTask
from runtime.models import Effect, Run
from tests.conftest import api_decide, loan_input, pending_tasks, scaled, thread_settled, thread_start, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.serial, pytest.mark.usefixtures("live_db")]


def _postgres_restart() -> None:
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        timeout=scaled(120),
        capture_output=True,
    )

    def accepting() -> bool:
        return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q"], timeout=scaled(10)).returncode == 0

    wait_for(accepting, timeout=60, interval=0.2, what="PostgreSQL to accept connections again")


def test_a_postgresql_restart_mid_action_is_retried_and_pays_once(fault_worker, operator, reviewer, bank):
    fault_worker(GATEHOUSE_RETRY_BACKOFF_SECONDS="0.2")
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"], timeout=30)
    key = f"gh:{thread['id']}:disburse"

    with bank.held():  # the server restarts while the call is in flight
        assert api_decide(reviewer, task).status_code == 201
        wait_for(lambda: bank.holding(key) == 1, timeout=15, what="the action's call to reach the bank")
        _postgres_restart()
    # This process's connections died with the server too. Its pool would replace them on
    # checkout, but connections that earlier tests' threads never handed back count against
    # its size; start a fresh pool rather than depend on the whole session's hygiene.
    connection.close()
    connection.close_pool()

    done = thread_settled(reviewer, thread["id"], timeout=60)
    assert done["values"]["status"] == "disbursed"
    assert bank.ledger.executions[key] == 1
    assert Effect.objects.get(key=key).status == "done"
    resume = Run.objects.get(thread_id=thread["id"], kind="resume")
    assert resume.status == "succeeded" and resume.attempts >= 2
    assert ApprovalTask.objects.filter(thread_id=thread["id"]).count() == 1
