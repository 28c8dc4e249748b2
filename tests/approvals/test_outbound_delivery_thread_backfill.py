"""Migration 0033 gives deliveries written before it their thread, from their payload."""

from __future__ import annotations

import importlib
import uuid

import pytest
from django.apps import apps as django_apps

from approvals.models import OutboundDelivery, WebhookSubscription
from tests.factories import task_make

pytestmark = pytest.mark.django_db

threads_backfill = importlib.import_module("approvals.migrations.0033_outbound_delivery_thread").threads_backfill


def test_the_migration_finds_each_deliverys_thread_in_its_payload():
    subscription = WebhookSubscription.objects.create(url="http://127.0.0.1:9/x", graph="*", active=False, secret="s")
    thread = uuid.uuid4()
    task = task_make()

    def delivery(payload: object) -> OutboundDelivery:
        return OutboundDelivery.objects.create(
            subscription=subscription, event_id=f"evt_{uuid.uuid4().hex}", event_type="x", payload=payload
        )

    event = delivery({"type": "task.decided", "data": {"thread_id": str(thread)}})
    callback = delivery({"type": "external.result", "task_id": str(task.pk)})  # an external task's result
    unknown = delivery({"type": "x", "data": {"thread_id": "not-a-uuid"}, "task_id": "nor-this"})
    threads_backfill(django_apps, None)
    assert OutboundDelivery.objects.get(pk=event.pk).thread_id == thread
    assert OutboundDelivery.objects.get(pk=callback.pk).thread_id == task.thread_id
    assert OutboundDelivery.objects.get(pk=unknown.pk).thread_id is None
