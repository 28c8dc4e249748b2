"""``/lg/runs/crons`` and ``/lg/threads/{thread_id}/runs/crons``: LangGraph Server's cron routes, so
``client.crons`` works unchanged — create (on a thread or not), get, update, delete, search, count.
Handlers translate only; permission, masking, audit and firing are ``lgplatform.crons``'."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Router

from approvals.inputs import AnyUuid
from approvals.permissions import token_needs
from lgplatform import crons
from lgplatform.responses import CronOut
from lgplatform.schemas import CronCountIn, CronCreateIn, CronPatchIn, CronSearchIn

router = Router(tags=["crons"])


def _user(request: HttpRequest) -> Any:
    return request.auth  # type: ignore[attr-defined]


@router.post("/runs/crons", response=CronOut)
@token_needs("runtime.start_thread")
def cron_create(request: HttpRequest, body: CronCreateIn) -> CronOut:
    """A cron that starts each run on a new thread (kept: ``on_run_completed`` ``keep``)."""
    user = _user(request)
    return crons.cron_out(user, crons.cron_create(actor=user, body=body))


@router.post("/threads/{thread_id}/runs/crons", response=CronOut)
@token_needs("runtime.start_thread")
def cron_create_for_thread(request: HttpRequest, thread_id: AnyUuid, body: CronCreateIn) -> CronOut:
    user = _user(request)
    return crons.cron_out(user, crons.cron_create(actor=user, body=body, thread_id=thread_id))


@router.post("/runs/crons/search", response=list[dict[str, Any]])
@token_needs("runtime.view_thread")
def crons_search(request: HttpRequest, body: CronSearchIn) -> list[dict[str, Any]]:
    found = crons.crons_search(
        _user(request),
        assistant_id=body.assistant_id,
        thread_id=body.thread_id,
        enabled=body.enabled,
        metadata=body.metadata,
        limit=body.limit,
        offset=body.offset,
        sort_by=body.sort_by,
        sort_order=body.sort_order,
    )
    include: set[str] | None = set(body.select) if body.select else None
    return [cron.model_dump(mode="json", include=include) for cron in found]


@router.post("/runs/crons/count", response=int)
@token_needs("runtime.view_thread")
def crons_count(request: HttpRequest, body: CronCountIn) -> int:
    user = _user(request)
    return crons.crons_count(
        user, assistant_id=body.assistant_id, thread_id=body.thread_id, enabled=body.enabled, metadata=body.metadata
    )


@router.get("/runs/crons/{cron_id}", response=CronOut)
@token_needs("runtime.view_thread")
def cron_get(request: HttpRequest, cron_id: str) -> CronOut:
    return crons.cron_get(_user(request), cron_id)


@router.patch("/runs/crons/{cron_id}", response=CronOut)
@token_needs("runtime.start_thread")
def cron_update(request: HttpRequest, cron_id: str, body: CronPatchIn) -> CronOut:
    user = _user(request)
    return crons.cron_out(user, crons.cron_update(actor=user, cron_id=cron_id, body=body))


@router.delete("/runs/crons/{cron_id}", response={204: None})
@token_needs("runtime.start_thread")
def cron_delete(request: HttpRequest, cron_id: str) -> HttpResponse:
    crons.cron_delete(actor=_user(request), cron_id=cron_id)
    return HttpResponse(status=204)
