"""Checkpoint retention: completed threads keep what an auditor needs, the rest goes.

Policy, per graph (langgraph.json ``"gatehouse": {"retention": {"<graph>":
{"completed_after_days": N}}}``, default ``GATEHOUSE_RETENTION_COMPLETED_AFTER_DAYS``;
0 means never):

- threads that are not finished (idle, busy, interrupted, failed — failed
  threads can be retried) keep every checkpoint;
- a thread completed or cancelled more than N days ago keeps its final
  checkpoint and every checkpoint something else refers to — decisions and
  approval tasks by default (``GATEHOUSE_RETENTION_PROTECT``, plus receivers
  of the ``checkpoints_protect`` signal) — and loses the others, their
  pending writes, their per-version values and their subgraph checkpoints;
- blobs no thread references any more are deleted after a grace period.

Audit events are never pruned: they live in the audit trail, not in the
checkpoint store. A prune that deleted anything is itself audited (``checkpoints_pruned``,
``approvals.receivers``): counts, cut-offs, the threads. The runtime does not import the domain: protected ids come
from the settings (by model label) and from signal receivers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db.models import QuerySet
from django.dispatch import Signal
from django.utils import timezone

from runtime.blobs import BlobSpillingSaver, blob_refs_set, blobs_collect
from runtime.checkpointer import checkpointer_get
from runtime.models import Thread, ThreadStatus
from runtime.registry import UnknownGraph, graph_get, graph_names

log = logging.getLogger(__name__)

# sender=None, threads: list[Thread]; receivers return {thread_id (str): {checkpoint_id, ...}}.
checkpoints_protect = Signal()
# sender=None, report: PruneReport, graph: str | None; after a run (not a dry run) that deleted anything. The
# domain audits it (approvals.receivers): what retention removed is on the record, as every other deletion.
checkpoints_pruned = Signal()

Progress = Callable[[int, int], None]


@dataclass
class PruneReport:
    threads: int = 0
    checkpoints_deleted: int = 0
    checkpoints_kept: int = 0
    blobs_deleted: int = 0
    dry_run: bool = False
    errors: list[str] = field(default_factory=list)
    # The threads that lost checkpoints, and per graph the completion time before which threads were pruned.
    pruned_threads: list[str] = field(default_factory=list)
    completed_before: dict[str, str] = field(default_factory=dict)


def retention_days_for(graph: str) -> int:
    try:
        days = graph_get(graph).retention_days
    except UnknownGraph:
        days = None
    return settings.GATEHOUSE_RETENTION_COMPLETED_AFTER_DAYS if days is None else days


def threads_prunable(*, graph: str | None = None, now: datetime | None = None) -> QuerySet[Thread]:
    """Finished threads past their graph's retention period."""
    now = now or timezone.now()
    finished = Thread.objects.filter(status__in=[ThreadStatus.COMPLETED, ThreadStatus.CANCELLED])
    names = [graph] if graph else sorted(set(graph_names()) | set(finished.values_list("graph", flat=True)))
    qs = Thread.objects.none()
    for name in names:
        days = retention_days_for(name)
        if days <= 0:
            continue
        qs = qs | finished.filter(graph=name, updated_at__lt=now - timedelta(days=days))
    return qs.order_by("updated_at", "id")


def checkpoints_protected(threads: Sequence[Thread]) -> dict[str, set[str]]:
    """Checkpoint ids other apps refer to, per thread id."""
    ids = [t.pk for t in threads]
    protected: dict[str, set[str]] = {str(t.pk): set() for t in threads}
    for spec in settings.GATEHOUSE_RETENTION_PROTECT:
        label, _, lookup = spec.partition("@")
        app_label, model_name, field_name = label.split(".")
        try:
            model = apps.get_model(app_label, model_name)
        except LookupError:
            continue  # app not installed: nothing of it to protect
        lookup = lookup or "thread"
        for thread_id, checkpoint_id in model._default_manager.filter(**{f"{lookup}__in": ids}).values_list(
            f"{lookup}_id" if "__" not in lookup else f"{lookup}__id", field_name
        ):
            protected.setdefault(str(thread_id), set()).add(checkpoint_id)
    for _receiver, result in checkpoints_protect.send(sender=None, threads=list(threads)):
        mapping: dict[str, set[str]] = result if isinstance(result, dict) else {}
        for thread_id, checkpoint_ids in mapping.items():
            protected.setdefault(str(thread_id), set()).update(checkpoint_ids)
    return protected


def checkpoints_prune(
    *,
    graph: str | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    progress: Progress | None = None,
    batch: int = 100,
) -> PruneReport:
    """Apply the retention policy to every prunable thread, then collect unreferenced blobs."""
    saver = checkpointer_get()
    report = PruneReport(dry_run=dry_run)
    now = now or timezone.now()
    qs = threads_prunable(graph=graph, now=now)
    total = qs.count()
    done = 0
    last_id: Any = None
    last_updated: Any = None
    while True:
        page = qs
        if last_updated is not None:
            page = page.filter(updated_at__gte=last_updated).exclude(updated_at=last_updated, id__lte=last_id)
        threads = list(page[:batch])
        if not threads:
            break
        protected = checkpoints_protected(threads)
        for thread in threads:
            keep = protected.get(str(thread.pk), set()) | ({thread.checkpoint_id} if thread.checkpoint_id else set())
            try:
                deleted, kept = thread_checkpoints_prune(saver, str(thread.pk), keep=keep, dry_run=dry_run)
            except Exception as exc:  # one bad thread must not stop the others
                log.exception("pruning thread %s failed", thread.pk)
                report.errors.append(f"{thread.pk}: {exc!r}")
                deleted = kept = 0
            report.threads += 1
            if deleted:
                report.pruned_threads.append(str(thread.pk))
                if thread.graph not in report.completed_before:
                    days = retention_days_for(thread.graph)
                    report.completed_before[thread.graph] = (now - timedelta(days=days)).isoformat()
            report.checkpoints_deleted += deleted
            report.checkpoints_kept += kept
            done += 1
            if progress:
                progress(done, total)
        last_updated, last_id = threads[-1].updated_at, threads[-1].pk
    store = getattr(saver, "blob_store", None)
    if store is not None:
        report.blobs_deleted = len(blobs_collect(store, dry_run=dry_run))
    if not dry_run and (report.checkpoints_deleted or report.blobs_deleted):
        checkpoints_pruned.send(sender=None, report=report, graph=graph)
    return report


