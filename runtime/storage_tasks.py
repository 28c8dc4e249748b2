"""Celery task for checkpoint retention (beat: ``prune-checkpoints`` in console/settings.py)."""

from __future__ import annotations

from celery import shared_task

from runtime.retention import checkpoints_prune


@shared_task(name="runtime.prune_checkpoints", acks_late=True, ignore_result=True)
def prune_checkpoints(graph: str | None = None) -> dict[str, int]:
    report = checkpoints_prune(graph=graph)
    return {
        "threads": report.threads,
        "checkpoints_deleted": report.checkpoints_deleted,
        "blobs_deleted": report.blobs_deleted,
        "errors": len(report.errors),
    }
