"""Retention: completed threads keep their final and decision checkpoints; unreferenced blobs go."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from runtime.checkpointer import checkpointer_get
from runtime.models import Blob, BlobRef, Thread, ThreadStatus
from runtime.retention import checkpoints_protect, checkpoints_prune
from tests.storage.test_blobs import DOC, _graph


def _thread_with_history(status: str = ThreadStatus.COMPLETED, days_ago: int = 60) -> tuple[Thread, list[str]]:
    graph_name = f"retention-{uuid.uuid4().hex[:8]}"
    thread = Thread.objects.create(graph=graph_name, status=status)
    config = {"configurable": {"thread_id": str(thread.id)}}
    graph = _graph(checkpointer_get(), steps=4)
    graph.invoke({"document": DOC + uuid.uuid4().hex}, config, durability="sync")
    ids = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(config)]
    Thread.objects.filter(pk=thread.pk).update(
        checkpoint_id=ids[0], updated_at=timezone.now() - timedelta(days=days_ago)
    )
    thread.refresh_from_db()
    return thread, ids  # newest first


def _ids(thread: Thread) -> list[str]:
    return [
        t.config["configurable"]["checkpoint_id"]
        for t in checkpointer_get().list({"configurable": {"thread_id": str(thread.id)}})
    ]


def test_a_completed_thread_keeps_its_final_and_protected_checkpoints(live_db):
    thread, ids = _thread_with_history()
    protected = ids[3]

    def protect(sender, threads, **kwargs):
        return {str(thread.id): {protected}}

    checkpoints_protect.connect(protect)
    try:
        report = checkpoints_prune(graph=thread.graph)
    finally:
        checkpoints_protect.disconnect(protect)
    assert report.threads == 1 and report.checkpoints_deleted == len(ids) - 2
    assert sorted(_ids(thread)) == sorted([ids[0], protected])
    values = _graph(checkpointer_get()).get_state({"configurable": {"thread_id": str(thread.id)}}).values
    assert values["document"].startswith(DOC)  # the final state still reads whole


@pytest.mark.parametrize(
    "status,days_ago", [(ThreadStatus.INTERRUPTED, 60), (ThreadStatus.FAILED, 60), (ThreadStatus.COMPLETED, 1)]
)
def test_open_failed_and_recent_threads_keep_everything(live_db, status, days_ago):
    thread, ids = _thread_with_history(status, days_ago)
    checkpoints_prune(graph=thread.graph)
    assert sorted(_ids(thread)) == sorted(ids)


def test_dry_run_deletes_nothing_and_the_command_reports_what_it_would_do(live_db, capsys):
    thread, ids = _thread_with_history()
    call_command("checkpoints_prune", "--dry-run", "--graph", thread.graph)
    out, err = capsys.readouterr()
    assert f"would delete {len(ids) - 1} checkpoint(s)" in out
    assert err == ""  # not a terminal: no progress bar (tests/ops/test_progress.py draws one on a pty)
    assert len(_ids(thread)) == len(ids)
    call_command("checkpoints_prune", "--graph", thread.graph)
    assert _ids(thread) == [ids[0]]


def test_blobs_no_thread_references_are_collected(live_db):
    thread, _ = _thread_with_history()
    shas = set(BlobRef.objects.filter(thread_id=str(thread.id)).values_list("blob_id", flat=True))
    assert shas
    checkpointer_get().delete_thread(str(thread.id))  # as a thread deleted for good
    Blob.objects.filter(pk__in=shas).update(touched_at=timezone.now() - timedelta(hours=2))
    with override_settings(GATEHOUSE_BLOB_GRACE_SECONDS=3600):
        checkpoints_prune(graph=thread.graph)
    assert not Blob.objects.filter(pk__in=shas).exists()


def test_a_blob_still_referenced_by_a_kept_checkpoint_survives(live_db):
    thread, _ = _thread_with_history()
    shas = set(BlobRef.objects.filter(thread_id=str(thread.id)).values_list("blob_id", flat=True))
    Blob.objects.filter(pk__in=shas).update(touched_at=timezone.now() - timedelta(hours=2))
    checkpoints_prune(graph=thread.graph)
    kept = set(BlobRef.objects.filter(thread_id=str(thread.id)).values_list("blob_id", flat=True))
    assert kept and Blob.objects.filter(pk__in=kept).count() == len(kept)


def test_a_prune_that_deleted_checkpoints_is_audited_and_a_dry_run_is_not(live_db, capsys):
    """The examiner: retention deleted state and wrote nothing on the record. A real prune records one
    ``checkpoints.pruned`` event (counts, the cut-off, the threads); a dry run or a prune of nothing records none."""
    from approvals.audit import audit_verify
    from approvals.models import AuditAction, AuditEvent

    thread, ids = _thread_with_history()
    pruned = AuditEvent.objects.filter(action=AuditAction.CHECKPOINTS_PRUNED, graph=thread.graph)
    call_command("checkpoints_prune", "--dry-run", "--graph", thread.graph)
    assert not pruned.exists()

    call_command("checkpoints_prune", "--graph", thread.graph)
    [event] = pruned
    details = event.details
    assert details["threads"] == 1 and details["thread_ids"] == [str(thread.pk)]
    assert details["checkpoints_deleted"] == len(ids) - 1 and details["errors"] == 0
    assert details["thread_ids_sha256"] == hashlib.sha256(str(thread.pk).encode()).hexdigest()
    cut_off = datetime.fromisoformat(details["completed_before"][thread.graph])
    assert thread.updated_at < cut_off < timezone.now() and event.actor_label == "runtime"

    call_command("checkpoints_prune", "--graph", thread.graph)  # nothing left to delete: nothing to record
    assert pruned.count() == 1
    assert audit_verify()[1] is None
