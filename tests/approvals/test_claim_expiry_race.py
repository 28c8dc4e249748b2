"""A claim that lapses while its holder's decision is on its way (docs/hand-offs.md, "Claims").

A claim lasts ``GATEHOUSE_CLAIM_SECONDS``; an expired one is overwritten by the next claimant, and while
someone else's claim is active ``task_decide`` refuses with 409 (``field: "claim"``). So a reviewer whose
claim lapsed and was taken by another is refused, and nothing of their decision is written; a decision
that reached the task before the other's claim is kept, and the late claim finds the task decided.

The races are controlled, not timed (``tests.approvals.races``): the lapse is written into the claim's row,
and the side that must come second is seen waiting for the first's lock before the first commits.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from approvals import claims
from approvals.errors import Conflict
from approvals.models import ApprovalTask, AuditAction, AuditEvent, Decision, TaskClaim, TaskStatus
from runtime.models import Run, RunKind
from tests.approvals.handoffs import api, person, sign
from tests.approvals.races import second_waits_for_first
from tests.factories import task_make
from tests.fake_resumes import fake_resumes_closed  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("live_db", "fake_resumes_closed")


def _claimed_then_lapsed(holder: Any) -> ApprovalTask:
    """A task ``holder`` claimed, whose claim has since expired (as ``GATEHOUSE_CLAIM_SECONDS`` passing leaves it)."""
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    TaskClaim.objects.filter(task=task).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert claims.claim_for(task) is None
    return task


def _written(task: ApprovalTask) -> tuple[Any, ...]:
    """What a decision on ``task`` writes: its decisions, its status, its claim, its audit trail, resume runs."""
    task.refresh_from_db()
    claim = TaskClaim.objects.filter(task=task).values_list("user_id", "expires_at").first()
    trail = list(
        AuditEvent.objects.filter(subject_type="task", subject_id=str(task.pk)).values_list("action", flat=True)
    )
    resumes = Run.objects.filter(thread_id=task.thread_id, kind=RunKind.RESUME).count()
    return list(Decision.objects.filter(task=task)), task.status, claim, trail, resumes


def test_a_decision_after_the_lapsed_claim_was_taken_by_another_is_a_409_naming_the_claim_and_writes_nothing():
    holder, other = person(), person()
    task = _claimed_then_lapsed(holder)
    taken = api(other).post(f"/api/tasks/{task.pk}/claim")
    assert taken.status_code == 201, taken.content  # the lapsed claim is overwritten by the next claimant
    before = _written(task)

    answer = api(holder).post(f"/api/tasks/{task.pk}/decision", {"decision": "reject", "reason": "too risky"})

    assert answer.status_code == 409, answer.content
    error = answer.json()["error"]
    assert error["field"] == "claim" and f"{other.username} has claimed this task" in error["message"], error
    assert _written(task) == before
    decisions, status, claim, _, _ = before
    assert (decisions, status) == ([], TaskStatus.PENDING) and claim is not None and claim[0] == other.pk


def test_a_decision_in_flight_when_another_takes_the_lapsed_claim_is_refused_and_writes_nothing():
    """The holder's decision waits for the task's lock while the other reviewer's claim holds it: judged after
    the wait (``task_rows.decision_grounds``), it sees the claim committed meanwhile, not the holder's lapsed one."""
    holder, other = person(), person()
    task = _claimed_then_lapsed(holder)
    one, two = second_waits_for_first(
        lambda: claims.task_claim(actor=other, task_id=task.pk), lambda: sign(holder, task, "reject")
    )
    assert one.error is None, one.error
    assert isinstance(two.error, Conflict), two.error or two.result
    assert two.error.field == "claim" and f"{other.username} has claimed this task" in two.error.message
    decisions, status, claim, trail, resumes = _written(task)
    assert (decisions, status, resumes) == ([], TaskStatus.PENDING, 0)
    assert claim is not None and claim[0] == other.pk
    assert [a for a in trail if a.startswith("decision.")] == []


def test_a_decision_that_reached_the_task_before_the_other_claim_is_kept_and_the_late_claim_refused():
    """The other order: nobody held an active claim when the holder's decision took the task's lock (a lapsed
    claim refuses no one), so it is made; the claim queued behind it finds the task decided."""
    holder, other = person(), person()
    task = _claimed_then_lapsed(holder)
    one, two = second_waits_for_first(
        lambda: sign(holder, task, "reject"), lambda: claims.task_claim(actor=other, task_id=task.pk)
    )
    assert one.error is None, one.error
    assert isinstance(two.error, Conflict), two.error or two.result
    assert two.error.field == "task_id" and "nothing to claim" in two.error.message
    decisions, status, claim, trail, _ = _written(task)
    assert [d.actor_id for d in decisions] == [holder.pk] and status == TaskStatus.DECIDED
    assert claim is None or claim[0] == holder.pk  # never the late claimant's
    assert AuditAction.DECISION_MADE in trail and AuditAction.TASK_CLAIMED in trail
    assert trail.count(AuditAction.TASK_CLAIMED) == 1  # the holder's own, before it lapsed
