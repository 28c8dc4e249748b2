"""Native API for time travel and subgraph state: ``/api/threads/{id}/fork|replay|branches|subgraphs``."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from ninja import Query, Router, Schema, Status
from pydantic import Field

from approvals import time_travel
from approvals.api_common import AuthedRequest
from approvals.inputs import CheckpointId
from approvals.permissions import token_needs
from runtime.models import Branch
from runtime.state import SubgraphView

router = Router(tags=["time travel"])


class ForkIn(Schema):
    checkpoint_id: CheckpointId
    values: dict[str, Any] | None = None
    as_node: str | None = Field(default=None, max_length=100)
    reason: str = Field(max_length=time_travel.REASON_MAX)
    run: bool = False


class ReplayIn(Schema):
    checkpoint_id: CheckpointId
    reason: str = Field(max_length=time_travel.REASON_MAX)


class BranchOut(Schema):
    id: UUID
    thread_id: UUID
    parent_id: UUID | None
    kind: str
    from_checkpoint_id: str
    head_checkpoint_id: str
    update_keys: list[str]
    as_node: str
    reason: str
    run_id: UUID | None
    created_by: str | None
    created_at: datetime

    @staticmethod
    def resolve_created_by(obj: Branch) -> str | None:
        return obj.created_by.get_username() if obj.created_by else None


class SubgraphOut(Schema):
    task_id: str
    name: str
    checkpoint_ns: str
    checkpoint_id: str
    next: list[str]
    values: dict[str, Any]
    subgraphs: list[SubgraphOut]


class SubgraphQuery(Schema):
    checkpoint_id: CheckpointId | None = None


def _subgraph_out(sub: SubgraphView) -> SubgraphOut:
    return SubgraphOut(
        task_id=sub.task_id,
        name=sub.name,
        checkpoint_ns=sub.checkpoint_ns,
        checkpoint_id=sub.view.checkpoint_id,
        next=sub.view.next,
        values=sub.view.values,
        subgraphs=[_subgraph_out(c) for c in sub.children],
    )


@router.post("/threads/{thread_id}/fork", response={201: BranchOut})
@token_needs("runtime.time_travel")
def thread_fork(request: AuthedRequest, thread_id: UUID, body: ForkIn) -> Status[Branch]:
    branch = time_travel.thread_fork(
        actor=request.auth,
        thread_id=thread_id,
        checkpoint_id=body.checkpoint_id,
        values=body.values,
        as_node=body.as_node,
        reason=body.reason,
        run=body.run,
    )
    return Status(201, branch)


@router.post("/threads/{thread_id}/replay", response={202: BranchOut})
@token_needs("runtime.time_travel")
def thread_replay(request: AuthedRequest, thread_id: UUID, body: ReplayIn) -> Status[Branch]:
    branch = time_travel.thread_replay(
        actor=request.auth,
        thread_id=thread_id,
        checkpoint_id=body.checkpoint_id,
        reason=body.reason,
    )
    return Status(202, branch)


@router.get("/threads/{thread_id}/branches", response=list[BranchOut])
def thread_branches(request: AuthedRequest, thread_id: UUID) -> list[Branch]:
    return time_travel.branches_for(request.auth, thread_id)


@router.get("/threads/{thread_id}/subgraphs", response=list[SubgraphOut])
def thread_subgraphs(request: AuthedRequest, thread_id: UUID, query: Query[SubgraphQuery]) -> list[SubgraphOut]:
    subgraphs = time_travel.subgraph_states_for(request.auth, thread_id, query.checkpoint_id)
    return [_subgraph_out(s) for s in subgraphs]
