"""The audit trail: append-only events, each chained to the previous one by hash.

Appends are serialised (an advisory lock on PostgreSQL; SQLite serialises
writers already) so the chain has exactly one head. Call ``audit_record``
inside the transaction that makes the change it describes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection, transaction
from django.utils import timezone

from approvals.events import events_publish
from approvals.models import AuditAction, AuditAnchor, AuditEvent

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


def _chain_lock() -> None:
    """Serialise appends until the transaction ends (re-entrant within one transaction)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])


def audit_record(
    *,
    actor: User | AnonymousUser | None,
    action: AuditAction | str,
    subject_type: str,
    subject_id: object,
    thread_id: Any = None,
    graph: str = "",
    details: dict[str, Any] | None = None,
    actor_label: str | None = None,
) -> AuditEvent:
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit_record must run inside the transaction of the change it records")
    # A principal that was never stored (``manage.py`` acting as a superuser) is recorded by its name.
    named = actor if isinstance(actor, User) else None
    user = named if named is not None and named.pk is not None else None
    label = actor_label or (named.get_username() if named is not None else "system")
    _chain_lock()
    prev = AuditEvent.objects.order_by("-id").values_list("hash", flat=True).first() or GENESIS
    event = AuditEvent(
        at=timezone.now(),
        actor=user,
        actor_label=label,
        action=str(action),  # the stored value, also what the hash covers
        subject_type=subject_type,
        subject_id=str(subject_id),
        thread_id=thread_id,
        graph=graph,
        details=json.loads(canonical(details or {})),
        prev_hash=prev,
    )
    event.hash = event_hash(event_fields(event), prev)
    event.save()
    events_publish(event)
    return event


# --- anchors: the chain's length and head, so a cut-off tail is seen ---------------------------


def audit_anchor() -> AuditAnchor:
    """Record the chain's current head as an anchor: an ``audit.anchor`` event and an AuditAnchor row.

    Run periodically (Celery beat). The row pins the anchor event itself (its
    id, hash and position), so ``audit_verify`` can tell that events up to it
    were deleted even when the deletion left a chain whose links still match.
    With ``GATEHOUSE_AUDIT_ANCHOR_SINK`` set the anchor is also appended, after
    commit, to a file outside the database.
    """
    with transaction.atomic():
        _chain_lock()  # the head and the count below must not move before the anchor event is appended
        head = AuditEvent.objects.order_by("-id").values("id", "hash").first()
        length = AuditEvent.objects.count()
        event = audit_record(
            actor=None,
            actor_label="system",
            action=AuditAction.AUDIT_ANCHOR,
            subject_type="audit",
            subject_id=head["id"] if head else 0,
            details={
                "head_id": head["id"] if head else None,
                "head_hash": head["hash"] if head else GENESIS,
                "length": length,
            },
        )
        anchor = AuditAnchor.objects.create(at=event.at, head_id=event.pk, head_hash=event.hash, length=length + 1)
        sink = anchor_sink_path()
        if sink is not None:
            transaction.on_commit(lambda: anchor_sink_append(anchor, path=sink))
    return anchor


def anchor_sink_path() -> Path | None:
    value = settings.GATEHOUSE_AUDIT_ANCHOR_SINK
    return Path(value) if value else None


def anchor_line(anchor: AuditAnchor) -> dict[str, Any]:
    return {
        "anchor": anchor.pk,
        "at": anchor.at.isoformat(),
        "head_id": anchor.head_id,
        "head_hash": anchor.head_hash,
        "length": anchor.length,
    }


