"""Audit export: a filtered slice of the audit trail as CSV or JSON Lines, streamed, and verifiable.

Rows come from one server-side cursor (``.iterator(chunk_size=2000)``) inside
a read transaction, so a million events cost a few thousand rows of memory,
never the set. PostgreSQL would otherwise (autocommit) declare the cursor
``WITH HOLD`` and materialise the whole result before the first row.

Each row is exactly what :func:`approvals.audit.event_hash` hashes
(:func:`approvals.audit.event_fields`) plus ``id``, ``chain``, ``prev_hash``,
``hash`` and ``masked``. It has the actor's name (``actor``) and user id (``actor_id``): the hashes of
events written since the user id was hashed cover both, those of older events the name only
(:func:`approvals.audit.hash_form`; ``audit_export --verify`` counts them). Details go through
:func:`approvals.gateway.audit_details_for`, so
a reader without "view sensitive" gets the graph's sensitive paths masked; such
a row is flagged ``masked`` because its hash can no longer be recomputed from
what was exported (its links still can). The JSONL variant ends with a trailer
``{"export": {"count", "first_id", "last_id", "head_hash", "chained", ...}}``.
Filters are the audit trail's one parser's (``approvals.audit_filters``), as on the console and the API.
``chained`` is true when the export is the whole trail (no filters, every
graph): then every row must link to the row before it in its chain, and each
chain start from the genesis hash.

Every export is itself audited (``audit.exported``, with the filters and the
count) once its stream ends, or is abandoned.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet

from approvals import gateway, permissions
from approvals.audit import ACTOR_ID, audit_record, event_fields
from approvals.audit_filters import AuditFilters
from approvals.errors import InvalidInput
from approvals.models import AuditAction, AuditEvent
from approvals.selectors import audit_action_check, audit_filter

FORMATS = ("jsonl", "csv")
HASHED = ("at", "actor", ACTOR_ID, "action", "subject", "thread", "graph", "details")  # the keys of event_fields
# Files from before chains have no "chain", and files from before the actor's user id was hashed no "actor_id".
COLUMNS = ("id", "chain", *HASHED, "prev_hash", "hash", "masked")
NEWER_COLUMNS = frozenset({"chain", ACTOR_ID})
CHUNK_SIZE = 2000  # rows per server-side cursor fetch
ROWS_PER_WRITE = 500  # rows per chunk handed to the HTTP server or file

T = TypeVar("T")


def audit_export_queryset(*, user: permissions.Principal, filters: AuditFilters) -> QuerySet[AuditEvent]:
    """The events ``user`` may export, in chain order. Same filter semantics as the console's audit page."""
    return audit_filter(permissions.audit_visible(user), **filters.query()).order_by("id")


def export_row(event: AuditEvent, shown: dict[str, Any], *, withheld: bool) -> dict[str, Any]:
    """``event`` as an export's row, its details as its reader is shown them (``gateway.audit_details_many``),
    its chain hashes withheld if the reader's are (``gateway.audit_hashes_withheld``)."""
    fields = event_fields(event)
    masked = shown is not event.details and shown != event.details
    return {
        "id": event.id,
        "chain": event.chain,
        **fields,
        "details": shown,
        "prev_hash": gateway.DIGEST_WITHHELD if withheld else event.prev_hash,
        "hash": gateway.DIGEST_WITHHELD if withheld else event.hash,
        "masked": masked or withheld,
    }


@dataclass
class ExportStats:
    count: int = 0
    masked: int = 0
    first_id: int | None = None
    last_id: int | None = None
    head_hash: str | None = None
    complete: bool = False

    def add(self, row: dict[str, Any]) -> None:
        if self.first_id is None:
            self.first_id = row["id"]
        self.last_id = row["id"]
        self.head_hash = row["hash"]
        self.count += 1
        self.masked += bool(row["masked"])


