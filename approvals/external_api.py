"""``/api/external-tasks``: other engines create approval tasks and wait for the signed decision.

The protocol is in docs/external-tasks.md. Handlers translate; approvals.external decides.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from django.http import HttpResponse, JsonResponse
from ninja import Query, Router, Schema, Status
from pydantic import Field

from approvals import external, gateway
from approvals.api_common import AuthedRequest
from approvals.inputs import AwareDatetime
from approvals.models import ExternalTask
from approvals.permissions import token_needs
from approvals.schemas import BodyIn
from runtime.notify import between_waits, wait_bounded
from runtime.registry import EXTERNAL_SOURCE_PATTERN

router = Router(tags=["external tasks"])

MAX_WAIT_SECONDS = 60
POLL_SECONDS = 0.25

SOURCE_PATTERN = EXTERNAL_SOURCE_PATTERN
DecisionName = Literal["approve", "reject", "edit", "respond"]


def _default_decisions() -> list[DecisionName]:
    return ["approve", "reject"]


class ExternalTaskIn(BodyIn):
    source: str = Field(pattern=SOURCE_PATTERN, description="The engine's source name (assignments name it).")
    key: str = Field(min_length=1, max_length=200, description="The engine's idempotency key for this task.")
    title: str = Field(min_length=1, max_length=300)
    summary: str = Field(default="", max_length=4000)
    payload: dict[str, Any] = Field(default_factory=dict, description="What the reviewer sees.")
    response_schema: dict[str, Any] | None = Field(default=None, description="JSON schema of the response.")
    decisions: list[DecisionName] = Field(default_factory=_default_decisions, min_length=1, max_length=4)
    redaction_paths: list[str] = Field(default_factory=list, max_length=100)
    due_at: AwareDatetime | None = None
    required_approvals: int = Field(default=1, ge=1, le=10)
    separation_of_duties: bool = False
    callback_url: str = Field(default="", max_length=500, description="POSTed the signed decision; empty: poll.")
    secret: str = Field(
        default="", max_length=200, description="whsec_<base64> signing the decision; generated when empty."
    )


class ExternalTaskOut(Schema):
    id: UUID
    source: str
    key: str
    status: str
    title: str
    due_at: datetime | None
    created_at: datetime
    decided_at: datetime | None
    callback_url: str
    secret: str | None = Field(
        default=None, description="Only when Gatehouse generated it, and only to the user who created the task."
    )
    decision: dict[str, Any] | None


class SignerOut(Schema):
    actor: str
    name: str
    meaning: str
    outcome: str
    evidence_digest: str
    at: str


class ExternalDecisionOut(Schema):
    """The signed result; a 200 of the long-poll is exactly this object (docs/external-tasks.md)."""

    type: str
    id: str
    task_id: str
    source: str
    key: str
    decision: str
    reason: str
    response: Any = None
    message: str | None = None
    decided_at: str
    signers: list[SignerOut]


class DecisionPendingOut(Schema):
    status: str
    decision: None = None


class DecisionWaitQuery(Schema):
    wait: float = Field(
        default=0, ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False, description="Seconds to wait for the decision."
    )


def _out(user: Any, item: ExternalTask, *, show_secret: bool) -> ExternalTaskOut:
    task = item.task
    result = None
    if item.result is not None:
        result, _ = gateway.guard(user, task.graph, item.result, subject=f"task:{task.pk}", thread_id=task.thread_id)
        result = gateway.signers_digests_shown(user, task, result)
    return ExternalTaskOut(
        id=task.id,
        source=item.source.name,
        key=item.key,
        status=task.status,
        title=task.title,
        due_at=task.due_at,
        created_at=task.created_at,
        decided_at=task.decided_at,
        callback_url=item.callback_url,
        secret=item.secret if show_secret else None,
        decision=result,
    )


@router.post("/external-tasks", response={200: ExternalTaskOut, 201: ExternalTaskOut})
@token_needs("runtime.start_thread")
def external_task_create(request: AuthedRequest, body: ExternalTaskIn) -> Status[ExternalTaskOut]:
    user = request.auth
    spec = external.ExternalTaskSpec(
        source=body.source,
        key=body.key,
        title=body.title,
        summary=body.summary,
        payload=body.payload,
        response_schema=body.response_schema,
        decisions=tuple(body.decisions),
        redaction_paths=tuple(body.redaction_paths),
        due_at=body.due_at,
        required_approvals=body.required_approvals,
        separation_of_duties=body.separation_of_duties,
        callback_url=body.callback_url,
        secret=body.secret,
    )
    item, created = external.external_task_create(actor=user, spec=spec)
    shown = external.secret_shown_to(item, user, spec=spec)
    return Status(201 if created else 200, _out(user, item, show_secret=shown))


@router.get("/external-tasks/by-key/{source}/{path:key}", response=ExternalTaskOut)
def external_task_by_key(request: AuthedRequest, source: str, key: str) -> ExternalTaskOut:
    user = request.auth
    return _out(user, external.external_task_get_by_key(user, source=source, key=key), show_secret=False)


@router.get("/external-tasks/{task_id}", response=ExternalTaskOut)
def external_task_detail(request: AuthedRequest, task_id: UUID) -> ExternalTaskOut:
    user = request.auth
    return _out(user, external.external_task_get_for(user, task_id), show_secret=False)


def _decision_poll(user: Any, task_id: Any) -> tuple[ExternalTask, bool]:
    item = external.external_task_get_for(user, task_id)
    return item, external.result_ready(item)


def _decision_response(user: Any, item: ExternalTask) -> HttpResponse:
    """200: the decision, byte for byte the body a callback carries, with the same signature headers."""
    task = item.task
    if item.result is None:
        # Cancelled or superseded without a decision: final, nothing will arrive.
        return JsonResponse({"status": task.status, "decision": None}, status=410)
    shown, masked = gateway.guard(user, task.graph, item.result, subject=f"task:{task.pk}", thread_id=task.thread_id)
    if masked:  # the reader may not see some of it: masked, and unsigned (the signature covers the whole)
        return JsonResponse(shown, status=200)
    response = HttpResponse(external.result_body(item), status=200, content_type="application/json")
    for name, value in external.result_headers(item).items():
        response[name] = value
    return response


@router.get(
    "/external-tasks/{task_id}/decision",
    response={200: ExternalDecisionOut, 202: DecisionPendingOut, 410: DecisionPendingOut},
)
async def external_task_decision(
    request: AuthedRequest, task_id: UUID, query: Query[DecisionWaitQuery]
) -> HttpResponse:
    """Long-poll: the decision when there is one, else 202 after ``wait`` seconds (a bounded wait).

    Async, polling with short database calls, so a waiting engine holds no worker thread.
    """
    user = request.auth
    deadline = time.monotonic() + wait_bounded(query.wait)
    while True:
        item, ready = await between_waits(_decision_poll)(user, task_id)
        if ready or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0)))
    if not ready:
        return JsonResponse({"status": "pending", "decision": None}, status=202)
    return await between_waits(_decision_response)(user, item)
