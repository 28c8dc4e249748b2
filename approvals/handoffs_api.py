"""Hand-offs API: claims, reassign, delegate, out-of-office.

A thin translation of ``approvals.claims`` and ``approvals.assignment``: the
services check permissions (``approvals.permissions``), validate and audit.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from django.contrib.auth.models import User
from ninja import Router, Schema, Status
from pydantic import Field

from approvals import assignment, claims, permissions
from approvals.api_common import AuthedRequest
from approvals.errors import InvalidInput
from approvals.inputs import AwareDatetime
from approvals.models import ApprovalTask, Away
from approvals.permissions import token_needs
from approvals.schemas import BodyIn

router = Router(tags=["hand-offs"])


class ClaimOut(Schema):
    task_id: UUID
    claimed: bool
    user: str | None = None
    claimed_at: datetime | None = None
    expires_at: datetime | None = None


class AssignmentOut(Schema):
    task_id: UUID
    assigned_user: str | None
    assigned_group: str | None
    assigned_at: datetime | None
    claim: ClaimOut


class ReassignIn(BodyIn):
    to_user: str | None = Field(default=None, min_length=1, max_length=150, description="a username")
    to_group: str | None = Field(default=None, min_length=1, max_length=150, description="a group name")
    note: str = Field(default="", max_length=assignment.NOTE_MAX)


class DelegateIn(BodyIn):
    to_user: str = Field(min_length=1, max_length=150, description="the colleague's username")
    note: str = Field(min_length=1, max_length=assignment.NOTE_MAX)


class AwayIn(BodyIn):
    delegate: str | None = Field(
        default=None, min_length=1, max_length=150, description="a username; null (alone) clears your out-of-office"
    )
    starts_at: AwareDatetime | None = None
    ends_at: AwareDatetime | None = None
    note: str = Field(default="", max_length=300)

    def delegate_check(self) -> None:
        """The times and note describe an out-of-office: sent without a delegate, they cleared the one they
        meant to describe and were dropped. A body with no delegate at all cleared it too."""
        sent = [name for name in ("starts_at", "ends_at", "note") if getattr(self, name) not in (None, "")]
        if self.delegate is None and sent:
            raise InvalidInput(
                f'{", ".join(sent)}: only with a delegate; to clear your out-of-office send {{"delegate": null}} alone',
                field=sent[0],
            )
        if "delegate" not in self.model_fields_set:
            raise InvalidInput("delegate: send a username, or null to clear your out-of-office", field="delegate")


class AwayOut(Schema):
    away: bool = Field(description="an out-of-office is set (it may start later)")
    active: bool = Field(description="it covers now: new assignments naming you go to the delegate")
    delegate: str | None = None
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    note: str = ""


def _user(request: AuthedRequest) -> User:
    return request.auth


def _claim_out(task: ApprovalTask) -> ClaimOut:
    claim = claims.claim_for(task)
    if claim is None:
        return ClaimOut(task_id=task.pk, claimed=False)
    return ClaimOut(
        task_id=task.pk,
        claimed=True,
        user=claim.user.get_username(),
        claimed_at=claim.claimed_at,
        expires_at=claim.expires_at,
    )


def _assignment_out(task: ApprovalTask) -> AssignmentOut:
    who = assignment.task_assignees(task)
    return AssignmentOut(
        task_id=task.pk,
        assigned_user=who.user.get_username() if who.user else None,
        assigned_group=who.group.name if who.group else None,
        assigned_at=task.assigned_at,
        claim=_claim_out(task),
    )


def _away_out(away: Away | None) -> AwayOut:
    if away is None:
        return AwayOut(away=False, active=False)
    return AwayOut(
        away=True,
        active=assignment.away_active(away.user) is not None,
        delegate=away.delegate.get_username(),
        starts_at=away.starts_at,
        ends_at=away.ends_at,
        note=away.note,
    )


@router.get("/tasks/{task_id}/claim", response=ClaimOut)
def task_claim_get(request: AuthedRequest, task_id: UUID) -> ClaimOut:
    return _claim_out(permissions.task_get_for(_user(request), task_id))


@router.post("/tasks/{task_id}/claim", response={201: ClaimOut})
@token_needs("approvals.decide_task")
def task_claim(request: AuthedRequest, task_id: UUID) -> Status[ClaimOut]:
    claim = claims.task_claim(actor=_user(request), task_id=task_id)
    return Status(201, _claim_out(claim.task))


@router.delete("/tasks/{task_id}/claim", response=ClaimOut)
@token_needs("approvals.decide_task", "approvals.release_any_claim")
def task_release(request: AuthedRequest, task_id: UUID) -> ClaimOut:
    claims.task_release(actor=_user(request), task_id=task_id)
    return _claim_out(permissions.task_get_for(_user(request), task_id))


@router.post("/tasks/{task_id}/reassign", response=AssignmentOut)
@token_needs("approvals.reassign_task")
def task_reassign(request: AuthedRequest, task_id: UUID, body: ReassignIn) -> AssignmentOut:
    actor = _user(request)
    task = permissions.task_get_for(actor, task_id)
    permissions.require_reassign(actor, task)  # before any name lookup: a reviewer learns nothing about users
    to_user = assignment.user_named(body.to_user, field="to_user") if body.to_user else None
    to_group = assignment.group_named(body.to_group, field="to_group") if body.to_group else None
    task = assignment.task_reassign(actor=actor, task=task, to_user=to_user, to_group=to_group, note=body.note)
    return _assignment_out(task)


@router.post("/tasks/{task_id}/delegate", response=AssignmentOut)
@token_needs("approvals.decide_task")
def task_delegate(request: AuthedRequest, task_id: UUID, body: DelegateIn) -> AssignmentOut:
    actor = _user(request)
    task = permissions.task_get_for(actor, task_id)
    permissions.require_decide(actor, task)
    to_user = assignment.user_named(body.to_user, field="to_user")
    task = assignment.task_delegate(actor=actor, task=task, to_user=to_user, note=body.note)
    return _assignment_out(task)


@router.get("/me/away", response=AwayOut)
def away_get(request: AuthedRequest) -> AwayOut:
    return _away_out(assignment.away_get(_user(request)))


@router.put("/me/away", response=AwayOut)
@token_needs("approvals.decide_task")
def away_put(request: AuthedRequest, body: AwayIn) -> AwayOut:
    actor = _user(request)
    body.delegate_check()
    if body.delegate is None:
        assignment.away_clear(actor=actor)
        return _away_out(None)
    permissions.require(actor, "approvals.decide_task", "set yourself away", why="you review nothing")
    delegate = assignment.user_named(body.delegate, field="delegate")
    away = assignment.away_set(
        actor=actor,
        delegate=delegate,
        starts_at=body.starts_at,
        ends_at=body.ends_at,
        note=body.note,
    )
    return _away_out(away)
