"""Nothing is lost, nothing runs twice: concurrent decisions, duplicate deliveries, a killed worker."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from django.db import connection, transaction

from approvals.models import ApprovalTask, AuditEvent, Decision
from runtime.models import ACTIVE_RUN_STATUSES, Effect, Run, RunKind
from runtime.runs import ThreadBusy, run_enqueue
from runtime.tasks import execute_run
from tests.conftest import (
    api_decide,
    loan_input,
    pending_tasks,
    scaled,
    thread_settled,
    thread_start,
    wait_for,
)
from tests.factories import thread_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def _in_threads(count: int, fn):
    barrier = threading.Barrier(count)
    results: list[object] = [None] * count

    def call(i: int) -> None:
        try:
            barrier.wait(timeout=scaled(10))
            results[i] = fn(i)
        except Exception as exc:  # collected and asserted by the caller
            results[i] = exc
        finally:
            connection.close()

    workers = [threading.Thread(target=call, args=(i,)) for i in range(count)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=scaled(30))
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
    """Four enqueues race; the worker does not. Were it to claim and finish the winner before a slow
    enqueue got there, that enqueue would rightly be let through (the thread is no longer busy), so the
    worker is paused (SIGSTOP, its whole process group) from before the winner commits until every
    enqueue has answered, and the winner stays queued.

    (A row lock on the thread held from the winner's commit did not hold the worker off: the lock
    waited on the row version the winner replaced, and the worker's claim could take the new version
    first on a busy machine.)"""
    thread = thread_make(graph="loan_approval")
    results: list[object] = [None] * 4
    won, commit = threading.Event(), threading.Event()

    def enqueue(i: int) -> None:
        try:
            with transaction.atomic():
                results[i] = str(run_enqueue(thread=thread, kind=RunKind.RETRY).id)
                won.set()
                assert commit.wait(timeout=scaled(30))  # the losers queue behind this transaction
        except Exception as exc:  # collected and asserted below
            results[i] = exc
        finally:
            connection.close()

    enqueuers = [threading.Thread(target=enqueue, args=(i,)) for i in range(4)]
    for t in enqueuers:
        t.start()
    wait_for(won.is_set, what="one enqueue to win")
    os.killpg(live_worker.proc.pid, signal.SIGSTOP)
    try:
        commit.set()
        wait_for(lambda: all(r is not None for r in results), what="every enqueue to answer")
        # The worker could not take the winner: every loser met it queued.
        assert list(Run.objects.filter(thread=thread).values_list("status", flat=True)) == ["queued"]
    finally:
        os.killpg(live_worker.proc.pid, signal.SIGCONT)
        for t in enqueuers:
            t.join(timeout=scaled(30))

    assert sum(isinstance(r, str) for r in results) == 1, results
    assert sum(isinstance(r, ThreadBusy) for r in results) == 3, results
    assert Run.objects.filter(thread=thread).count() == 1
    # The thread has no checkpoint, so the winner fails harmlessly once the worker gets it.
    wait_for(
        lambda: not Run.objects.filter(thread=thread, status__in=ACTIVE_RUN_STATUSES).exists(),
        what="the worker to finish the winner",
    )


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

    with bank.held():  # the worker dies while the call is in flight
        response = api_decide(reviewer, task)
        assert response.status_code == 201
        wait_for(lambda: bank.holding(key) == 1, what="the action's call to reach the bank")
        worker.kill()
    wait_for(lambda: bank.ledger.executions.get(key) == 1, timeout=10, what="the bank to execute the payment")

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
