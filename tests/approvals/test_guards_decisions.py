"""task_decide's checks, each as the decision someone would slip past it.

A reviewer deciding from a stale screen or on evidence that changed under them, a second signature by the same
person, the thread's starter or a reviewer completing a four-eyes quorum, a sign-in too old to sign with, a
rejection without a reason, a redacted value sent back as an edit, an edit of a field the gate does not allow.
Every refusal leaves nothing written (the transaction rolls back), and a refusal by policy is audited.

In-process (one transaction per test, rolled back; no worker: ``tests.factories`` opens tasks through the runtime
and domain services, as a run stopping at a gate does): written against the surviving mutants of
``approvals/services.py`` (docs/mutation-testing.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from approvals import assignment, services
from approvals.abilities import Refusal, approvals_remaining, task_abilities
from approvals.audit import audit_record
from approvals.claims import claim_put
from approvals.errors import Conflict, Forbidden, InvalidInput, NotFound
from approvals.models import ApprovalTask, AuditAction, AuditEvent, Decision, TaskClaim, TaskStatus
from approvals.payloads import DecisionRequest
from approvals.redaction import MASK
from runtime.gatekeeper import gate_payload
from runtime.models import Branch, BranchKind, Run, RunKind, RunStatus, Thread, ThreadStatus
from tests.approvals.guards import user_make
from tests.factories import loan_gate, task_decided, task_make

pytestmark = pytest.mark.django_db

LOAN = "loan_approval"  # reasons required to edit and reject (tests/graphs/langgraph.json)
KYC = "kyc_onboarding"  # sensitive paths: applicant.date_of_birth, documents[*].number
PASSWORD = "correct horse battery staple"


def fresh() -> services.Signer:
    return services.Signer(authenticated_at=timezone.now())


def stale(**proof: Any) -> services.Signer:
    return services.Signer(authenticated_at=timezone.now() - timedelta(days=1), **proof)


def decide(actor: Any, task: ApprovalTask, outcome: str = "approve", *, signer: Any = None, **fields: Any) -> Decision:
    request = DecisionRequest(outcome=outcome, **fields)
    return services.task_decide(actor=actor, task_id=task.pk, request=request, signer=signer or fresh())


def quorum(approvals: int, **task: Any) -> ApprovalTask:
    """A task of a gate asking for ``approvals`` approvals (the payload says so, as a graph's gate does)."""
    return task_make(payload=loan_gate(required_approvals=approvals), **task)


def decisions_of(task: ApprovalTask) -> int:
    return Decision.objects.filter(task=task).count()


def refusals_of(task: ApprovalTask) -> list[dict[str, Any]]:
    events = AuditEvent.objects.filter(action=AuditAction.DECISION_REFUSED, subject_id=str(task.pk))
    return [e.details for e in events.order_by("id")]


@pytest.fixture
def reviewer():
    return user_make("reviewer", "*", password=PASSWORD)


@pytest.fixture
def approver():
    return user_make("approver", "*", password=PASSWORD)


# --- the task and the thread as the reviewer saw them ---------------------------------------------


def test_a_decision_from_a_stale_screen_is_refused(reviewer):
    task = task_make()
    with pytest.raises(Conflict) as error:
        decide(reviewer, task, checkpoint_id="a-checkpoint-seen-earlier")
    assert error.value.field == "checkpoint_id"
    assert decisions_of(task) == 0
    decide(reviewer, task, checkpoint_id=task.checkpoint_id)  # the current one is accepted
    assert decisions_of(task) == 1


def test_a_thread_that_moved_to_another_checkpoint_cannot_be_decided_on_the_old_one(reviewer):
    task = task_make()
    # Staged by hand: what a run of another process does to the thread between the page load and the decision.
    Thread.objects.filter(pk=task.thread_id).update(checkpoint_id="a-later-checkpoint")
    with pytest.raises(Conflict, match="moved on") as error:
        decide(reviewer, task)
    assert error.value.field == "checkpoint_id"
    assert decisions_of(task) == 0


@pytest.mark.parametrize("status", [ThreadStatus.BUSY, ThreadStatus.COMPLETED, ThreadStatus.CANCELLED])
def test_a_thread_no_longer_waiting_cannot_be_decided(reviewer, status):
    task = task_make()
    Thread.objects.filter(pk=task.thread_id).update(status=status)  # staged: another process moved the thread
    with pytest.raises(Conflict, match="moved on"):
        decide(reviewer, task)
    assert decisions_of(task) == 0


@pytest.mark.parametrize("status", ["decided", "superseded", "cancelled"])
def test_a_task_no_longer_pending_cannot_be_decided_again(reviewer, approver, status):
    if status == "decided":
        task = task_decided(by=approver)
    elif status == "superseded":
        task = task_make(status=status)
    else:  # withdrawn with its rolled-back run (approvals.run_cancel needs a running run): staged by hand
        task = task_make()
        ApprovalTask.objects.filter(pk=task.pk).update(status=status)
    before = decisions_of(task)
    with pytest.raises(Conflict, match=f"this task is {status}") as error:
        decide(reviewer, task)
    assert error.value.field == "task_id"
    assert decisions_of(task) == before


def test_evidence_that_changed_since_it_was_reviewed_is_refused(reviewer):
    task = task_make()
    shown = services.evidence_digest(task=task, redaction=[])
    # Forged on purpose: a task whose recorded payload no longer matches what the reviewer was shown.
    ApprovalTask.objects.filter(pk=task.pk).update(payload_digest="0" * 64)
    with pytest.raises(Conflict) as error:
        decide(reviewer, task, evidence_digest=shown)
    assert error.value.field == "evidence_digest"
    assert decisions_of(task) == 0


def test_the_evidence_the_reviewer_saw_is_accepted_and_recorded(reviewer):
    task = task_make()
    shown = services.evidence_digest(task=task, redaction=[])
    decision = decide(reviewer, task, evidence_digest=shown)
    assert decision.evidence_digest == shown
    assert decision.checkpoint_id == task.checkpoint_id
    assert decision.payload_digest == task.payload_digest


def test_the_evidence_digest_binds_the_payload_the_checkpoint_and_the_redaction():
    task = task_make()
    digest = services.evidence_digest(task=task, redaction=[])
    moved = ApprovalTask(payload=task.payload, payload_digest=task.payload_digest, checkpoint_id="another")
    changed = ApprovalTask(payload=task.payload, payload_digest="1" * 64, checkpoint_id=task.checkpoint_id)
    assert services.evidence_digest(task=moved, redaction=[]) != digest
    assert services.evidence_digest(task=changed, redaction=[]) != digest
    assert services.evidence_digest(task=task, redaction=["details.risk_score"]) != digest
    assert services.evidence_digest(task=task, redaction=[]) == digest


def test_a_reader_of_masked_values_is_bound_to_the_payload_as_shown_to_them():
    """A digest of the real payload would let a reviewer test guesses of a masked value against it."""
    payload = {"applicant": {"date_of_birth": "1815-12-10"}, "title": "KYC"}
    guessed = {"applicant": {"date_of_birth": "1815-12-11"}, "title": "KYC"}
    real = ApprovalTask(payload=payload, payload_digest=services.payload_digest(payload), checkpoint_id="c")
    guess = ApprovalTask(payload=guessed, payload_digest=services.payload_digest(guessed), checkpoint_id="c")
    paths = ["applicant.date_of_birth"]
    assert services.evidence_digest(task=real, redaction=paths) == services.evidence_digest(task=guess, redaction=paths)
    assert services.evidence_digest(task=real, redaction=[]) != services.evidence_digest(task=guess, redaction=[])


def test_a_reviewer_without_the_reveal_right_signs_under_the_graphs_redaction(reviewer, approver):
    task = task_make(graph=KYC, node="compliance_review")
    assert services.redaction_policy(reviewer, task) == ["applicant.date_of_birth", "documents[*].number"]
    assert services.redaction_policy(approver, task) == []
    decision = decide(reviewer, task)
    assert decision.redacted_paths == ["applicant.date_of_birth", "documents[*].number"]
    assert decision.evidence_digest == services.evidence_digest(task=task, redaction=decision.redacted_paths)


# --- who may decide -------------------------------------------------------------------------------


def test_a_reviewer_of_another_graph_is_told_the_task_does_not_exist():
    outsider = user_make("reviewer", "kyc_review")
    task = task_make()
    with pytest.raises(NotFound):
        decide(outsider, task)
    assert decisions_of(task) == 0


def test_a_reviewer_assigned_to_another_gate_cannot_decide_this_one():
    reviewer = user_make("reviewer", (LOAN, "final_signoff"))
    task = task_make()
    with pytest.raises(Forbidden, match="not assigned to the gate"):
        decide(reviewer, task)
    assert decisions_of(task) == 0


def test_a_task_someone_else_claimed_cannot_be_decided_and_the_holder_can(reviewer):
    """Claims are checked inline by task_decide (approvals.claims), on every surface."""
    holder = user_make("reviewer", LOAN)
    task = task_make()
    claim_put(task=task, user=holder)
    with pytest.raises(Conflict, match="has claimed this task") as refused:
        decide(reviewer, task)
    assert refused.value.field == "claim"
    assert decisions_of(task) == 0
    decide(holder, task)
    assert decisions_of(task) == 1
    assert not TaskClaim.objects.filter(task_id=task.pk).exists()  # the holder's decision ends the claim


def test_an_expired_claim_does_not_block_a_decision(reviewer):
    holder = user_make("reviewer", LOAN)
    task = task_make()
    claim_put(task=task, user=holder)
    TaskClaim.objects.filter(task_id=task.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    decide(reviewer, task)
    assert decisions_of(task) == 1


# --- reasons ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "   \n"])
def test_a_rejection_without_a_reason_is_refused_where_the_graph_requires_one(reviewer, reason):
    task = task_make()
    with pytest.raises(InvalidInput) as error:
        decide(reviewer, task, "reject", reason=reason)
    assert error.value.field == "reason"
    assert decisions_of(task) == 0


def test_an_approval_without_a_reason_is_accepted_where_the_graph_makes_it_optional(reviewer):
    task = task_make()
    assert decide(reviewer, task).reason == ""


def test_a_task_of_a_graph_no_longer_registered_requires_a_reason_to_reject_but_not_to_approve(reviewer):
    rejected, approved = task_make(graph="retired_graph"), task_make(graph="retired_graph")
    with pytest.raises(InvalidInput) as error:
        decide(reviewer, rejected, "reject")
    assert error.value.field == "reason"
    assert decide(reviewer, approved).outcome == "approve"


def test_a_gate_policy_can_require_a_reason_to_approve(reviewer):
    task = task_make(graph="gate_policy_review", node="legal", payload={"question": "ok?"})
    with pytest.raises(InvalidInput):
        decide(reviewer, task)
    other_gate = task_make(graph="gate_policy_review", node="risk", payload={"question": "ok?"})
    assert decide(reviewer, other_gate).outcome == "approve"


# --- one person, one signature; quorums -------------------------------------------------------------


def test_the_same_person_cannot_sign_a_quorum_task_twice(approver):
    task = quorum(2)
    decide(approver, task)
    with pytest.raises(Conflict, match="already signed") as error:
        decide(approver, task)
    assert error.value.field == "task_id"
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING and decisions_of(task) == 1


def test_a_quorum_completes_with_the_last_required_signature_only(approver):
    second = user_make("approver", "*")
    task = quorum(2)
    first_decision = decide(approver, task)
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING
    assert first_decision.meaning == "approved"
    assert not Run.objects.filter(thread=task.thread_id, kind=RunKind.RESUME).exists()  # nothing resumes yet
    recorded = AuditEvent.objects.get(subject_id=str(task.pk), action=AuditAction.DECISION_RECORDED)
    assert recorded.details["quorum"] == {"approvals": 1, "required": 2, "met": False}

    decide(second, task)
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED and task.decided_at is not None
    made = AuditEvent.objects.get(subject_id=str(task.pk), action=AuditAction.DECISION_MADE)
    assert made.details["quorum"] == {"approvals": 2, "required": 2, "met": True}
    assert Run.objects.filter(thread=task.thread_id, kind=RunKind.RESUME).count() == 1  # the thread resumes once


def test_a_proposed_edit_does_not_count_towards_the_quorum(approver):
    """Under a quorum an edit is a proposal ("reviewed"): the two approvals must both come after it."""
    task = quorum(2)
    proposal = decide(approver, task, "edit", reason="lower it", state_patch={"amount": 1000})
    assert proposal.meaning == "reviewed"
    decide(user_make("approver", "*"), task)
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING  # one approval of two: the proposal is not one
    recorded = AuditEvent.objects.filter(subject_id=str(task.pk), action=AuditAction.DECISION_RECORDED)
    assert [e.details["quorum"]["approvals"] for e in recorded.order_by("id")] == [0, 1]
    decide(user_make("approver", "*"), task)
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED


def test_the_final_signature_of_a_quorum_needs_the_approver_role(approver, reviewer):
    task = quorum(2)
    decide(reviewer, task)  # a reviewer may give an earlier signature
    with pytest.raises(Forbidden) as error:
        decide(user_make("reviewer", "*"), task)
    assert error.value.message == "the final approval of a multi-approver task needs the approver role"
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING
    assert [r["rule"] for r in refusals_of(task)] == ["quorum.final_approver"]
    decide(approver, task)
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED


def test_a_single_approval_task_is_decided_by_a_reviewer(reviewer):
    task = task_make()
    decision = decide(reviewer, task)
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED
    assert decision.meaning == "approved"
    assert AuditEvent.objects.filter(subject_id=str(task.pk), action=AuditAction.DECISION_MADE).exists()


def test_one_rejection_rejects_unless_the_gate_asks_for_more(reviewer):
    task = task_make()
    decision = decide(reviewer, task, "reject", reason="no")
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED and decision.meaning == "rejected"

    payload = gate_payload(title="Loan", rejections_required=2)
    two = task_make(payload=payload)
    decide(reviewer, two, "reject", reason="no")
    two.refresh_from_db()
    assert two.status == TaskStatus.PENDING
    decide(user_make("reviewer", "*"), two, "reject", reason="no either")
    two.refresh_from_db()
    assert two.status == TaskStatus.DECIDED


# --- separation of duties ---------------------------------------------------------------------------


def test_the_starter_cannot_give_the_final_approval_of_a_quorum(approver):
    second = user_make("approver", "*")
    task = quorum(2, created_by=approver)
    decide(second, task)
    with pytest.raises(Forbidden, match="you started this thread"):
        decide(approver, task)
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING
    assert refusals_of(task) == [
        {
            "rule": "separation_of_duties.starter",
            "message": "you started this thread, so you cannot give its final approval (separation of duties)",
            "outcome": "approve",
        }
    ]
    # The refusal is on the record although the decision's transaction rolled back: who, what, where.
    refusal = AuditEvent.objects.get(action=AuditAction.DECISION_REFUSED, subject_id=str(task.pk))
    assert (refusal.actor_id, refusal.subject_type, refusal.thread_id, refusal.graph) == (
        approver.pk,
        "task",
        task.thread_id,
        LOAN,
    )


@pytest.mark.parametrize("kind", [RunKind.START, RunKind.REPLAY])
def test_who_started_the_threads_run_is_its_starter_whoever_created_the_thread(approver, kind):
    """The check read the thread's creator alone: an operator created the thread (/lg/ threads.create),
    an admin started its run with their input, and the admin then gave the final approval."""
    second = user_make("approver", "*")
    task = quorum(2, created_by=user_make("operator", "*"))
    Run.objects.create(thread=task.thread, kind=kind, status=RunStatus.SUCCEEDED, created_by=approver)
    decide(second, task)
    with pytest.raises(Forbidden, match="you started this thread"):
        decide(approver, task)
    assert decisions_of(task) == 1
    with pytest.raises(Forbidden, match="started this thread"):  # nor may they be handed it
        assignment.task_reassign(actor=user_make("lead", "*"), task=task, to_user=approver, note="")
    # a resume run that carried decisions is theirs, not a start: its author is no starter
    resumer = user_make("approver", "*")
    resumed = Run.objects.create(
        thread=task.thread, kind=RunKind.RESUME, status=RunStatus.SUCCEEDED, created_by=resumer
    )
    Decision.objects.filter(task=task).update(run=resumed)
    decide(resumer, task)
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED


def _forked_by(user: Any, task: ApprovalTask) -> None:
    Branch.objects.create(
        thread=task.thread,
        kind=BranchKind.FORK,
        from_checkpoint_id=task.checkpoint_id,
        reason="what if",
        created_by=user,
    )


def _continued_by(user: Any, task: ApprovalTask) -> None:
    Run.objects.create(thread=task.thread, kind=RunKind.RESUME, status=RunStatus.SUCCEEDED, created_by=user)


def _state_updated_by(user: Any, task: ApprovalTask) -> None:
    audit_record(
        actor=user,
        action=AuditAction.THREAD_STATE_UPDATED,
        subject_type="thread",
        subject_id=task.thread_id,
        thread_id=task.thread_id,
        graph=task.graph,
        details={"values": {"amount": 77}},
    )


@pytest.mark.parametrize("authored", [_forked_by, _continued_by, _state_updated_by])
def test_who_wrote_the_state_or_ran_it_on_is_a_starter_too(approver, authored):
    """An outside tester's find: fork the thread with new values (no run), continue it (a resume run no decision
    queued) and approve the task it opened, alone; or the same after an /lg/ update_state."""
    task = task_make(payload={**loan_gate(), "separation_of_duties": True}, created_by=user_make("operator", "*"))
    authored(approver, task)
    assert task_abilities(approver, task).approve_refused == Refusal(
        "separation_of_duties.starter",
        "you started this thread, so you cannot give its final approval (separation of duties)",
    )
    with pytest.raises(Forbidden, match="you started this thread"):
        decide(approver, task)
    assert decisions_of(task) == 0
    decide(user_make("approver", "*"), task)  # someone else gives it
    assert decisions_of(task) == 1


def test_the_starter_cannot_approve_a_gate_that_asks_for_separation_of_duties(approver):
    payload = {**loan_gate(), "separation_of_duties": True}
    task = task_make(payload=payload, created_by=approver)
    with pytest.raises(Forbidden, match="you started this thread"):
        decide(approver, task)
    assert decisions_of(task) == 0


def test_the_global_setting_applies_separation_of_duties_to_every_gate(approver, settings):
    settings.GATEHOUSE_SEPARATION_OF_DUTIES = True
    task = task_make(created_by=approver)
    with pytest.raises(Forbidden, match="you started this thread"):
        decide(approver, task)


def test_without_separation_of_duties_the_starter_may_approve(approver):
    task = task_make(created_by=approver)
    decide(approver, task)
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED


def test_under_separation_of_duties_an_edit_is_a_proposal_someone_else_approves(approver):
    payload = {**loan_gate(), "separation_of_duties": True}
    task = task_make(payload=payload)
    proposal = decide(approver, task, "edit", reason="lower it", state_patch={"amount": 1000})
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING
    assert proposal.meaning == "reviewed"
    with pytest.raises(Conflict, match="already signed"):  # the editor cannot approve their own edit
        decide(approver, task)
    decide(user_make("approver", "*"), task)
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED


def test_an_edit_approves_at_once_without_separation_of_duties(approver):
    task = task_make()
    decision = decide(approver, task, "edit", reason="lower it", state_patch={"amount": 1000})
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED
    assert decision.meaning == "approved" and decision.state_patch == {"amount": 1000}


def test_a_response_decides_at_once_and_counts_as_no_approval(reviewer):
    task = quorum(2)
    decision = decide(reviewer, task, "respond", message="see attached")
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED
    assert decision.meaning == "reviewed"


# --- re-authentication -------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["approve", "edit", "reject", "respond"])
def test_an_old_sign_in_must_re_enter_the_password_to_sign(reviewer, outcome):
    """A response closes the task as a rejection does (the action is not taken): an outside tester's stale
    sign-in was asked for the password to reject, not to respond."""
    task = task_make()
    fields = {"reason": "because", **({"state_patch": {"amount": 5}} if outcome == "edit" else {})}
    fields |= {"message": "noted"} if outcome == "respond" else {}
    with pytest.raises(Forbidden) as error:
        decide(reviewer, task, outcome, signer=stale(), **fields)
    assert error.value.field == "password"
    assert error.value.message == (
        "your sign-in is older than 15 min: re-enter your password (or a one-time code) to sign this decision"
    )
    assert decisions_of(task) == 0
    assert [r["rule"] for r in refusals_of(task)] == ["signature.reauthentication_required"]


def test_a_wrong_password_does_not_sign(reviewer):
    task = task_make()
    with pytest.raises(Forbidden) as error:
        decide(reviewer, task, signer=stale(password="guess"))
    assert (error.value.field, error.value.message) == ("password", "the password is not correct")
    assert decisions_of(task) == 0
    assert [r["rule"] for r in refusals_of(task)] == ["signature.reauthentication_failed"]


def test_the_right_password_signs_and_the_signature_records_when(reviewer):
    task = task_make()
    before = timezone.now()
    decision = decide(reviewer, task, signer=stale(password=PASSWORD))
    assert decision.reauthenticated_at is not None and decision.reauthenticated_at >= before


def _wrong_guesses(actor: Any, task: ApprovalTask, count: int) -> None:
    for _ in range(count):
        with pytest.raises(Forbidden) as error:
            decide(actor, task, signer=stale(password="guess"))
        assert error.value.message == "the password is not correct"


def test_password_guesses_at_the_signature_prompt_lock_it_as_sign_in_would(reviewer, settings):
    """The prompt checked the password itself, so sign-in's lockout never counted it: 30 guesses from an
    unattended browser, then the right password signed. After as many wrong ones in a row as sign-in
    allows, even the right one is refused until the cool-off has passed."""
    settings.AXES_FAILURE_LIMIT = 3
    task = task_make()
    _wrong_guesses(reviewer, task, 3)
    with pytest.raises(Forbidden) as error:
        decide(reviewer, task, signer=stale(password=PASSWORD))
    assert error.value.field == "password"
    assert error.value.message == "3 wrong passwords or codes in a row: signing is locked for 15 more minutes"
    with pytest.raises(Forbidden):  # a one-time code is no way around it
        decide(reviewer, task, signer=stale(otp="123456"))
    assert decisions_of(task) == 0
    assert [r["rule"] for r in refusals_of(task)][-3:] == [
        "signature.reauthentication_failed",
        *["signature.locked"] * 2,
    ]
    other = user_make("reviewer", "*", password=PASSWORD)  # the lock is the guesser's alone
    assert decide(other, task_make(), signer=stale(password=PASSWORD)).reauthenticated_at is not None
    settings.AXES_COOLOFF_TIME = 1e-9  # the cool-off has passed
    assert decide(reviewer, task, signer=stale(password=PASSWORD)).reauthenticated_at is not None


def test_a_signature_that_succeeds_starts_the_count_of_wrong_passwords_again(reviewer, settings):
    settings.AXES_FAILURE_LIMIT = 3
    first, second = task_make(), task_make()
    _wrong_guesses(reviewer, first, 2)
    decide(reviewer, first, signer=stale(password=PASSWORD))
    _wrong_guesses(reviewer, second, 2)
    assert decide(reviewer, second, signer=stale(password=PASSWORD)).reauthenticated_at is not None


def test_a_one_time_code_without_a_device_does_not_sign(reviewer):
    task = task_make()
    with pytest.raises(Forbidden) as error:
        decide(reviewer, task, signer=stale(otp="123456", password=PASSWORD))
    assert (error.value.field, error.value.message) == ("otp", "the one-time code is not valid")
    assert [r["rule"] for r in refusals_of(task)] == ["signature.otp_failed"]


def test_a_recent_sign_in_signs_without_re_entering_anything(reviewer):
    decision = decide(reviewer, task_make(), signer=services.Signer(authenticated_at=timezone.now()))
    assert decision.reauthenticated_at is None


def test_no_sign_in_time_at_all_counts_as_too_old(reviewer):
    with pytest.raises(Forbidden, match="re-enter your password"):
        decide(reviewer, task_make(), signer=services.Signer())


def test_a_sign_in_just_inside_the_window_still_signs(reviewer, settings):
    settings.GATEHOUSE_REAUTH_SECONDS = 600
    inside = services.Signer(authenticated_at=timezone.now() - timedelta(seconds=590))
    assert decide(reviewer, task_make(), signer=inside).reauthenticated_at is None
    outside = services.Signer(authenticated_at=timezone.now() - timedelta(seconds=610))
    with pytest.raises(Forbidden, match="older than 10 min:"):
        decide(reviewer, task_make(), signer=outside)


def test_a_window_under_a_minute_is_named_in_seconds(reviewer, settings):
    settings.GATEHOUSE_REAUTH_SECONDS = 30  # the shortest allowed: it used to read "older than 0 minutes"
    with pytest.raises(Forbidden, match="older than 30 s:"):
        decide(reviewer, task_make(), signer=services.Signer(authenticated_at=timezone.now() - timedelta(seconds=40)))


def test_a_re_authentication_signs_inside_its_window_only(reviewer, settings):
    """A re-authentication verified once for many decisions (a bulk) signs while it is recent, not after."""
    settings.GATEHOUSE_REAUTH_SECONDS = 600
    recent = timezone.now() - timedelta(seconds=30)
    decision = decide(reviewer, task_make(), signer=stale(reauthenticated_at=recent))
    assert decision.reauthenticated_at == recent
    task = task_make()
    too_old = timezone.now() - timedelta(seconds=610)
    with pytest.raises(Forbidden, match="older than 10 min:") as error:
        decide(reviewer, task, signer=stale(reauthenticated_at=too_old))
    assert error.value.field == "password"
    assert decisions_of(task) == 0


def test_a_response_vetoes_a_four_eyes_task_only_as_a_rejection_would(reviewer, approver):
    """A response closed a task whose gate asks for two rejections at once, past the rule that holds a single
    rejection back; its approvals_remaining then still said 1 on a task that was decided."""
    payload = {**loan_gate(required_approvals=2, decisions=["approve", "reject", "respond"]), "rejections_required": 2}
    task = task_make(payload=payload)
    decide(reviewer, task, "respond", message="not this way")
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING
    decide(approver, task, "reject", reason="no")
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED
    assert approvals_remaining(task, task.decisions.all()) == 0


# --- edits -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"state_patch": {"amount": MASK}}, "edits.amount"),
        ({"state_patch": {"applicant": {"date_of_birth": MASK}}}, "edits.applicant.date_of_birth"),
        ({"state_patch": {"documents": [{"number": "ok"}, {"number": MASK}]}}, "edits.documents[1].number"),
        ({"action_args": {"amount": MASK}}, "action_args.amount"),
        ({"decisions": [{"type": "approve"}, {"type": "edit", "args": {"x": MASK}}]}, "decisions[1].args.x"),
    ],
)
def test_a_redacted_value_sent_back_never_overwrites_the_real_one(approver, fields, where):
    task = task_make()
    with pytest.raises(InvalidInput) as error:
        decide(approver, task, "edit", reason="edit", **fields)
    assert error.value.field == where
    assert error.value.message == "this value is redacted for you and cannot be submitted as an edit"
    assert decisions_of(task) == 0