def anchor_sink_append(anchor: AuditAnchor, *, path: Path) -> None:
    """Append one JSON line to the sink: O_APPEND (no rewrite of what is there), 0600, flushed to disk.

    The file lives outside the database, so whoever can delete audit rows and
    anchors through SQL cannot make them agree again with this copy.
    """
    line = (json.dumps(anchor_line(anchor), sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class AnchorRef:
    """An anchor to check the chain against: a row of AuditAnchor or a line of the sink."""

    source: str  # "anchor #12" or "sink line 3"
    anchor_id: int | None
    head_id: int
    head_hash: str
    length: int


def anchors_stored() -> list[AnchorRef]:
    return [
        AnchorRef(f"anchor #{a.pk}", a.pk, a.head_id, a.head_hash, a.length) for a in AuditAnchor.objects.order_by("id")
    ]


class SinkUnreadable(Exception):
    pass


def anchors_from_sink(path: Path) -> list[AnchorRef]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SinkUnreadable(f"cannot read the anchor sink {path}: {exc}") from exc
    refs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            refs.append(
                AnchorRef(
                    f"sink line {number}",
                    int(row["anchor"]),
                    int(row["head_id"]),
                    str(row["head_hash"]),
                    int(row["length"]),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SinkUnreadable(f"{path}:{number}: not an anchor line ({exc})") from exc
    return refs


@dataclass
class ChainReport:
    checked: int = 0  # events in the chain
    broken: AuditEvent | None = None  # the first event whose link or hash does not match
    verified: int = 0  # events before ``broken`` (all of them when nothing is broken)
    newest_id: int | None = None
    problems: list[str] = field(default_factory=list)  # anchors the chain no longer reaches

    @property
    def intact(self) -> bool:
        return self.broken is None and not self.problems


def audit_chain_check(*, anchors: Iterable[AnchorRef] = ()) -> ChainReport:
    """Walk the chain once: every link and hash, and every anchor's head, hash and position.

    A hash chain alone cannot see its newest events go (what is left still
    links up), nor an emptied table: an anchor recorded N events up to event
    #H with hash X, so a chain that is shorter, or whose event #H is gone or
    different, lost or rewrote its tail.
    """
    refs = list(anchors)
    wanted: dict[int, list[AnchorRef]] = {}
    for ref in refs:
        wanted.setdefault(ref.head_id, []).append(ref)
    report = ChainReport()
    seen: dict[int, tuple[int, str]] = {}  # anchored event id -> (position, hash)
    prev = GENESIS
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        if report.broken is None and (event.prev_hash != prev or event.hash != event_hash(event_fields(event), prev)):
            report.broken = event
            report.verified = report.checked
        prev = event.hash
        report.checked += 1
        report.newest_id = event.pk
        if event.pk in wanted:
            seen[event.pk] = (report.checked, event.hash)
    for ref in refs:
        found = seen.get(ref.head_id)
        if found is None:
            if report.checked < ref.length or report.newest_id is None or report.newest_id < ref.head_id:
                newest = f"newest #{report.newest_id}" if report.newest_id is not None else "empty"
                report.problems.append(
                    f"TAIL LOST: {ref.source} recorded {ref.length} events up to #{ref.head_id}; "
                    f"the chain now has {report.checked} ({newest})"
                )
            else:
                report.problems.append(f"event #{ref.head_id} pinned by {ref.source} is missing from the chain")
        elif found[1] != ref.head_hash:
            report.problems.append(f"REWRITTEN: event #{ref.head_id} no longer has the hash {ref.source} recorded")
        elif found[0] != ref.length:
            report.problems.append(
                f"events before #{ref.head_id} were removed or added: {ref.source} counted {ref.length}, "
                f"the chain has {found[0]}"
            )
    if report.broken is None:
        report.verified = report.checked
    return report


def anchors_compare(stored: list[AnchorRef], sink: list[AnchorRef]) -> list[str]:
    """Anchors in the sink that the database no longer holds, or holds with other values."""
    by_id = {ref.anchor_id: ref for ref in stored}
    problems = []
    for ref in sink:
        mine = by_id.get(ref.anchor_id)
        if mine is None:
            problems.append(f"anchor #{ref.anchor_id} ({ref.source}) is missing from the database")
        elif (mine.head_id, mine.head_hash, mine.length) != (ref.head_id, ref.head_hash, ref.length):
            problems.append(f"anchor #{ref.anchor_id} in the database differs from {ref.source}")
    return problems


def audit_verify() -> tuple[int, AuditEvent | None]:
    """Walk the chain; return (events verified before the first broken one, that event or None).

    Links and hashes only; ``audit_chain_check`` also checks anchors.
    """
    report = audit_chain_check()
    return report.verified, report.broken


# --- shorthands for the two commonest subjects: what is recorded stays visible at the call ------------
# Each is exactly ``audit_record`` with the subject, thread and graph taken from the object, so a row
# written through one is the row the long form writes (tests/approvals/test_audit_subjects.py).

if TYPE_CHECKING:
    from approvals.models import ApprovalTask
    from runtime.models import Thread


def audit_task(
    *,
    task: ApprovalTask,
    actor: User | AnonymousUser | None,
    action: AuditAction | str,
    details: dict[str, Any] | None = None,
    actor_label: str | None = None,
) -> AuditEvent:
    """Record ``action`` about ``task``: subject ``task``/its id, in the task's thread and graph."""
    return audit_record(
        actor=actor,
        actor_label=actor_label,
        action=action,
        subject_type="task",
        subject_id=task.id,
        thread_id=task.thread_id,
        graph=task.graph,
        details=details,
    )


def audit_thread(
    *,
    thread: Thread,
    actor: User | AnonymousUser | None,
    action: AuditAction | str,
    details: dict[str, Any] | None = None,
    actor_label: str | None = None,
) -> AuditEvent:
    """Record ``action`` about ``thread``: subject ``thread``/its id, in that thread and its graph."""
    return audit_record(
        actor=actor,
        actor_label=actor_label,
        action=action,
        subject_type="thread",
        subject_id=thread.id,
        thread_id=thread.id,
        graph=thread.graph,
        details=details,
    )
