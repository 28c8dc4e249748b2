"""Celery tasks of the approvals domain: thin wrappers around services.

Outbound webhook delivery has its own: ``approvals/outbound/tasks.py``.
"""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from approvals.audit import audit_anchor
from approvals.bulk import BULK_RUN_TASK
from approvals.bulk import bulk_run as bulk_decide_run
from approvals.deadlines import deadlines_sweep
from runtime.retry import skipped_while_database_down


@shared_task(name="approvals.anchor_audit", ignore_result=True)
@skipped_while_database_down
def anchor_audit() -> str:
    return ", ".join(f"{a.chain}:{a.head_hash[:12]}" for a in audit_anchor())


# deadlines: reminders, escalations and timeout outcomes (approvals.deadlines); beat runs it.
@shared_task(name="approvals.sweep_deadlines", ignore_result=True)
@skipped_while_database_down
def sweep_deadlines() -> dict[str, int]:
    return asdict(deadlines_sweep())


# Bulk actions (issue 14): the service decides each task through task_decide; this only runs it.
@shared_task(name=BULK_RUN_TASK, acks_late=True, ignore_result=True)
def bulk_run(bulk_id: str) -> None:
    bulk_decide_run(bulk_id=bulk_id)
