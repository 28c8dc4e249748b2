"""Nothing is lost, nothing runs twice: concurrent decisions, duplicate deliveries, a killed worker."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from approvals.models import ApprovalTask, AuditEvent, Decision
from runtime.models import Effect, Run, RunKind, Thread
from runtime.runs import ThreadBusy, run_enqueue
from runtime.tasks import execute_run
from tests.conftest import api_decide, loan_input, pending_tasks, thread_settled, thread_start, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def _in_threads(count: int, fn):
    barrier = threading.Barrier(count)
    results: list[object] = [None] * count

    def call(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = fn(i)
        except Exception as exc:  # collected and asserted by the caller
            results[i] = exc
        finally:
            connection.close()

    workers = [threading.Thread(target=call, args=(i,)) for i in range(count)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    return results


def test_two_simultaneous_decisions_on_one_task_resume_once(live_worker, operator, personas, bank):
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(personas["reviewer"], thread["id"])
    deciders = [personas["reviewer"], personas["reviewer2"]]

    results = _in_threads(2, lambda i: api_decide(deciders[i], task).status_code)
    assert sorted(results) == [201, 409]
    done = thread_settled(operator, thread["id"])
    assert done["values"]["status"] == "disbursed"
    assert Decision.objects.filter(task_id=task["id"]).count() == 1
    assert Run.objects.filter(thread_id=thread["id"], kind="resume").count() == 1
    assert bank.ledger.executions[f"gh:{thread['id']}:disburse"] == 1


def test_two_resumes_of_one_thread_at_once_only_one_is_queued(live_worker, operator):
    thread = Thread.objects.create(graph="loan_approval")

    def enqueue(_: int) -> str:
        with transaction.atomic():
            return str(run_enqueue(thread=thread, kind=RunKind.RETRY).id)

    # The thread has no checkpoint, so whichever run wins fails harmlessly;
    # what matters is that the database let only one through.
    results = _in_threads(4, enqueue)
    assert sum(isinstance(r, str) for r in results) == 1, results
    assert sum(isinstance(r, ThreadBusy) for r in results) == 3, results
    assert Run.objects.filter(thread=thread).count() == 1


def test_a_duplicated_delivery_of_a_finished_run_changes_nothing(live_worker, operator, reviewer, bank):
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"])
    api_decide(reviewer, task)
    thread_settled(reviewer, thread["id"])
    events_before = AuditEvent.objects.filter(thread_id=thread["id"]).count()

    for run in Run.objects.filter(thread_id=thread["id"]):
        execute_run.delay(str(run.id))  # what a broker redelivery looks like
    # A later start on another thread proves the worker drained the duplicates first.
    probe = thread_start(operator, "loan_approval", loan_input())
    pending_tasks(reviewer, probe["id"])

    assert AuditEvent.objects.filter(thread_id=thread["id"]).count() == events_before
    assert ApprovalTask.objects.filter(thread_id=thread["id"]).count() == 1
    assert bank.ledger.executions[f"gh:{thread['id']}:disburse"] == 1


def test_a_worker_killed_mid_action_is_replaced_and_the_effect_happens_once(worker, operator, reviewer, bank):
    if not worker.alive:
        worker.start()
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"])
    key = f"gh:{thread['id']}:disburse"

    bank.latency_ms = 2500  # the bank is slow: the worker will die while the call is in flight
    try:
        response = api_decide(reviewer, task)
        assert response.status_code == 201
        wait_for(lambda: bank.ledger.received.get(key) == 1, what="the action's call to reach the bank")
        worker.kill()
        wait_for(lambda: bank.ledger.executions.get(key) == 1, timeout=10, what="the bank to execute the payment")
    finally:
        bank.latency_ms = 0

    resume = Run.objects.get(thread_id=thread["id"], kind="resume")
    assert resume.status == "running"  # its worker is gone; its lease will lapse
    worker.start()
    done = thread_settled(reviewer, thread["id"], timeout=30)

    assert done["values"]["status"] == "disbursed"
    assert bank.ledger.executions[key] == 1  # the retry replayed the same idempotency key
    assert bank.ledger.received[key] == 2
    effect = Effect.objects.get(key=key)
    assert effect.status == "done" and effect.calls == 2
    resume.refresh_from_db()
    assert resume.status == "succeeded" and resume.attempts == 2
    assert ApprovalTask.objects.filter(thread_id=thread["id"]).count() == 1
    assert not Run.objects.filter(thread_id=thread["id"], status__in=["queued", "running"]).exists()
    claims = AuditEvent.objects.filter(thread_id=thread["id"], action="run.claimed", subject_id=str(resume.id))
    assert claims.count() == 2
