"""Celery tasks of the approvals domain: thin wrappers around services."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from approvals.audit import audit_anchor
from approvals.bulk import BULK_RUN_TASK
from approvals.bulk import bulk_run as bulk_decide_run
from approvals.deadlines import deadlines_sweep
from approvals.outbound import DELIVER_WEBHOOK_TASK, deliveries_due, delivery_attempt


@shared_task(name="approvals.anchor_audit", ignore_result=True)
def anchor_audit() -> str:
    return ", ".join(f"{a.chain}:{a.head_hash[:12]}" for a in audit_anchor())


# Routed to the outbound queue (CELERY_TASK_ROUTES): a receiver that is slow to answer
# ties up an outbound worker slot, never one that runs graphs.
@shared_task(name=DELIVER_WEBHOOK_TASK, acks_late=True, ignore_result=True)
def deliver_webhook(delivery_id: int) -> None:
    delivery_attempt(delivery_id=delivery_id)


@shared_task(name="approvals.sweep_webhooks", ignore_result=True)
def sweep_webhooks() -> int:
    """Re-dispatch outbound deliveries whose scheduled retry never ran (broker lost, worker killed)."""
    due = deliveries_due()
    for delivery_id in due:
        deliver_webhook.delay(delivery_id)
    return len(due)


# deadlines: reminders, escalations and timeout outcomes (approvals.deadlines); beat runs it.
@shared_task(name="approvals.sweep_deadlines", ignore_result=True)
def sweep_deadlines() -> dict[str, int]:
    return asdict(deadlines_sweep())


# Bulk actions (issue 14): the service decides each task through task_decide; this only runs it.
@shared_task(name=BULK_RUN_TASK, acks_late=True, ignore_result=True)
def bulk_run(bulk_id: str) -> None:
    bulk_decide_run(bulk_id=bulk_id)
