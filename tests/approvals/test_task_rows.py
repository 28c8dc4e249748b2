"""The fixed statements of a pause and a decision (``approvals.task_rows``, ``claims.claim_for``) read
and write what their ORM forms did."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals import claims
from approvals.models import ApprovalTask, TaskClaim, TaskStatus
from approvals.task_rows import decisions_on, sibling_statuses, task_close, tasks_pending
from tests.approvals.handoffs import person
from tests.factories import decision_make, loan_gate, task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _fields(instance):
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_the_decisions_on_a_task_are_the_orms_and_know_their_task():
    task = task_make(payload=loan_gate(required_approvals=2))
    first, second = decision_make(task, person()), decision_make(task, person("approver"))
    mine = sorted(decisions_on(task), key=lambda d: d.created_at)
    orms = sorted(task.decisions.all(), key=lambda d: d.created_at)
    assert [d.pk for d in mine] == [first.pk, second.pk]
    assert [_fields(d) for d in mine] == [_fields(d) for d in orms]
    with CaptureQueriesContext(connection) as reads:
        assert all(d.task is task for d in mine)
    assert len(reads) == 0
    assert decisions_on(task_make()) == []


def _siblings_by_orm(task: ApprovalTask) -> set[str]:
    return set(
        ApprovalTask.objects.filter(
            Q(status=TaskStatus.PENDING) | Q(checkpoint_id=task.checkpoint_id), thread=task.thread
        )
        .exclude(pk=task.pk)
        .values_list("status", flat=True)
    )


def _copy(task: ApprovalTask, **changes) -> ApprovalTask:
    other = ApprovalTask.objects.get(pk=task.pk)
    other.pk = None
    for name, value in changes.items():
        setattr(other, name, value)
    other.save(force_insert=True)
    return other


def test_sibling_statuses_are_what_the_orm_query_found():
    task = task_make()
    assert sibling_statuses(task) == set() == _siblings_by_orm(task)
    # A decided interrupt at the same checkpoint, a pending one at another, a decided one elsewhere.
    _copy(task, interrupt_id="same-checkpoint", status=TaskStatus.DECIDED)
    pending = _copy(task, interrupt_id="pending-elsewhere", checkpoint_id="another-checkpoint")
    _copy(task, interrupt_id="decided-elsewhere", checkpoint_id="a-third-checkpoint", status=TaskStatus.DECIDED)
    assert sibling_statuses(task) == _siblings_by_orm(task) == {TaskStatus.DECIDED, TaskStatus.PENDING}
    assert sibling_statuses(pending) == _siblings_by_orm(pending) == {TaskStatus.PENDING}


def test_closing_a_task_writes_its_status_and_time():
    task = task_make()
    before = timezone.now()
    task_close(task)
    stored = ApprovalTask.objects.get(pk=task.pk)
    assert stored.status == task.status == TaskStatus.DECIDED
    assert stored.decided_at == task.decided_at and stored.decided_at >= before


def test_a_claim_is_read_with_its_holder_and_an_expired_one_is_none():
    holder = person()
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    claim = claims.claim_for(task)
    assert claim is not None and _fields(claim) == _fields(TaskClaim.objects.get(task=task))
    with CaptureQueriesContext(connection) as reads:
        assert claim.user.username == holder.username
    assert len(reads) == 0
    TaskClaim.objects.filter(task=task).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert claims.claim_for(task) is None
    claims.claim_drop(task=task)
    assert not TaskClaim.objects.filter(task=task).exists()
    assert claims.claim_for(task_make()) is None


def test_a_threads_pending_tasks_are_the_orms_oldest_first():
    task = task_make()
    later = _copy(task, interrupt_id="later", created_at=task.created_at + timedelta(seconds=1))
    _copy(task, interrupt_id="decided", status=TaskStatus.DECIDED)
    mine = tasks_pending(task.thread)
    orms = list(ApprovalTask.objects.filter(thread=task.thread, status=TaskStatus.PENDING).order_by("created_at"))
    assert [t.pk for t in mine] == [task.pk, later.pk] == [t.pk for t in orms]
    assert [_fields(t) for t in mine] == [_fields(t) for t in orms]
    with CaptureQueriesContext(connection) as reads:
        assert all(t.thread is task.thread for t in mine)
    assert len(reads) == 0
