"""Outbound deliveries keep their thread and the audit event that queued them.

Without them a decision's deliveries could only be found by reading every payload: the API and the
console could not filter by thread. Rows written before are given their thread from their payload (an
event's ``data.thread_id``; an external task's result names its task, whose thread it is).
"""

import uuid
from typing import Any

from django.db import migrations, models


def _thread_of(payload: Any) -> uuid.UUID | str | None:
    """The event's thread, or the task id an external task's result names (its thread is looked up)."""
    if not isinstance(payload, dict):
        return None
    data = payload.get("data")
    raw = data.get("thread_id") if isinstance(data, dict) else None
    if raw is None:
        return str(payload["task_id"]) if payload.get("task_id") else None
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        return None


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def threads_backfill(apps: Any, schema_editor: Any) -> None:
    delivery_model = apps.get_model("approvals", "OutboundDelivery")
    task_model = apps.get_model("approvals", "ApprovalTask")
    found: list[tuple[Any, uuid.UUID | str]] = []
    for delivery in delivery_model.objects.only("pk", "payload").iterator(chunk_size=2000):
        thread = _thread_of(delivery.payload)
        if thread is not None:
            found.append((delivery, thread))
    task_ids = {t for _, t in found if isinstance(t, str) and _is_uuid(t)}
    task_threads = {
        str(pk): thread
        for pk, thread in task_model.objects.filter(pk__in=list(task_ids)).values_list("pk", "thread_id")
    }
    changed = []
    for delivery, thread in found:
        delivery.thread_id = task_threads.get(thread) if isinstance(thread, str) else thread
        if delivery.thread_id is not None:
            changed.append(delivery)
    delivery_model.objects.bulk_update(changed, ["thread_id"], batch_size=2000)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0032_audit_actor_id_hashed"),
    ]

    operations = [
        migrations.AddField(
            model_name="outbounddelivery",
            name="audit_event_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="outbounddelivery",
            name="thread_id",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="outbounddelivery",
            index=models.Index(fields=["thread_id", "id"], name="outbound_thread"),
        ),
        migrations.RunPython(threads_backfill, migrations.RunPython.noop),
    ]