KYC_STATE = {
    "applicant": {"name": "Grace", "country": "US", "date_of_birth": "1906-12-09"},
    "documents": [{"type": "passport", "number": "P-77"}, {"type": "bill", "number": "B-12"}],
}


def kyc_task() -> ApprovalTask:
    return task_make(graph=KYC, node="compliance_review", payload={"title": "KYC"}, values=KYC_STATE)


@pytest.mark.parametrize(
    "edit",
    [
        {"applicant": {"name": "Renamed", "country": "US"}},  # the hidden field left out
        {"applicant": {"name": "Renamed", "country": "US", "date_of_birth": MASK}},  # the form's mask sent back
    ],
)
def test_a_masked_editor_changing_a_visible_field_keeps_the_hidden_one(reviewer, edit):
    """A state edit replaces the key's whole value: the date of birth the reviewer could not see was erased
    (or the form's own mask was refused, though the reviewer had left it as shown)."""
    decision = decide(reviewer, kyc_task(), "edit", reason="typo in the name", state_patch=edit)
    assert decision.state_patch == {"applicant": {"name": "Renamed", "country": "US", "date_of_birth": "1906-12-09"}}


def test_a_masked_editor_keeps_each_hidden_item_of_a_list(reviewer):
    edit = {"documents": [{"type": "passport", "number": MASK}, {"type": "utility bill"}, {"type": "visa"}]}
    decision = decide(reviewer, kyc_task(), "edit", reason="relabel", state_patch=edit)
    assert decision.state_patch == {
        "documents": [
            {"type": "passport", "number": "P-77"},
            {"type": "utility bill", "number": "B-12"},
            {"type": "visa"},  # a new item: nothing was hidden in it
        ]
    }


