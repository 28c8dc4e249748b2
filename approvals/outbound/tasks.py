"""Celery tasks of outbound webhooks: thin wrappers around ``approvals.outbound.sending``.

Sent by name (``approvals.deliver_webhook``, ``approvals.sweep_webhooks``): the
names are what queues and the beat schedule hold, so they stay as they are
wherever the code lives. ``console/celery.py`` autodiscovers this module.
"""

from __future__ import annotations

from celery import shared_task

from approvals.outbound.outbox import DELIVER_WEBHOOK_TASK
from approvals.outbound.sending import deliveries_due, delivery_attempt
from runtime.retry import skipped_while_database_down


# Routed to the outbound queue (CELERY_TASK_ROUTES): a receiver that is slow to answer
# ties up an outbound worker slot, never one that runs graphs.
# A delivery the database was down for stays pending: the sweep below sends it again once overdue.
@shared_task(name=DELIVER_WEBHOOK_TASK, acks_late=True, ignore_result=True)
@skipped_while_database_down
def deliver_webhook(delivery_id: int) -> None:
    delivery_attempt(delivery_id=delivery_id)


@shared_task(name="approvals.sweep_webhooks", ignore_result=True)
@skipped_while_database_down
def sweep_webhooks() -> int:
    """Re-dispatch outbound deliveries whose scheduled retry never ran (broker lost, worker killed)."""
    due = deliveries_due()
    for delivery_id in due:
        deliver_webhook.delay(delivery_id)
    return len(due)
