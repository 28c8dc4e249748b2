"""Bulk decisions over the API: ``POST /api/bulk-decisions`` starts one, ``GET /api/bulk-decisions/{id}`` follows it.

Translation only: ``approvals.bulk`` decides (each task through ``services.task_decide``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Router, Schema, Status
from pydantic import Field

from approvals import bulk, services
from approvals.api_common import AuthedRequest
from approvals.errors import InvalidInput
from approvals.inbox_filter import SELECTION_KEYS
from approvals.models import BulkAction
from approvals.payloads import REASON_MAX_CHARS
from approvals.permissions import token_needs
from approvals.schemas import BodyIn
from approvals.security import request_proof_at, session_proof_record, signed_via

router = Router(tags=["bulk"])


BulkDecision = Literal["approve", "reject"]


class BulkDecisionIn(BodyIn):
    # ``decision``, as a single decision names it (POST /api/tasks/{id}/decision); ``outcome`` is its older
    # name, still read. One of them is required; both, different, are refused.
    decision: BulkDecision | None = None
    outcome: BulkDecision | None = Field(default=None, description="Older name of `decision`.")
    reason: str = Field(default="", max_length=REASON_MAX_CHARS)
    task_ids: list[Any] | None = Field(default=None, description=f"At most {bulk.BULK_MAX} task ids.")
    filter: dict[str, Any] | None = Field(
        default=None,
        description=f"Select all pending tasks matching these inbox filters: {', '.join(SELECTION_KEYS)}.",
    )
    password: str | None = Field(default=None, max_length=200)
    otp: str | None = Field(default=None, max_length=20)


class BulkDecidedOut(Schema):
    task: str
    title: str = ""
    decision: str | None = None
    run: str | None = None
    final: bool = False  # the signature decided its task; false: the task still waits
    meaning: str = ""
    remaining: int | None = None  # when not final: the approvals the task still waits for


class BulkSkippedOut(Schema):
    task: str
    title: str = ""
    code: str
    reason: str


class BulkOut(Schema):
    id: UUID
    status: str
    decision: str
    outcome: str = Field(description="Older name of `decision`.")
    reason: str
    total: int
    done: int
    filter: dict[str, Any] | None
    decided: list[BulkDecidedOut]  # every signature made, final or not
    closed: int = Field(description="signatures that decided their task")
    signed: int = Field(description="signatures whose task still waits for more approvals (or decisions)")
    skipped: list[BulkSkippedOut]
    created_at: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_decision(action: BulkAction) -> str:
        return action.outcome

    @staticmethod
    def resolve_closed(action: BulkAction) -> int:
        return len(action.closed)

    @staticmethod
    def resolve_signed(action: BulkAction) -> int:
        return len(action.signed)


def _decision_of(body: BulkDecisionIn) -> str:
    if body.decision and body.outcome and body.decision != body.outcome:
        raise InvalidInput(
            f"decision is {body.decision!r} but outcome (its older name) is {body.outcome!r}: send decision only",
            field="decision",
        )
    chosen = body.decision or body.outcome
    if chosen is None:
        raise InvalidInput("decision: Field required (approve or reject)", field="decision")
    return chosen


def _out(action: BulkAction) -> BulkOut:
    return BulkOut.model_validate(action, from_attributes=True)


@router.post("/bulk-decisions", response={202: BulkOut})
@token_needs("approvals.decide_task")
def bulk_decision_create(request: AuthedRequest, body: BulkDecisionIn) -> Status[BulkOut]:
    """Approve or reject many tasks with one reason and one signature; each task is decided on its own."""
    signer = services.Signer(
        authenticated_at=request_proof_at(request), password=body.password, otp=body.otp, via=signed_via(request)
    )
    action = bulk.bulk_decide(
        actor=request.auth,
        outcome=_decision_of(body),
        reason=body.reason,
        task_ids=body.task_ids,
        filter=body.filter,
        signer=signer,
    )
    session_proof_record(request, action.reauthenticated_at)
    return Status(202, _out(action))


@router.get("/bulk-decisions/{bulk_id}", response=BulkOut)
def bulk_decision_detail(request: AuthedRequest, bulk_id: UUID) -> BulkOut:
    return _out(bulk.bulk_get_for(request.auth, bulk_id))
