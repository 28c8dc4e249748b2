"""The audit trail: append-only events, each chained to the previous one by hash.

Appends are serialised (an advisory lock on PostgreSQL; SQLite serialises
writers already) so the chain has exactly one head. Call ``audit_record``
inside the transaction that makes the change it describes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection, transaction
from django.utils import timezone

from approvals.models import AuditEvent

GENESIS = "0" * 64
_LOCK_KEY = 0x6761746568  # "gateh"


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def event_hash(fields: dict[str, Any], prev_hash: str) -> str:
    return hashlib.sha256(f"{prev_hash}|{canonical(fields)}".encode()).hexdigest()


def event_fields(event: AuditEvent) -> dict[str, Any]:
    return {
        "at": event.at.isoformat(),
        "actor": event.actor_label,
        "action": event.action,
        "subject": f"{event.subject_type}:{event.subject_id}",
        "thread": str(event.thread_id) if event.thread_id else None,
        "graph": event.graph,
        "details": event.details,
    }


def audit_record(
    *,
    actor: User | AnonymousUser | None,
    action: str,
    subject_type: str,
    subject_id: object,
    thread_id: Any = None,
    graph: str = "",
    details: dict[str, Any] | None = None,
    actor_label: str | None = None,
) -> AuditEvent:
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit_record must run inside the transaction of the change it records")
    user = actor if isinstance(actor, User) else None
    label = actor_label or (user.get_username() if user is not None else "system")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
    prev = AuditEvent.objects.order_by("-id").values_list("hash", flat=True).first() or GENESIS
    event = AuditEvent(
        at=timezone.now(),
        actor=user,
        actor_label=label,
        action=action,
        subject_type=subject_type,
        subject_id=str(subject_id),
        thread_id=thread_id,
        graph=graph,
        details=json.loads(canonical(details or {})),
        prev_hash=prev,
    )
    event.hash = event_hash(event_fields(event), prev)
    event.save()
    return event


def audit_anchor() -> AuditEvent:
    """Record the chain's current head as an anchor event.

    Run periodically (Celery beat). Copying anchors to write-once storage
    (``manage.py audit_export --anchors``) lets anyone prove later that the
    chain up to an anchor was not rewritten wholesale.
    """
    with transaction.atomic():
        head = AuditEvent.objects.order_by("-id").values("id", "hash").first()
        return audit_record(
            actor=None,
            actor_label="system",
            action="audit.anchor",
            subject_type="audit",
            subject_id=head["id"] if head else 0,
            details={"head_id": head["id"] if head else None, "head_hash": head["hash"] if head else GENESIS},
        )


def audit_verify() -> tuple[int, AuditEvent | None]:
    """Walk the chain in order; return (events checked, first broken event or None)."""
    prev = GENESIS
    checked = 0
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        if event.prev_hash != prev or event.hash != event_hash(event_fields(event), prev):
            return checked, event
        prev = event.hash
        checked += 1
    return checked, None
