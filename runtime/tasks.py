"""Celery tasks: thin wrappers that take ids and call the runtime."""

from __future__ import annotations

from celery import shared_task

from runtime.executor import run_execute
from runtime.runs import runs_sweep


@shared_task(name="runtime.execute_run", acks_late=True, reject_on_worker_lost=True)
def execute_run(run_id: str) -> None:
    run_execute(run_id=run_id)


@shared_task(name="runtime.sweep_runs", acks_late=True, ignore_result=True)
def sweep_runs() -> int:
    return runs_sweep()