@pytest.mark.parametrize(
    "edit,where",
    [
        ({"applicant": {"name": "Grace", "date_of_birth": "1999-01-01"}}, "edits.applicant.date_of_birth"),
        ({"documents": [{"number": MASK}, {"number": "forged"}]}, "edits.documents[1].number"),
        # the hidden value itself, guessed right, is refused as a wrong guess is
        ({"documents": [{"number": "P-77"}, {"number": MASK}]}, "edits.documents[0].number"),
        ({"applicant": {"name": "Grace", "date_of_birth": "1906-12-09"}}, "edits.applicant.date_of_birth"),
    ],
)
def test_a_masked_editor_cannot_overwrite_what_they_cannot_see(reviewer, edit, where):
    task = kyc_task()
    with pytest.raises(InvalidInput) as error:
        decide(reviewer, task, "edit", reason="blind overwrite", state_patch=edit)
    assert error.value.field == where
    assert decisions_of(task) == 0


def test_a_guess_of_a_hidden_value_gets_the_same_answer_right_or_wrong(reviewer):
    """The stored value was accepted where the mask was shown and any other value refused, so a reviewer
    found a redacted date of birth by trying dates: the right one moved the refusal to the next field."""
    answers = []
    for guess in ("1906-12-08", "1906-12-09"):  # wrong, right
        task = kyc_task()
        edit = {"applicant": {"name": "Grace", "country": "US", "date_of_birth": guess}, "tier": "nonsense"}
        with pytest.raises(InvalidInput) as error:
            decide(reviewer, task, "edit", reason="probe", state_patch=edit)
        answers.append((error.value.field, error.value.message))
        assert decisions_of(task) == 0
    assert answers[0] == answers[1]


