"""audit_task / audit_thread record exactly the row the long ``audit_record`` call records."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User

from approvals.audit import audit_record, audit_task, audit_thread, event_fields
from approvals.models import AuditAction, AuditEvent
from tests.factories import task_make

pytestmark = pytest.mark.django_db


def _recorded(event: AuditEvent) -> dict[str, Any]:
    """Everything stored about the event but its position (time, id); same subject, so same chain."""
    event.refresh_from_db()
    return {
        "actor_id": event.actor_id,
        "actor_label": event.actor_label,
        "action": event.action,
        "subject_type": event.subject_type,
        "subject_id": event.subject_id,
        "thread_id": event.thread_id,
        "graph": event.graph,
        "details": event.details,
        "chain": event.chain,
        "hashed": {k: v for k, v in event_fields(event).items() if k not in ("at", "id")},
    }


@pytest.mark.parametrize("as_system", [False, True], ids=["a user", "the system"])
def test_audit_task_records_what_the_long_form_records(as_system):
    task = task_make(graph="loan_approval", node="human_review")
    actor = None if as_system else User.objects.create(username=f"u-{uuid.uuid4().hex[:8]}")
    label = "system:deadlines" if as_system else None
    details = {"until": "2030-01-01T00:00:00+00:00", "nested": {"b": 2, "a": [1, 2]}}
    long_form = audit_record(
        actor=actor,
        actor_label=label,
        action=AuditAction.TASK_CLAIMED,
        subject_type="task",
        subject_id=task.id,
        thread_id=task.thread_id,
        graph=task.graph,
        details=details,
    )
    short = audit_task(task=task, actor=actor, actor_label=label, action=AuditAction.TASK_CLAIMED, details=details)
    assert _recorded(short) == _recorded(long_form)
    assert short.subject_type == "task" and short.subject_id == str(task.id) and short.thread_id == task.thread_id


def test_audit_thread_records_what_the_long_form_records():
    thread = task_make(graph="kyc_onboarding").thread
    actor = User.objects.create(username=f"u-{uuid.uuid4().hex[:8]}")
    long_form = audit_record(
        actor=actor,
        action=AuditAction.THREAD_COPIED,
        subject_type="thread",
        subject_id=thread.id,
        thread_id=thread.id,
        graph=thread.graph,
        details={"reason": "x"},
    )
    short = audit_thread(thread=thread, actor=actor, action=AuditAction.THREAD_COPIED, details={"reason": "x"})
    assert _recorded(short) == _recorded(long_form)
    assert short.graph == "kyc_onboarding" and short.subject_id == str(thread.id)


def test_no_details_is_recorded_as_an_empty_object_by_both():
    task = task_make()
    long_form = audit_record(
        actor=None,
        action=AuditAction.TASK_RELEASED,
        subject_type="task",
        subject_id=task.id,
        thread_id=task.thread_id,
        graph=task.graph,
    )
    short = audit_task(task=task, actor=None, action=AuditAction.TASK_RELEASED)
    assert _recorded(short) == _recorded(long_form)
    assert short.details == {}