def thread_checkpoints_prune(saver: Any, thread_id: str, *, keep: set[str], dry_run: bool = False) -> tuple[int, int]:
    """Delete a thread's checkpoints except its latest root checkpoint and ``keep``; returns (deleted, kept).

    Subgraph checkpoints go unless the root checkpoint their call started from
    is kept. Works on both savers' tables directly: LangGraph's own
    ``prune(strategy="keep_latest")`` cannot keep a chosen set.
    """
    rows = _checkpoint_rows(saver, thread_id)
    roots = sorted((cid for ns, cid, _ in rows if ns == ""), reverse=True)
    if not roots:
        return 0, 0
    kept_roots = {roots[0]} | (keep & set(roots))
    doomed = [
        (ns, cid)
        for ns, cid, root in rows
        if (ns == "" and cid not in kept_roots) or (ns != "" and (root or "") not in kept_roots)
    ]
    kept = len(rows) - len(doomed)
    if dry_run or not doomed:
        return len(doomed), kept
    _delete(saver, thread_id, doomed)
    if isinstance(saver, BlobSpillingSaver):
        blob_refs_set(thread_id, saver.blob_markers(thread_id))
    return len(doomed), kept


def _is_postgres(saver: Any) -> bool:
    from langgraph.checkpoint.postgres import PostgresSaver

    return isinstance(saver, PostgresSaver)


def _checkpoint_rows(saver: Any, thread_id: str) -> list[tuple[str, str, str | None]]:
    """(namespace, checkpoint id, root checkpoint id the subgraph call started from)."""
    if _is_postgres(saver):
        with saver._cursor() as cur:
            cur.execute(
                "SELECT checkpoint_ns, checkpoint_id, metadata -> 'parents' ->> '' AS root "
                "FROM checkpoints WHERE thread_id = %s",
                (thread_id,),
            )
            return [(r["checkpoint_ns"], r["checkpoint_id"], r["root"]) for r in cur.fetchall()]
    with saver.cursor(transaction=False) as cur:
        cur.execute("SELECT checkpoint_ns, checkpoint_id, metadata FROM checkpoints WHERE thread_id = ?", (thread_id,))
        out = []
        for ns, cid, metadata in cur.fetchall():
            parents = (json.loads(metadata) if metadata else {}).get("parents") or {}
            out.append((ns, cid, parents.get("")))
        return out


_PG_DELETE = (
    "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = ANY(%s)",
    "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = ANY(%s)",
)
# Kept checkpoints whose parent went: no parent, as LangGraph's own prune leaves them.
_PG_ORPHANS = """
UPDATE checkpoints c SET parent_checkpoint_id = NULL
WHERE c.thread_id = %s AND c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM checkpoints p WHERE p.thread_id = c.thread_id
    AND p.checkpoint_ns = c.checkpoint_ns AND p.checkpoint_id = c.parent_checkpoint_id)
"""
# Per-version values no remaining checkpoint points at.
_PG_BLOBS = """
DELETE FROM checkpoint_blobs b
WHERE b.thread_id = %s AND NOT EXISTS (
    SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
    AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)
"""


def _delete(saver: Any, thread_id: str, doomed: list[tuple[str, str]]) -> None:
    by_ns: dict[str, list[str]] = {}
    for ns, cid in doomed:
        by_ns.setdefault(ns, []).append(cid)
    if _is_postgres(saver):
        with saver._cursor() as cur, cur.connection.transaction():
            for ns, ids in by_ns.items():
                for sql in _PG_DELETE:
                    cur.execute(sql, (thread_id, ns, ids))
            cur.execute(_PG_ORPHANS, (thread_id,))
            cur.execute(_PG_BLOBS, (thread_id,))
        return
    with saver.cursor(transaction=True) as cur:
        for ns, ids in by_ns.items():
            marks = ",".join("?" * len(ids))
            for table in ("writes", "checkpoints"):
                cur.execute(
                    f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id IN ({marks})",  # noqa: S608 - the table name is one of two constants; values are bound
                    (thread_id, ns, *ids),
                )
        cur.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ? "
            "AND parent_checkpoint_id IS NOT NULL AND parent_checkpoint_id NOT IN "
            "(SELECT checkpoint_id FROM checkpoints p WHERE p.thread_id = ? "
            "AND p.checkpoint_ns = checkpoints.checkpoint_ns)",
            (thread_id, thread_id),
        )


def thread_checkpoints_delete(saver: Any, thread_id: str, doomed: list[tuple[str, str]]) -> None:
    """Delete these (namespace, checkpoint id) of a thread with their pending writes; used by a run's rollback."""
    if not doomed:
        return
    _delete(saver, thread_id, doomed)
    if isinstance(saver, BlobSpillingSaver):
        blob_refs_set(thread_id, saver.blob_markers(thread_id))