def test_an_editor_who_sees_the_values_may_change_them(approver):
    edit = {"applicant": {"name": "Grace", "date_of_birth": "1906-12-10"}}
    decision = decide(approver, kyc_task(), "edit", reason="corrected from the passport", state_patch=edit)
    assert decision.state_patch == edit  # and may remove a field: what they send is what they see


def test_an_edit_with_nothing_edited_is_refused(approver):
    task = task_make()
    with pytest.raises(InvalidInput) as error:
        decide(approver, task, "edit", reason="nothing")
    assert error.value.field == "edits"
    assert error.value.message == "an edit needs state edits or edited action arguments"


def test_an_edit_of_action_arguments_alone_is_an_edit(approver):
    task = task_make()
    decision = decide(approver, task, "edit", reason="cap it", action_args={"amount": 10})
    assert decision.signed_action == {"name": "disburse", "args": {"amount": 10, "term_months": 24}}


def test_state_edits_do_not_go_with_a_rejection(approver):
    task = task_make()
    with pytest.raises(InvalidInput) as error:
        decide(approver, task, "reject", reason="no", state_patch={"amount": 1})
    assert error.value.field == "edits"
    assert error.value.message == "state edits go with an edit or approve decision"
    assert decisions_of(task) == 0


def test_an_approval_with_state_edits_is_recorded_as_the_edit_it_is(approver):
    decision = decide(approver, task_make(), "approve", reason="cap it", state_patch={"amount": 1})
    assert (decision.outcome, decision.meaning, decision.state_patch) == ("edit", "approved", {"amount": 1})
    assert decision.resume_value["decision"] == "edit"


