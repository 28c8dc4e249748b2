"""Native API: cancel a thread's queued or running run (``approvals.run_cancel``)."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from ninja import Router, Status
from pydantic import Field

from approvals.api_common import AuthedRequest
from approvals.permissions import token_needs
from approvals.run_cancel import REASON_MAX, run_cancel
from approvals.schemas import BodyIn, RunOut
from runtime.models import Run

router = Router()


class RunCancelIn(BodyIn):
    # LangGraph Server's actions: interrupt (keep the run's checkpoints) or rollback (remove them).
    action: Literal["interrupt", "rollback"] = "interrupt"
    reason: str = Field(default="", max_length=REASON_MAX)
    # Which run; by default the thread's active one.
    run_id: UUID | None = None


@router.post("/threads/{thread_id}/cancel-run", response={202: RunOut}, tags=["threads"])
@token_needs("runtime.retry_thread")
def thread_run_cancel(request: AuthedRequest, thread_id: UUID, body: RunCancelIn) -> Status[Run]:
    user: Any = request.auth
    run = run_cancel(
        actor=user, thread_id=thread_id, run_id=body.run_id, action=body.action, reason=body.reason, via="api"
    )
    return Status(202, run)
