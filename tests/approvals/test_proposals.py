"""Four-eyes: an approval approves exactly the proposal it saw, and counts only for it.

Under separation of duties an edit is a proposal. A proposal made after an approval supersedes it (it approved
something else); an approval sent with the evidence digest of the page before a proposal is refused; an
approval's record (signed action, audit details) is of the proposal it approves.

In-process (one transaction per test, rolled back; no worker: ``tests.factories`` opens tasks through the
services, as a run stopping at a gate does). ``tests/security/test_four_eyes_proposals.py`` drives the same
through the API with a worker and the bank.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.utils import timezone

from approvals import assignment, services
from approvals.abilities import approvals_remaining, superseded, task_abilities
from approvals.audit import canonical
from approvals.errors import Conflict
from approvals.intent import decision_digest
from approvals.models import ApprovalTask, AuditAction, AuditEvent, Decision
from approvals.payloads import DecisionRequest
from tests.approvals.guards import user_make
from tests.factories import loan_gate, task_make

pytestmark = pytest.mark.django_db


def decide(actor: Any, task: ApprovalTask, outcome: str = "approve", **fields: Any) -> Decision:
    request = DecisionRequest(outcome=outcome, reason=fields.pop("reason", "r"), **fields)
    signer = services.Signer(authenticated_at=timezone.now())
    return services.task_decide(actor=actor, task_id=task.pk, request=request, signer=signer)


def digest_for(user: Any, task: ApprovalTask) -> str:
    """What GET /api/tasks/{id} shows ``user`` as the evidence digest."""
    return services.evidence_digest(task=task, redaction=services.redaction_policy(user, task))


def event_of(decision: Decision) -> dict[str, Any]:
    actions = (AuditAction.DECISION_MADE, AuditAction.DECISION_RECORDED)
    events = AuditEvent.objects.filter(subject_id=str(decision.task_id), action__in=actions)
    return events.get(details__decision=str(decision.pk)).details


@pytest.fixture
def people() -> dict[str, Any]:
    return {
        "rev1": user_make("reviewer", "*"),
        "lead": user_make("reviewer", "*"),
        "appr": user_make("approver", "*"),
        "appr2": user_make("approver", "*"),
        "admin": user_make("admin", "*"),
    }


def two_approvals() -> ApprovalTask:
    return task_make(payload=loan_gate(20000, required_approvals=2))


# --- the evidence digest names the proposal ---------------------------------------------------------


def test_a_new_proposal_changes_the_evidence_digest(people):
    task = two_approvals()
    before = digest_for(people["appr"], task)
    decide(people["rev1"], task, "edit", state_patch={"amount": 15000})
    first = digest_for(people["appr"], task)
    decide(people["lead"], task, "edit", state_patch={"amount": 90000})
    assert len({before, first, digest_for(people["appr"], task)}) == 3


def test_an_approval_sent_with_the_digest_from_before_a_new_proposal_is_refused(people):
    """The compliance review's attack: appr saw 15,000, lead raised it to 90,000, appr's approval counted for it."""
    task = two_approvals()
    decide(people["rev1"], task, "edit", state_patch={"amount": 15000})
    seen = digest_for(people["appr"], task)
    decide(people["lead"], task, "edit", state_patch={"amount": 90000})
    with pytest.raises(Conflict, match="a new proposal was made since you viewed this task") as error:
        decide(people["appr"], task, evidence_digest=seen, checkpoint_id=task.checkpoint_id)
    assert error.value.field == "evidence_digest"
    assert not Decision.objects.filter(task=task, actor=people["appr"]).exists()


def test_an_approval_with_the_digest_of_the_current_proposal_counts(people):
    task = two_approvals()
    decide(people["rev1"], task, "edit", state_patch={"amount": 15000})
    decision = decide(people["appr"], task, evidence_digest=digest_for(people["appr"], task))
    assert decision.meaning == "approved"
    assert event_of(decision)["quorum"] == {"approvals": 1, "required": 2, "met": False}


def test_a_task_without_a_proposal_keeps_the_digest_it_had():
    """A client holding the digest of a task nobody edited is not refused by this change."""
    task = two_approvals()
    old = {"payload": task.payload_digest, "checkpoint": task.checkpoint_id, "redaction": []}
    assert services.evidence_digest(task=task, redaction=[]) == hashlib.sha256(canonical(old).encode()).hexdigest()


# --- an approval counts only for the proposal it approved ------------------------------------------


def test_a_proposal_supersedes_the_approvals_given_before_it(people):
    task = two_approvals()
    first = decide(people["appr"], task)
    assert approvals_remaining(task, task.decisions.all()) == 1
    proposal = decide(people["lead"], task, "edit", state_patch={"amount": 90000})
    made = list(task.decisions.all())
    assert approvals_remaining(task, made) == 2
    assert [d.pk for d in superseded(made)] == [first.pk]
    assert event_of(proposal)["supersedes"] == [str(first.pk)]
    assert event_of(proposal)["quorum"] == {"approvals": 0, "required": 2, "met": False}
    assert task_abilities(people["appr2"], task).approvals == 0

    # One approval of the new proposal is not the quorum: the task stays open.
    second = decide(people["appr2"], task)
    assert event_of(second)["quorum"] == {"approvals": 1, "required": 2, "met": False}
    assert ApprovalTask.objects.get(pk=task.pk).status == "pending"


def test_a_signer_whose_approval_was_superseded_may_approve_the_new_proposal(people):
    task = two_approvals()
    old = decide(people["appr"], task)
    decide(people["lead"], task, "edit", state_patch={"amount": 90000})
    assert task_abilities(people["appr"], task).decide
    assert assignment.assignee_refusal(task=task, user=people["appr"]) is None
    decide(people["appr2"], task)
    again = decide(people["appr"], task)
    assert event_of(again)["quorum"] == {"approvals": 2, "required": 2, "met": True}
    assert ApprovalTask.objects.get(pk=task.pk).status == "decided"
    assert Decision.objects.filter(pk=old.pk).exists()  # the superseded approval stays on record


def test_a_signer_whose_approval_still_stands_cannot_sign_again(people):
    task = task_make(payload=loan_gate(20000, required_approvals=3))
    decide(people["appr"], task)
    with pytest.raises(Conflict, match="already signed"):
        decide(people["appr"], task)


def test_a_proposer_cannot_approve_even_after_a_later_proposal(people):
    task = two_approvals()
    decide(people["rev1"], task, "edit", state_patch={"amount": 15000})
    decide(people["lead"], task, "edit", state_patch={"amount": 90000})
    assert not task_abilities(people["rev1"], task).decide
    with pytest.raises(Conflict, match="already signed"):
        decide(people["rev1"], task)


def test_an_edit_under_separation_of_duties_needs_the_required_approvals_from_others(people):
    """The proposer's edit does not count: an edit plus required_approvals=2 takes three people."""
    task = two_approvals()
    proposal = decide(people["rev1"], task, "edit", state_patch={"amount": 15000})
    assert proposal.meaning == "reviewed"
    decide(people["appr"], task)
    assert ApprovalTask.objects.get(pk=task.pk).status == "pending"
    decide(people["appr2"], task)
    assert ApprovalTask.objects.get(pk=task.pk).status == "decided"