@pytest.mark.parametrize(
    "fields",
    [
        {"state_patch": {"amount": 4}},
        {"action_args": {"amount": 4}},
        {"resume": {"decision": "approve", "action_args": {"amount": 1}}},
    ],
)
def test_an_approval_that_changes_values_needs_the_edits_reason(approver, fields):
    """Approving with changed values slipped past the loan gate's "a reason is required to edit"."""
    task = task_make()
    with pytest.raises(InvalidInput) as error:
        decide(approver, task, "approve", **fields)
    assert (error.value.field, error.value.message) == ("reason", "a reason is required to edit")
    assert decisions_of(task) == 0


def test_an_approval_cannot_change_values_where_the_gate_allows_no_edit(approver):
    task = task_make(payload=loan_gate(decisions=["approve", "reject"]))
    with pytest.raises(InvalidInput) as error:
        decide(approver, task, "approve", reason="r", state_patch={"amount": 1})
    assert error.value.field == "edits"
    assert decisions_of(task) == 0


@pytest.mark.parametrize(
    "outcome,resume",
    [("reject", {"decision": "approve"}), ("approve", {"decision": "reject"}), ("respond", {"decision": "approve"})],
)
def test_a_decision_whose_resume_value_says_otherwise_is_refused(approver, outcome, resume):
    """Recorded as rejected while the graph was resumed with "approve" (and paid): the row and the resume
    value must say the same."""
    task = task_make()
    with pytest.raises(InvalidInput) as error:
        decide(approver, task, outcome, reason="r", message="m", resume=resume)
    assert error.value.field == "resume"
    assert decisions_of(task) == 0
    assert ApprovalTask.objects.get(pk=task.pk).status == TaskStatus.PENDING


