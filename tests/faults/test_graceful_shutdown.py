"""Graceful shutdown: SIGTERM lets an in-flight run finish, or hands it back within a bounded time.

The action's call to the bank is held in flight (``bank.held()``) while the test
sends SIGTERM, so the signal always lands mid-run, however busy the machine is;
the grace periods scale with the suite's time factor.
"""

from __future__ import annotations

import pytest

from runtime.models import Run
from tests.conftest import api_decide, loan_input, pending_tasks, scaled, thread_settled, thread_start, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def _decide_with_the_bank_call_held(reviewer, operator, bank) -> tuple[dict, str]:
    """Approve a loan and wait until the disbursement's call is held at the bank (call inside ``bank.held()``)."""
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"], timeout=30)
    key = f"gh:{thread['id']}:disburse"
    response = api_decide(reviewer, task)
    assert response.status_code == 201, response.content
    wait_for(lambda: bank.holding(key) == 1, timeout=15, what="the action's call to reach the bank")
    return thread, key


def test_sigterm_lets_the_in_flight_run_finish_before_the_worker_exits(fault_worker, operator, reviewer, bank):
    grace = scaled(10.0)
    worker = fault_worker(GATEHOUSE_SHUTDOWN_GRACE_SECONDS=str(grace))
    with bank.held():
        thread, key = _decide_with_the_bank_call_held(reviewer, operator, bank)
        worker.terminate()
        wait_for(lambda: worker.logged("Warm shutdown"), timeout=10, what="the worker to begin its warm shutdown")
    # Released: the call completes while the worker is shutting down.
    took = worker.wait_exit(timeout=grace + scaled(5))

    assert took < grace  # it left as soon as the run was done, not at the deadline
    resume = Run.objects.get(thread_id=thread["id"], kind="resume")
    assert resume.status == "succeeded" and resume.attempts == 1  # finished by the worker that was stopping
    done = thread_settled(reviewer, thread["id"], timeout=5)
    assert done["values"]["status"] == "disbursed"
    assert bank.ledger.executions[key] == 1


def test_sigterm_hands_a_run_longer_than_the_grace_back_and_another_worker_completes_it_once(
    fault_worker, operator, reviewer, bank
):
    grace = scaled(1.5)
    env = {"GATEHOUSE_SHUTDOWN_GRACE_SECONDS": str(grace), "GATEHOUSE_RETRY_BACKOFF_SECONDS": "0.2"}
    worker = fault_worker(**env)
    with bank.held():  # the call outlasts the grace: it is held until the worker is gone
        thread, key = _decide_with_the_bank_call_held(reviewer, operator, bank)
        worker.terminate()
        took = worker.wait_exit(timeout=grace + scaled(5))
        resume = Run.objects.get(thread_id=thread["id"], kind="resume")
        assert resume.status == "running" and resume.lease_owner == ""  # handed back, not left to lapse
    successor = fault_worker(**env)
    done = thread_settled(reviewer, thread["id"], timeout=30)

    assert took < grace + scaled(3)
    assert done["values"]["status"] == "disbursed"
    assert bank.ledger.executions[key] == 1  # the second attempt replayed the same idempotency key
    resume.refresh_from_db()
    assert resume.status == "succeeded" and resume.attempts == 2
    assert successor.alive
