"""Celery tasks of the approvals domain: thin wrappers around services."""

from __future__ import annotations

from celery import shared_task

from approvals.audit import audit_anchor


@shared_task(name="approvals.anchor_audit", ignore_result=True)
def anchor_audit() -> str:
    return audit_anchor().hash