def test_a_field_the_gate_does_not_allow_is_not_editable(approver):
    task = task_make()  # the loan gate allows amount and term_months
    with pytest.raises(InvalidInput) as error:
        decide(approver, task, "edit", reason="more income", state_patch={"income": 10**6})
    assert error.value.field == "edits.income"
    assert decisions_of(task) == 0


def test_an_edit_is_checked_against_the_state_schema(approver):
    with pytest.raises(InvalidInput) as error:
        decide(approver, task_make(), "edit", reason="x", state_patch={"amount": "a lot"})
    assert error.value.field == "edits.amount"
    assert error.value.message  # says what is wrong, not only where


def test_a_task_without_a_graph_has_no_state_to_edit(approver):
    task = task_make(graph="retired_graph")
    with pytest.raises(InvalidInput) as error:
        decide(approver, task, "edit", reason="x", state_patch={"amount": 1})
    assert (error.value.field, error.value.message) == ("edits", "this task has no graph state to edit")


def totp_device(user, *, confirmed: bool):
    from django_otp.plugins.otp_totp.models import TOTPDevice

    return TOTPDevice.objects.create(user=user, name="phone", confirmed=confirmed)


def current_code(device) -> str:
    from django_otp.oath import totp

    return f"{totp(device.bin_key, device.step, device.t0, device.digits, device.drift):06d}"