# --- an approval's record shows what it approved ---------------------------------------------------


def test_an_approval_after_an_edit_signs_the_edited_action_and_names_the_proposal(people):
    task = task_make(payload=loan_gate(18000, required_approvals=2))
    proposal = decide(people["rev1"], task, "edit", state_patch={"amount": 15000})
    first = decide(people["appr"], task)
    final = decide(people["appr2"], task)
    for approval in (first, final):
        assert approval.signed_action == {"name": "disburse", "args": {"amount": 15000, "term_months": 24}}
        assert approval.signed_digest == decision_digest(approval)
        details = event_of(approval)
        assert details["signed_action"]["args"]["amount"] == 15000
        assert details["proposal"] == {
            "decision": str(proposal.pk),
            "signer": proposal.signer_name,
            "state_patch": {"amount": 15000},
            "action_args": None,
        }


def test_an_approval_after_an_argument_edit_signs_the_edited_argument(people):
    task = task_make(payload=loan_gate(18000, required_approvals=2))
    proposal = decide(people["rev1"], task, "edit", action_args={"term_months": 12})
    approval = decide(people["appr"], task)
    assert approval.signed_action == {"name": "disburse", "args": {"amount": 18000, "term_months": 12}}
    assert event_of(approval)["proposal"]["action_args"] == {"term_months": 12}
    assert event_of(approval)["proposal"]["decision"] == str(proposal.pk)


def test_an_edits_record_holds_the_values_it_replaced(people):
    """An examiner reading an export saw an edit's new amount only: the value it replaced had to be inferred
    from the thread's start. The decision's event now holds both."""
    task = task_make(payload=loan_gate(18000, required_approvals=2), values={"amount": 18000})
    proposal = decide(people["rev1"], task, "edit", state_patch={"amount": 15000, "term_months": 12})
    details = event_of(proposal)
    assert details["state_patch"] == {"amount": 15000, "term_months": 12}
    assert details["state_before"] == {"amount": 18000, "term_months": None}  # a key the state did not hold
    assert event_of(decide(people["appr"], task))["state_before"] is None  # an approval changes no value


def test_a_second_signature_by_the_same_person_is_refused_and_audited(people):
    """ "Refusals are audited" (README): the proposer trying the approval of their own proposal, or a signer
    signing twice, was a 409 that left no ``decision.refused`` (outside re-test)."""
    task = two_approvals()
    decide(people["rev1"], task, "edit", state_patch={"amount": 15000})
    with pytest.raises(Conflict, match="you have already signed this task") as refused:
        decide(people["rev1"], task)
    assert refused.value.status == 409
    [event] = AuditEvent.objects.filter(subject_id=str(task.pk), action=AuditAction.DECISION_REFUSED)
    assert (event.actor_id, event.details["rule"], event.details["outcome"]) == (
        people["rev1"].pk,
        "separation_of_duties.signed_once",
        "approve",
    )


def test_a_signer_is_told_why_they_may_not_decide_again(people):
    """A signer whose signature stands read ``can_decide: false`` with ``approve_refused`` and ``decide_refused``
    both null: nothing said why, though a decision was a 409 (outside QA). It says so now, in the 409's words."""
    task = two_approvals()
    before = task_abilities(people["rev1"], task)
    assert before.decide and before.decide_refused is None
    decide(people["rev1"], task, "edit", state_patch={"amount": 15000})
    signed = task_abilities(people["rev1"], task)
    assert not signed.decide
    assert signed.decide_refused is not None and signed.decide_refused.rule == "separation_of_duties.signed_once"
    with pytest.raises(Conflict) as refused:
        decide(people["rev1"], task)
    assert refused.value.message == signed.decide_refused.message
    # Someone who has not signed may still decide, and is told nothing of the kind.
    other = task_abilities(people["appr"], task)
    assert other.decide and other.decide_refused is None