@dataclass
class AuditExport:
    """One export: iterate :meth:`chunks` (str pieces) once; the ``audit.exported`` event is written at its end."""

    user: permissions.Principal
    filters: AuditFilters
    format: str = "jsonl"
    actor_label: str | None = None  # for exports by a management command (no user row)
    stats: ExportStats = field(default_factory=ExportStats)
    # What the rows revealed to an exporter who may see sensitive values: one event at the end, not one a row.
    revealed: list[gateway.Reveal] = field(default_factory=list)
    _audited: bool = False

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise InvalidInput(f"format must be one of {', '.join(FORMATS)}", field="format")
        if self.filters.action:  # refused before the first byte, not as a broken stream
            audit_action_check(permissions.audit_visible(self.user), self.filters.action)

    @property
    def chained(self) -> bool:
        return self.filters.empty and permissions.graphs_visible(self.user) is None

    @property
    def filename(self) -> str:
        return f"gatehouse-audit-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.{self.format}"

    @property
    def content_type(self) -> str:
        return "text/csv; charset=utf-8" if self.format == "csv" else "application/x-ndjson; charset=utf-8"

    def rows(self) -> Iterator[dict[str, Any]]:
        qs = audit_export_queryset(user=self.user, filters=self.filters)
        # A transaction keeps the cursor a plain (not WITH HOLD) server-side cursor: rows stream as read.
        with transaction.atomic():
            # The details of a write's rows are read together: the threads their masking reads, once for them.
            # A reader who sees values masked gets no chain hash: each covers its event's unmasked details.
            withheld = gateway.audit_hashes_withheld(self.user)
            for events in _batched(qs.iterator(chunk_size=CHUNK_SIZE)):
                shown = gateway.audit_details_many(self.user, events, gathered=self.revealed)
                for event, details in zip(events, shown, strict=True):
                    row = export_row(event, details, withheld=withheld)
                    self.stats.add(row)
                    yield row
        self.stats.complete = True

    def trailer(self) -> dict[str, Any]:
        s = self.stats
        return {
            "export": {
                "count": s.count,
                "first_id": s.first_id,
                "last_id": s.last_id,
                "head_hash": s.head_hash,
                "chained": self.chained,
                "masked": s.masked,
                "filters": self.filters.as_dict(),
            }
        }

    def chunks(self) -> Iterator[str]:
        try:
            yield from (self._csv() if self.format == "csv" else self._jsonl())
        finally:
            self.audit()

    def _jsonl(self) -> Iterator[str]:
        dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
        for batch in _batched(self.rows()):
            yield "".join(dumps(row) + "\n" for row in batch)
        yield dumps(self.trailer()) + "\n"

    def _csv(self) -> Iterator[str]:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(COLUMNS)
        for batch in _batched(self.rows()):
            for row in batch:
                writer.writerow(_csv_values(row))
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
        if buffer.tell():
            yield buffer.getvalue()

    def audit(self) -> None:
        """Record the export once: filters, format, how many rows and whether the stream finished."""
        if self._audited:
            return
        self._audited = True
        s = self.stats
        user = self.user if isinstance(self.user, User) and self.user.pk else None
        # The rows streamed so far were shown, whole stream or not.
        gateway.reveals_record(self.user, "audit:export", self.revealed, actor_label=self.actor_label)
        with transaction.atomic():
            audit_record(
                actor=user,
                actor_label=self.actor_label,
                action=AuditAction.AUDIT_EXPORTED,
                subject_type="audit",
                subject_id=s.last_id or 0,
                details={
                    "format": self.format,
                    "filters": self.filters.as_dict(),
                    "count": s.count,
                    "first_id": s.first_id,
                    "last_id": s.last_id,
                    "head_hash": s.head_hash,
                    "complete": s.complete,
                    "masked": s.masked,
                },
            )


def _batched(rows: Iterable[T]) -> Iterator[list[T]]:
    batch: list[T] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= ROWS_PER_WRITE:
            yield batch
            batch = []
    if batch:
        yield batch


def _csv_values(row: dict[str, Any]) -> list[Any]:
    out = []
    for name in COLUMNS:
        value = row[name]
        if name == "details":
            value = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        elif value is None:
            value = ""
        elif isinstance(value, bool):
            value = "true" if value else "false"
        out.append(value)
    return out
