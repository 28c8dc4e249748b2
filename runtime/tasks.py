"""Celery tasks: thin wrappers that take ids and call the runtime."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import connection

from runtime.executor import run_execute
from runtime.retention import checkpoints_prune
from runtime.retry import is_transient, retry_backoff, skipped_while_database_down
from runtime.runs import EXECUTE_RUN_TASK, runs_sweep

# Transient errors that escape run_execute happened before the run was claimed
# (a claimed run is handed back by the executor itself). A few quick retries
# cover a database blip; the sweeper covers anything longer.
CLAIM_RETRIES = 3


@shared_task(bind=True, name=EXECUTE_RUN_TASK, acks_late=True, reject_on_worker_lost=True)
def execute_run(self: Any, run_id: str) -> None:
    try:
        run_execute(run_id=run_id)
    except Exception as exc:
        if not is_transient(exc) or self.request.retries >= CLAIM_RETRIES:
            raise
        connection.close()
        raise self.retry(exc=exc, countdown=retry_backoff(self.request.retries + 1), max_retries=CLAIM_RETRIES) from exc


@shared_task(name="runtime.sweep_runs", acks_late=True, ignore_result=True)
@skipped_while_database_down
def sweep_runs() -> int:
    return runs_sweep()


# Checkpoint retention (beat: ``prune-checkpoints`` in console/settings.py).
@shared_task(name="runtime.prune_checkpoints", acks_late=True, ignore_result=True)
@skipped_while_database_down
def prune_checkpoints(graph: str | None = None) -> dict[str, int]:
    report = checkpoints_prune(graph=graph)
    return {
        "threads": report.threads,
        "checkpoints_deleted": report.checkpoints_deleted,
        "blobs_deleted": report.blobs_deleted,
        "errors": len(report.errors),
    }
