"""Poison runs: retried a bounded number of times with backoff, then dead-lettered for an operator."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.models import Run
from tests.conftest import thread_settled, thread_start, wait_for
from tests.faults.conftest import FaultWorker

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.usefixtures("live_db")]

MAX_ATTEMPTS = 3
POISON_ENV = {"GATEHOUSE_MAX_RUN_ATTEMPTS": str(MAX_ATTEMPTS), "GATEHOUSE_RETRY_BACKOFF_SECONDS": "0.2"}


def _until_run_settles(worker: FaultWorker, run_id: str, *, timeout: float) -> Run:
    """Keep a worker up (restarting it whenever the poison kills it) until the run is finished."""

    def settled() -> Run | None:
        run = Run.objects.get(pk=run_id)
        if run.status in ("failed", "succeeded", "interrupted"):
            return run
        if not worker.alive:
            worker.restart()
        return None

    return wait_for(settled, timeout=timeout, interval=0.1, what=f"run {run_id} to finish")


def test_a_run_that_kills_every_worker_is_dead_lettered_after_max_attempts_and_retried_by_hand(
    fault_worker, operator, tmp_path
):
    worker = fault_worker(**POISON_ENV)
    counter = tmp_path / "attempts"
    thread = thread_start(operator, "faulty", {"mode": "kill", "counter": str(counter)})
    run_id = thread["run_id"]

    run = _until_run_settles(worker, str(run_id), timeout=90)

    assert run.status == "failed"
    assert run.attempts == MAX_ATTEMPTS  # bounded: never a fourth claim
    assert len(counter.read_text()) == MAX_ATTEMPTS  # and the node really ran (and killed) each time
    assert f"gave up after {MAX_ATTEMPTS} attempts" in run.error
    # Visible to operators ...
    runs = operator.client.get(f"/api/threads/{thread['id']}/runs").json()
    assert runs[0]["status"] == "failed" and "gave up" in runs[0]["error"]
    assert runs[0]["attempts"] == MAX_ATTEMPTS
    assert operator.client.get(f"/api/threads/{thread['id']}").json()["status"] == "failed"

    # ... and retryable by hand once the cause is fixed.
    Path(f"{counter}.healed").touch()
    if not worker.alive:
        worker.restart()
    response = operator.client.post(f"/api/threads/{thread['id']}/retry")
    assert response.status_code == 202, response.content
    done = thread_settled(operator, thread["id"], timeout=30)
    assert done["status"] == "completed" and done["values"]["done"] is True


def test_a_transient_database_error_in_a_node_is_retried_with_backoff_and_the_thread_completes(
    fault_worker, operator, tmp_path
):
    fault_worker(**POISON_ENV)
    counter = tmp_path / "attempts"
    thread = thread_start(operator, "faulty", {"mode": "db", "fail_times": 2, "counter": str(counter)})

    done = thread_settled(operator, thread["id"], timeout=30)

    assert done["status"] == "completed", done
    assert done["values"]["attempts_seen"] == 3
    run = Run.objects.get(thread_id=thread["id"])
    assert run.status == "succeeded" and run.attempts == 3
    assert "transient (attempt 2)" in run.error  # why it was retried stays visible on the run


def test_a_run_that_keeps_failing_transiently_is_dead_lettered_with_its_error(fault_worker, operator, tmp_path):
    fault_worker(**POISON_ENV)
    thread = thread_start(operator, "faulty", {"mode": "db", "counter": str(tmp_path / "attempts")})

    done = thread_settled(operator, thread["id"], timeout=30)

    assert done["status"] == "failed"
    [run] = operator.client.get(f"/api/threads/{thread['id']}/runs").json()
    assert run["status"] == "failed" and run["attempts"] == MAX_ATTEMPTS
    assert f"gave up after {MAX_ATTEMPTS} attempts; last error: transient" in run["error"]
    assert "OperationalError" in run["error"]
    assert len((tmp_path / "attempts").read_text()) == MAX_ATTEMPTS


def test_an_exception_from_the_graphs_own_code_fails_the_run_at_once(fault_worker, operator):
    fault_worker(**POISON_ENV)
    thread = thread_start(operator, "flaky", {"subject": "no retry"})

    done = thread_settled(operator, thread["id"], timeout=20)

    assert done["status"] == "failed"
    run = Run.objects.get(thread_id=thread["id"])
    assert run.status == "failed" and run.attempts == 1
    assert "downstream system unavailable" in run.error
