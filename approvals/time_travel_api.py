"""Native API for time travel and subgraph state: ``/api/threads/{id}/fork|replay|branches|subgraphs``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from ninja import Body, Query, Router, Schema, Status
from pydantic import Field, ValidationError

from approvals import permissions, time_travel
from approvals.api_common import AuthedRequest
from approvals.errors import DomainError, validation_error_describe
from approvals.inputs import CheckpointId
from approvals.permissions import token_needs
from approvals.schemas import BodyIn
from runtime.models import Branch
from runtime.state import SubgraphView

router = Router(tags=["time travel"])


class ForkIn(BodyIn):
    checkpoint_id: CheckpointId
    values: dict[str, Any] | None = None
    as_node: str | None = Field(default=None, max_length=100)
    reason: str = Field(max_length=time_travel.REASON_MAX)
    run: bool = False


class ReplayIn(BodyIn):
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
    # Read as text and checked once the thread is known to be visible (``thread_subgraphs``).
    checkpoint_id: str | None = None


class _SubgraphAt(Schema):
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


TravelIn = TypeVar("TravelIn", ForkIn, ReplayIn)


def _body_once_allowed(request: AuthedRequest, thread_id: UUID, body: Any, schema: type[TravelIn]) -> TravelIn:
    """The body, read only once the caller may travel in the thread: a thread it cannot see is a 404 and a
    caller without the permission a 403, whatever it sent, as on every other write route (an auditor's ``{}``
    answered 422 ``checkpoint_id``, then ``reason``, and only a complete body the 403)."""
    permissions.require_time_travel(request.auth, permissions.thread_get_for(request.auth, thread_id))
    try:
        return schema.model_validate({} if body is None else body)  # no body: as {}, naming what is missing
    except ValidationError as exc:
        raise _described(exc, "body") from None


def _described(exc: ValidationError, source: str) -> DomainError:
    """A validation made in the view, refused as ninja's own would be (422 naming the field)."""
    errors: list[dict[str, Any]] = [{**dict(error), "loc": (source, *error["loc"])} for error in exc.errors()]
    return validation_error_describe(errors)


def _documented(schema: type[Schema]) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its JSON object itself (``_body_once_allowed``)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema.model_json_schema()}}}}


@router.post("/threads/{thread_id}/fork", response={201: BranchOut}, openapi_extra=_documented(ForkIn))
@token_needs("runtime.time_travel")
def thread_fork(request: AuthedRequest, thread_id: UUID, payload: Body[Any] = None) -> Status[Branch]:
    body = _body_once_allowed(request, thread_id, payload, ForkIn)
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


@router.post("/threads/{thread_id}/replay", response={202: BranchOut}, openapi_extra=_documented(ReplayIn))
@token_needs("runtime.time_travel")
def thread_replay(request: AuthedRequest, thread_id: UUID, payload: Body[Any] = None) -> Status[Branch]:
    body = _body_once_allowed(request, thread_id, payload, ReplayIn)
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
    permissions.thread_get_for(request.auth, thread_id)  # a thread you cannot see is a 404 whatever you asked
    try:
        at = _SubgraphAt.model_validate({"checkpoint_id": query.checkpoint_id})
    except ValidationError as exc:
        raise _described(exc, "query") from None
    subgraphs = time_travel.subgraph_states_for(request.auth, thread_id, at.checkpoint_id)
    return [_subgraph_out(s) for s in subgraphs]
