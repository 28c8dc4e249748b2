"""Signatures racing for one task: each is judged on what the other committed, never on a stale read.

The second signer's locking read waits for the first's transaction. What the decision is judged
against (the claim, the earlier signatures, the sibling tasks: ``task_rows.decision_grounds``) is
read by a statement after that wait, so it sees the first signature: two approvals of a four-eyes
task make exactly one final approval and one resume, and one approver racing themself signs once.
(Read in the locking statement itself, it would be the snapshot from before the wait: the second
approval would not complete the quorum, and a second signature by the same approver would count.)

The race is controlled, not timed (``tests.approvals.races``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from approvals import claims, services
from approvals.errors import Conflict
from approvals.models import ApprovalTask, AuditAction, AuditEvent, Decision, TaskClaim, TaskStatus
from approvals.payloads import DecisionRequest
from runtime.models import Run, RunKind
from tests.approvals.handoffs import person
from tests.approvals.races import second_waits_for_first
from tests.factories import loan_gate, task_make
from tests.fake_resumes import fake_resumes_closed  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("live_db", "fake_resumes_closed")


def _sign(actor: Any, task: ApprovalTask, outcome: str = "approve") -> Decision:
    request = DecisionRequest(outcome=outcome, reason="race")
    signer = services.Signer(authenticated_at=timezone.now())
    return services.task_decide(actor=actor, task_id=task.pk, request=request, signer=signer)


def _quorum(approvals: int) -> ApprovalTask:
    return task_make(payload=loan_gate(required_approvals=approvals))


def _audited(task: ApprovalTask) -> list[tuple[str, dict[str, Any]]]:
    events = AuditEvent.objects.filter(subject_type="task", subject_id=str(task.pk)).order_by("id")
    return [
        (e.action, e.details["quorum"])
        for e in events
        if e.action in (AuditAction.DECISION_RECORDED, AuditAction.DECISION_MADE)
    ]


def test_two_approvers_at_once_complete_a_four_eyes_quorum_once():
    task = _quorum(2)
    first, second = person("approver"), person("approver")
    one, two = second_waits_for_first(lambda: _sign(first, task), lambda: _sign(second, task))
    assert one.error is None and two.error is None, (one.error, two.error)

    assert one.result.run_id is None  # the first approval leaves the task waiting
    resume = Run.objects.get(thread_id=task.thread_id, kind=RunKind.RESUME)
    assert two.result.run_id == resume.id
    assert set(Decision.objects.filter(task=task).values_list("actor", "run")) == {
        (first.pk, resume.id),  # carried by the resume with the final approval
        (second.pk, resume.id),
    }
    assert ApprovalTask.objects.get(pk=task.pk).status == TaskStatus.DECIDED
    assert _audited(task) == [
        (AuditAction.DECISION_RECORDED, {"approvals": 1, "required": 2, "met": False}),
        (AuditAction.DECISION_MADE, {"approvals": 2, "required": 2, "met": True}),
    ]


def test_one_approver_racing_themself_signs_once():
    task = _quorum(2)
    approver = person("approver")
    one, two = second_waits_for_first(lambda: _sign(approver, task), lambda: _sign(approver, task))
    assert one.error is None, one.error
    assert isinstance(two.error, Conflict) and "already signed" in two.error.message

    assert list(Decision.objects.filter(task=task).values_list("actor", flat=True)) == [approver.pk]
    assert ApprovalTask.objects.get(pk=task.pk).status == TaskStatus.PENDING
    assert not Run.objects.filter(thread_id=task.thread_id, kind=RunKind.RESUME).exists()
    assert _audited(task) == [(AuditAction.DECISION_RECORDED, {"approvals": 1, "required": 2, "met": False})]


def test_two_rejections_at_once_meet_a_rejection_quorum_once():
    payload = {**loan_gate(), "rejections_required": 2}
    task = task_make(payload=payload)
    first, second = person(), person()
    one, two = second_waits_for_first(lambda: _sign(first, task, "reject"), lambda: _sign(second, task, "reject"))
    assert one.error is None and two.error is None, (one.error, two.error)
    assert [a for a, _ in _audited(task)] == [AuditAction.DECISION_RECORDED, AuditAction.DECISION_MADE]
    assert ApprovalTask.objects.get(pk=task.pk).status == TaskStatus.DECIDED


def test_a_claim_taken_while_a_decision_waits_for_the_task_refuses_it():
    task = task_make()
    holder, other = person(), person()
    one, two = second_waits_for_first(
        lambda: claims.task_claim(actor=holder, task_id=task.pk), lambda: _sign(other, task)
    )
    assert one.error is None, one.error
    assert isinstance(two.error, Conflict) and two.error.field == "claim" and holder.username in two.error.message
    assert not Decision.objects.filter(task=task).exists()
    assert TaskClaim.objects.get(task=task).user_id == holder.pk