def test_a_code_from_a_confirmed_device_signs_instead_of_the_password(reviewer):
    device = totp_device(reviewer, confirmed=True)
    decision = decide(reviewer, task_make(), signer=stale(otp=current_code(device)))
    assert decision.reauthenticated_at is not None


def test_a_code_from_a_device_never_confirmed_does_not_sign(reviewer):
    """A device added but not confirmed (by whoever held the session for a moment) is no second factor."""
    device = totp_device(reviewer, confirmed=False)
    task = task_make()
    with pytest.raises(Forbidden, match="one-time code") as error:
        decide(reviewer, task, signer=stale(otp=current_code(device)))
    assert error.value.field == "otp"
    assert decisions_of(task) == 0


def test_a_wrong_code_does_not_sign_even_with_a_confirmed_device(reviewer):
    device = totp_device(reviewer, confirmed=True)
    wrong = f"{(int(current_code(device)) + 1) % 10**6:06d}"
    with pytest.raises(Forbidden, match="one-time code"):
        decide(reviewer, task_make(), signer=stale(otp=wrong))


def test_a_three_approval_quorum_needs_three_different_signers(approver):
    task = quorum(3)
    decide(approver, task)
    decide(user_make("approver", "*"), task)
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING  # two of three
    decide(user_make("approver", "*"), task)
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED


def test_three_required_rejections_are_three(reviewer):
    task = task_make(payload=gate_payload(title="Loan", rejections_required=3))
    decide(reviewer, task, "reject", reason="no")
    decide(user_make("reviewer", "*"), task, "reject", reason="no")
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING  # two of three
    decide(user_make("reviewer", "*"), task, "reject", reason="no")
    task.refresh_from_db()
    assert task.status == TaskStatus.DECIDED


def test_without_the_one_time_code_app_a_code_never_signs(reviewer, monkeypatch):
    device = totp_device(reviewer, confirmed=True)
    monkeypatch.setattr(services.django_apps, "is_installed", lambda name: name != "django_otp")
    with pytest.raises(Forbidden, match="one-time code"):
        decide(reviewer, task_make(), signer=stale(otp=current_code(device)))


def test_an_edit_of_a_task_whose_graph_is_gone_needs_a_reason_first(approver):
    with pytest.raises(InvalidInput) as error:
        decide(approver, task_make(graph="retired_graph"), "edit", state_patch={"amount": 1})
    assert error.value.field == "reason"


# --- sibling tasks: interrupts of one super-step resume in one command ----------------------------------------


def _sibling_of(task: ApprovalTask, node: str) -> ApprovalTask:
    """A second task opened at ``task``'s checkpoint (a parallel branch's interrupt), as the runtime opens it."""
    sibling = ApprovalTask.objects.get(pk=task.pk)
    sibling.pk, sibling.interrupt_id, sibling.node = None, f"{task.interrupt_id}-{node}", node
    sibling.save(force_insert=True)
    return ApprovalTask.objects.select_related("thread").get(pk=sibling.pk)


def test_a_sibling_tasks_edit_of_a_key_already_edited_for_the_same_resume_is_refused(reviewer, approver):
    """An outside tester's find: two reviewers edited one key on sibling interrupts; the resume's update kept the
    second value only, while the first decision's record (and audit) still said it signed "injected"."""
    first = task_make()
    second = _sibling_of(first, "score_risk")
    decide(reviewer, first, "edit", reason="cap it", state_patch={"amount": 1000})
    with pytest.raises(Conflict) as refused:
        decide(approver, second, "edit", reason="lower", state_patch={"amount": 500})
    assert refused.value.field == "edits.amount"
    assert "already edited by the decision on task" in refused.value.message
    assert decisions_of(second) == 0 and not Run.objects.filter(thread=first.thread, kind=RunKind.RESUME).exists()
    # Another key is theirs to edit: the one resume carries both signed edits.
    decide(approver, second, "edit", reason="shorter", state_patch={"term_months": 12})
    resume = Run.objects.get(thread=first.thread, kind=RunKind.RESUME)
    assert resume.command["update"] == {"amount": 1000, "term_months": 12}
    assert set(resume.command["resume"]) == {first.interrupt_id, second.interrupt_id}


def test_a_quorums_later_signer_may_still_edit_what_an_earlier_signer_edited(reviewer, approver):
    """Only sibling tasks are held to one edit per key: on one task each signer sees the proposals before theirs."""
    task = quorum(2)
    decide(reviewer, task, "edit", reason="cap it", state_patch={"amount": 1000})
    decide(approver, task, "edit", reason="less", state_patch={"amount": 900})
    assert decisions_of(task) == 2


def test_a_repeated_decision_on_a_closed_task_is_told_its_own_went_through(reviewer, approver):
    """Decisions take no idempotency key: a client that lost the answer and sent the decision again got "this
    task is decided", which did not say whether the decision was its own."""
    task = task_make()
    made = decide(reviewer, task, "reject", reason="no")
    with pytest.raises(Conflict) as again:
        decide(reviewer, task, "reject", reason="no")
    assert f"your decision {made.pk} (reject, " in again.value.message and again.value.field == "task_id"
    with pytest.raises(Conflict) as other:
        decide(approver, task)
    assert other.value.message == "this task is decided and can no longer be decided"
    assert decisions_of(task) == 1
