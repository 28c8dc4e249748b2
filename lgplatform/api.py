"""The LangGraph Platform-compatible HTTP API, mounted at ``/lg/``.

Serves the subset of the Platform (Agent Protocol) API that ``langgraph_sdk``
uses for human-in-the-loop work: ``get_client(url="https://host/lg", api_key=TOKEN)``.
Handlers translate only; the work is in ``lgplatform.services`` (imported as ``platform``), built on
the approvals domain and the runtime; responses are the typed ``*Out`` schemas of ``lgplatform.responses``. See
``docs/platform-api.md`` for what is supported and what differs.

Blocking endpoints (``runs/wait``, ``join``, ``runs/stream``) are async views that
sleep until the run's outcome is committed (``runtime.notify``: PostgreSQL
NOTIFY, with a bounded fallback poll), so a waiting client holds no worker
thread and wakes as soon as the run settles; every wait is bounded.
"""

from __future__ import annotations

import time
import uuid
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Body, Query

from approvals import services
from approvals.api_common import ApiKeyAuth, BearerAuth, GatehouseAPI, api_errors_install, error_body_gatehouse
from approvals.errors import DomainError, InvalidInput, Unavailable
from approvals.inputs import AnyUuid, StrictJsonParser
from approvals.permissions import token_needs
from approvals.run_cancel import run_cancel_done
from lgplatform import services as platform
from lgplatform import stream as platform_stream
from lgplatform import thread_stream as platform_thread_stream
from lgplatform import time_travel as platform_time_travel
from lgplatform.responses import (
    AssistantGraphOut,
    AssistantOut,
    AssistantSchemasOut,
    AssistantVersionOut,
    InfoOut,
    RunOut,
    SubgraphSchemasOut,
    ThreadOut,
    ThreadStateOut,
    ThreadUpdateStateOut,
)
from lgplatform.run_create import published_modes, run_create_recorded
from lgplatform.schemas import (
    AssistantCountIn,
    AssistantSearchIn,
    AssistantVersionsIn,
    CancelManyQuery,
    CancelQuery,
    HistoryIn,
    HistoryQuery,
    JoinStreamQuery,
    RunCreateIn,
    RunListQuery,
    RunsCancelIn,
    StatelessRunBatchIn,
    StatelessRunCreateIn,
    StateQuery,
    ThreadCheckpointIn,
    ThreadCountIn,
    ThreadCreateIn,
    ThreadPatchIn,
    ThreadSearchIn,
    ThreadStateUpdateIn,
    ThreadStreamQuery,
)
from runtime.models import ACTIVE_RUN_STATUSES, Run, Thread
from runtime.notify import ThreadWatch, between_waits, wait_bounded
from runtime.registry import graph_get
from runtime.state_schema import json_schema_for
from runtime.stream import run_log


def _wait_limit() -> float:
    """How long a wait, join or stream may last (none for a HEAD: ``runtime.notify.waits_skipped``)."""
    return wait_bounded(float(settings.GATEHOUSE_PLATFORM_WAIT_SECONDS))


api = GatehouseAPI(
    title="Gatehouse — LangGraph Platform-compatible API",
    version="1",
    description="The subset of the LangGraph Platform API that `langgraph_sdk` uses for human-in-the-loop work. "
    "Authenticate with `x-api-key: <token>` (the SDK's `api_key`) or `Authorization: Bearer <token>`.",
    auth=[ApiKeyAuth(), BearerAuth()],
    urls_namespace="lg",
    docs_url="/docs",
    # NUL bytes, non-finite or 64-bit-overflowing numbers, deep nesting: 4xx. A body is an object, but a batch's.
    parser=StrictJsonParser(arrays=("runs-batch",)),
    # An SDK call not served (threads.prune) whose path reads as an id's: a 404, not a 405 sending the client to
    # a GET that reads "prune" as an id.
    not_served=("threads/prune",),
    # Calls refused on purpose, each saying why (the first that matches): threads.delete, threads.prune and
    # runs.delete (what a reviewer decided and the audit trail names stays).
    refused_methods=(
        ("DELETE", "threads/[^/]+", "Gatehouse keeps every thread for its decisions and audit trail; cancel its run"),
        ("POST", "threads/prune", "Gatehouse keeps every thread for its decisions and audit trail: none is pruned"),
        ("DELETE", "threads/[^/]+/runs/[^/]+", "Gatehouse keeps every run for its thread's audit trail; cancel it"),
    ),
)


# --- errors: status codes first (the SDK raises on them), a message the SDK can show ---------


def _error_body(code: str, message: str, field: str | None) -> dict[str, Any]:
    # "detail" is where the Platform puts its message; "error" is Gatehouse's own shape.
    return {"detail": message, **error_body_gatehouse(code, message, field)}


api.add_router("/", platform_time_travel.router)  # time travel: threads.copy (and fork/replay, subgraph state)
api_errors_install(
    api,
    body=_error_body,
    unauthenticated="send a valid API token: x-api-key: <token> or Authorization: Bearer <token>",
)


def _user(request: HttpRequest) -> Any:
    return request.auth  # type: ignore[attr-defined]


# --- meta: what a client asks first -------------------------------------------------------------


@api.get("/ok", auth=None, tags=["meta"])
def ok(request: HttpRequest) -> dict[str, bool]:
    """LangGraph Server's liveness probe (its ``check_db=1`` is ``/health/ready``'s job here)."""
    return {"ok": True}


@api.get("/info", response=InfoOut, tags=["meta"])
def info(request: HttpRequest) -> InfoOut:
    """What this server offers (LangGraph Studio asks before anything else); for signed-in clients only: it names
    versions."""
    return platform.server_info()


# --- assistants -------------------------------------------------------------------------------


@api.post("/assistants/search", response=list[AssistantOut], tags=["assistants"])
@token_needs("runtime.view_thread")
def assistants_search(request: HttpRequest, body: AssistantSearchIn) -> list[AssistantOut]:
    names = platform.assistants_found(_user(request), graph_id=body.graph_id, name=body.name, metadata=body.metadata)
    names = platform.assistants_ordered(names, body.sort_by, body.sort_order)
    return [platform.assistant_out(n) for n in names[body.offset : body.offset + body.limit]]


@api.post("/assistants/count", response=int, tags=["assistants"])
@token_needs("runtime.view_thread")
def assistants_count(request: HttpRequest, body: AssistantCountIn) -> int:
    """How many assistants ``assistants/search`` finds for the caller with the same filters."""
    found = platform.assistants_found(_user(request), graph_id=body.graph_id, name=body.name, metadata=body.metadata)
    return len(found)


@api.get("/assistants/{assistant_id}", response=AssistantOut, tags=["assistants"])
def assistant_get(request: HttpRequest, assistant_id: str) -> AssistantOut:
    return platform.assistant_out(platform.assistant_graph(_user(request), assistant_id))


@api.get("/assistants/{assistant_id}/graph", response=AssistantGraphOut, tags=["assistants"])
def assistant_graph(request: HttpRequest, assistant_id: str, xray: str | None = None) -> dict[str, Any]:
    return platform.assistant_drawing(_user(request), assistant_id, xray=platform.xray_parse(xray))


@api.get("/assistants/{assistant_id}/schemas", response=AssistantSchemasOut, tags=["assistants"])
def assistant_schemas(request: HttpRequest, assistant_id: str) -> AssistantSchemasOut:
    name = platform.assistant_graph(_user(request), assistant_id)
    entry = graph_get(name)
    return AssistantSchemasOut(
        graph_id=name,
        input_schema=json_schema_for(entry.input_schema),
        output_schema=json_schema_for(entry.state_schema),
        state_schema=json_schema_for(entry.state_schema),
        config_schema={},  # runs take no configurable values; LangGraph Server's for a graph without a schema
        context_schema=None,
    )


@api.post("/assistants/{assistant_id}/versions", response=list[AssistantVersionOut], tags=["assistants"])
@token_needs("runtime.view_thread")
def assistant_versions(request: HttpRequest, assistant_id: str, body: AssistantVersionsIn) -> list[AssistantVersionOut]:
    return platform.assistant_versions(
        _user(request), assistant_id, metadata=body.metadata, limit=body.limit, offset=body.offset
    )


@api.get("/assistants/{assistant_id}/subgraphs", response=dict[str, SubgraphSchemasOut], tags=["assistants"])
def assistant_subgraphs(request: HttpRequest, assistant_id: str, recurse: bool = False) -> dict[str, Any]:
    return platform.assistant_subgraphs(_user(request), assistant_id, namespace=None, recurse=recurse)


@api.get(
    "/assistants/{assistant_id}/subgraphs/{namespace}", response=dict[str, SubgraphSchemasOut], tags=["assistants"]
)
def assistant_subgraphs_under(
    request: HttpRequest, assistant_id: str, namespace: str, recurse: bool = False
) -> dict[str, Any]:
    return platform.assistant_subgraphs(_user(request), assistant_id, namespace=namespace, recurse=recurse)


# --- threads ----------------------------------------------------------------------------------


@api.post("/threads", response=ThreadOut, tags=["threads"])
@token_needs("runtime.start_thread")
def thread_create(request: HttpRequest, body: ThreadCreateIn) -> ThreadOut:
    if body.supersteps is not None:  # even an empty list: the option is not served, whatever it holds
        raise InvalidInput("supersteps (copying a thread's history) are not supported", field="supersteps")
    if body.ttl is not None:
        raise InvalidInput("thread TTLs are not supported; Gatehouse keeps threads for the audit trail", field="ttl")
    user = _user(request)
    thread, _ = platform.thread_create(
        actor=user, thread_id=body.thread_id, metadata=body.metadata or {}, if_exists=body.if_exists
    )
    return platform.thread_out(user, thread)


@api.post("/threads/search", response=list[ThreadOut], tags=["threads"])
@token_needs("runtime.view_thread")
def threads_search(request: HttpRequest, body: ThreadSearchIn) -> list[ThreadOut]:
    if body.extract:
        raise InvalidInput("extract is not supported", field="extract")
    user = _user(request)
    threads = platform.threads_search(
        user=user,
        status=body.status,
        metadata=body.metadata,
        values=body.values,
        ids=body.ids,
        limit=body.limit,
        offset=body.offset,
        sort_by=body.sort_by,
        sort_order=body.sort_order,
    )
    return [platform.thread_out(user, t) for t in threads]


@api.post("/threads/count", response=int, tags=["threads"])
@token_needs("runtime.view_thread")
def threads_count(request: HttpRequest, body: ThreadCountIn) -> int:
    """How many threads ``threads/search`` finds for the caller with the same filters."""
    return platform.threads_count(user=_user(request), status=body.status, metadata=body.metadata, values=body.values)


@api.get("/threads/{thread_id}", response=ThreadOut, tags=["threads"])
def thread_get(request: HttpRequest, thread_id: AnyUuid) -> ThreadOut:
    user = _user(request)
    return platform.thread_out(user, platform.thread_get_for(user, thread_id))


@api.patch("/threads/{thread_id}", response=ThreadOut, tags=["threads"])
@token_needs("runtime.start_thread")
def thread_update(request: HttpRequest, thread_id: AnyUuid, body: ThreadPatchIn) -> ThreadOut:
    """``threads.update``: merge ``metadata`` into the thread's (``lgplatform.services.thread_metadata_update``)."""
    if body.ttl is not None:
        raise InvalidInput("thread TTLs are not supported; Gatehouse keeps threads for the audit trail", field="ttl")
    user = _user(request)
    thread = platform.thread_metadata_update(actor=user, thread_id=thread_id, metadata=body.metadata or {})
    return platform.thread_out(user, thread)


@api.get("/threads/{thread_id}/state", response=ThreadStateOut, tags=["threads"])
def thread_state(request: HttpRequest, thread_id: AnyUuid, query: Query[StateQuery]) -> ThreadStateOut:
    return platform.thread_state(_user(request), thread_id, subgraphs=query.subgraphs)


@api.post("/threads/{thread_id}/state/checkpoint", response=ThreadStateOut, tags=["threads"])
@token_needs("runtime.view_thread")
def thread_state_checkpoint(request: HttpRequest, thread_id: AnyUuid, body: ThreadCheckpointIn) -> ThreadStateOut:
    if body.checkpoint.get("checkpoint_ns"):
        raise InvalidInput(
            "subgraph checkpoints are not served; read the root thread", field="checkpoint.checkpoint_ns"
        )
    checkpoint_id = platform.checkpoint_id_read(body.checkpoint, field="checkpoint")
    return platform.thread_state(_user(request), thread_id, checkpoint_id, subgraphs=body.subgraphs)


@api.get("/threads/{thread_id}/state/{checkpoint_id}", response=ThreadStateOut, tags=["threads"])
def thread_state_at(
    request: HttpRequest, thread_id: AnyUuid, checkpoint_id: AnyUuid, query: Query[StateQuery]
) -> ThreadStateOut:
    return platform.thread_state(_user(request), thread_id, str(checkpoint_id), subgraphs=query.subgraphs)


@api.post("/threads/{thread_id}/state", response=ThreadUpdateStateOut, tags=["threads"])
@token_needs("runtime.retry_thread", "runtime.time_travel")
def thread_state_update(request: HttpRequest, thread_id: AnyUuid, body: ThreadStateUpdateIn) -> ThreadUpdateStateOut:
    forked_at = platform_time_travel.checkpoint_wanted(body.checkpoint, body.checkpoint_id)
    if forked_at:  # time travel: a fork at a past checkpoint
        return platform_time_travel.state_fork(request, thread_id, body, forked_at)
    return platform.thread_state_update(
        actor=_user(request), thread_id=thread_id, values=body.values, as_node=body.as_node
    )


@api.post("/threads/{thread_id}/history", response=list[ThreadStateOut], tags=["threads"])
@token_needs("runtime.view_thread")
def thread_history(request: HttpRequest, thread_id: AnyUuid, body: HistoryIn) -> list[ThreadStateOut]:
    if body.metadata:
        raise InvalidInput("filtering history by metadata is not supported", field="metadata")
    if body.checkpoint and body.checkpoint.get("checkpoint_ns"):
        raise InvalidInput("subgraph history is not served", field="checkpoint.checkpoint_ns")
    return platform.thread_history(
        _user(request),
        thread_id,
        limit=body.limit,
        before=platform.checkpoint_id_read(body.before, field="before", named=True),
        checkpoint_id=platform.checkpoint_id_read(body.checkpoint, field="checkpoint"),
    )


@api.get("/threads/{thread_id}/history", response=list[ThreadStateOut], tags=["threads"])
def thread_history_get(request: HttpRequest, thread_id: AnyUuid, query: Query[HistoryQuery]) -> list[ThreadStateOut]:
    before = platform.checkpoint_id_read(query.before, field="before")
    return platform.thread_history(_user(request), thread_id, limit=query.limit, before=before)


# --- runs -------------------------------------------------------------------------------------


def _run_create_sync(
    request: HttpRequest, thread_id: UUID, body: RunCreateIn, *, stream: list[str] | None = None
) -> Run:
    try:
        return _run_create_atomic(request, thread_id, body, stream=stream)
    except services.POLICY_REFUSALS as refusal:
        services.refusal_audit(refusal)  # its first record rolled back with the run's transaction
        raise


def _run_create_atomic(
    request: HttpRequest, thread_id: UUID, body: RunCreateIn, *, stream: list[str] | None = None
) -> Run:
    def replay(checkpoint_id: str) -> Run:
        return platform_time_travel.run_replay(request, thread_id, body, checkpoint_id)

    return run_create_recorded(_user(request), thread_id, body, stream=stream, replay=replay)


def _run_location(thread_id: Any, run_id: Any) -> str:
    return f"/threads/{thread_id}/runs/{run_id}"


@api.post("/threads/{thread_id}/runs", response=RunOut, tags=["runs"])
@token_needs("runtime.start_thread", "approvals.decide_task")
def run_create(request: HttpRequest, thread_id: AnyUuid, body: RunCreateIn) -> HttpResponse:
    return _run_created(request, thread_id, body)


def _run_created(request: HttpRequest, thread_id: UUID, body: RunCreateIn) -> HttpResponse:
    run = _run_create_sync(request, thread_id, body, stream=published_modes(body))
    response = api.create_response(request, platform.run_out(run, run.thread).model_dump(), status=200)
    response["Content-Location"] = _run_location(thread_id, run.id)
    return response


@api.get("/threads/{thread_id}/runs", response=list[RunOut], tags=["runs"])
def runs_list(request: HttpRequest, thread_id: AnyUuid, query: Query[RunListQuery]) -> list[RunOut]:
    thread, runs = platform.runs_list(
        _user(request), thread_id, limit=query.limit, offset=query.offset, status=query.status
    )
    return [platform.run_out(r, thread) for r in runs]


@api.post("/threads/{thread_id}/runs/{run_id}/cancel", tags=["runs"])
@token_needs("runtime.retry_thread")
async def run_cancel(
    request: HttpRequest, thread_id: AnyUuid, run_id: AnyUuid, query: Query[CancelQuery]
) -> HttpResponse:
    """Cancel a queued or running run (``action=interrupt|rollback``); ``wait=true`` also waits, bounded,
    until the worker executing it has stopped (204; 202 if it has not yet: the cancel is in force anyway)."""
    user = _user(request)
    await between_waits(platform.run_cancel)(actor=user, thread_id=thread_id, run_id=run_id, action=query.action)
    if not query.wait:
        return HttpResponse(status=202)
    deadline = time.monotonic() + _wait_limit()
    async with ThreadWatch(thread_id) as watch:
        while not await between_waits(run_cancel_done)(user=user, thread_id=thread_id, run_id=run_id):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or watch.ended:  # ended: the client left, or the server stops
                return HttpResponse(status=202)
            await watch.changed(remaining)
    return HttpResponse(status=204)


@api.post("/runs/cancel", tags=["runs"])
@token_needs("runtime.retry_thread")
def runs_cancel_many(request: HttpRequest, body: RunsCancelIn, query: Query[CancelManyQuery]) -> HttpResponse:
    """``runs.cancel_many``: the runs ``run_ids`` of ``thread_id``, or every run with ``status``
    (``lgplatform.services.runs_cancel_many``)."""
    platform.runs_cancel_many(
        actor=_user(request), thread_id=body.thread_id, run_ids=body.run_ids, status=body.status, action=query.action
    )
    return HttpResponse(status=204)


async def _run_settled(user: Any, thread_id: Any, run_id: Any, deadline: float) -> tuple[Thread, Run, bool]:
    """Wait until the run is no longer queued or running, or the deadline passes; ``Unavailable`` if the
    request ends first (the server stops; a client that left hears nothing)."""
    async with ThreadWatch(thread_id) as watch:
        while True:
            thread, run = await between_waits(platform.run_progress)(user, thread_id, run_id)
            if run.status not in ACTIVE_RUN_STATUSES:
                return thread, run, True
            if watch.ended:
                raise Unavailable(
                    f"the server is stopping: join run {run_id} again, GET /lg{_run_location(thread_id, run_id)}/join"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return thread, run, False
            await watch.changed(remaining)


def _timeout_output(thread_id: Any, run_id: Any, limit: float) -> dict[str, Any]:
    return {
        "__error__": {
            "error": "TimeoutError",
            "message": f"run {run_id} is still running after {limit:.0f}s; "
            f"join it: GET /lg/threads/{thread_id}/runs/{run_id}/join",
        }
    }


async def _wait_response(request: HttpRequest, thread_id: Any, run_id: Any) -> HttpResponse:
    user = _user(request)
    limit = _wait_limit()
    thread, run, done = await _run_settled(user, thread_id, run_id, time.monotonic() + limit)
    if not done:
        body = _timeout_output(thread_id, run_id, limit)
    else:
        body = await between_waits(platform.wait_output)(user, thread, run)
    response = api.create_response(request, body, status=200)
    response["Content-Location"] = _run_location(thread_id, run_id)
    return response


@api.post("/threads/{thread_id}/runs/wait", tags=["runs"])
@token_needs("runtime.start_thread", "approvals.decide_task")
async def run_wait(request: HttpRequest, thread_id: AnyUuid, body: RunCreateIn) -> HttpResponse:
    return await _run_waited(request, thread_id, body)


async def _run_waited(request: HttpRequest, thread_id: UUID, body: RunCreateIn) -> HttpResponse:
    if body.stream_mode:  # checked as /runs and /runs/stream check it: a bogus mode started the run regardless
        platform_stream.stream_modes_parse(body.stream_mode)
    try:
        run = await between_waits(_run_create_sync)(request, thread_id, body)
    except platform.NothingToRun as finished:  # invoke(None) on a finished thread: its final values
        output = await between_waits(platform.thread_output)(_user(request), finished.thread)
        return api.create_response(request, output, status=200)
    return await _wait_response(request, thread_id, run.id)


@api.get("/threads/{thread_id}/runs/{run_id}/join", tags=["runs"])
async def run_join(request: HttpRequest, thread_id: AnyUuid, run_id: AnyUuid) -> HttpResponse:
    return await _wait_response(request, thread_id, run_id)


def _stream_response(request: HttpRequest, thread_id: Any, run_id: Any, events: Any) -> StreamingHttpResponse:
    ended = platform_stream.events_ended(events, thread_id=thread_id, run_id=run_id)
    response = StreamingHttpResponse(ended, content_type="text/event-stream")
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    response["Content-Location"] = _run_location(thread_id, run_id)
    # The SDK reconnects here (with Last-Event-ID) if the connection drops mid-stream.
    response["Location"] = f"{_run_location(thread_id, run_id)}/stream"
    return response


@api.post("/threads/{thread_id}/runs/stream", tags=["runs"])
@token_needs("runtime.start_thread", "approvals.decide_task")
async def run_stream(request: HttpRequest, thread_id: AnyUuid, body: RunCreateIn) -> StreamingHttpResponse:
    """Create a run and stream it: ``stream_mode`` one or several of values, updates, messages,
    messages-tuple, events, debug, custom, tasks, checkpoints (``docs/platform-api.md``)."""
    return await _run_streamed(request, thread_id, body)


async def _run_streamed(request: HttpRequest, thread_id: UUID, body: RunCreateIn) -> StreamingHttpResponse:
    modes = platform_stream.stream_modes_parse(body.stream_mode)
    run = await between_waits(_run_create_sync)(request, thread_id, body, stream=modes)
    events = platform_stream.run_stream_events(
        user=_user(request), thread_id=thread_id, run_id=run.id, modes=modes, after=None, limit=_wait_limit()
    )
    return _stream_response(request, thread_id, run.id, events)


@api.get("/threads/{thread_id}/runs/{run_id}", response=RunOut, tags=["runs"])
def run_get(request: HttpRequest, thread_id: AnyUuid, run_id: AnyUuid) -> RunOut:
    thread, run = platform.run_get_for(_user(request), thread_id, run_id)
    return platform.run_out(run, thread)


@api.get("/threads/{thread_id}/runs/{run_id}/stream", tags=["runs"])
async def run_join_stream(
    request: HttpRequest, thread_id: AnyUuid, run_id: AnyUuid, query: Query[JoinStreamQuery]
) -> StreamingHttpResponse:
    """Join a run's stream: from its start, or after the ``Last-Event-ID`` header's event."""
    user = _user(request)
    _, run = await between_waits(platform.run_get_for)(user, thread_id, run_id)
    after = request.headers.get("Last-Event-ID") or None
    if after is not None and not run_log().valid_id(after):
        raise InvalidInput("not an event id of this stream", field="Last-Event-ID")
    published = (run.stream or {}).get("modes") or ["values"]
    asked = [m for m in query.stream_mode if m]  # the SDK sends stream_mode=None as an empty value
    modes = platform_stream.stream_modes_parse(asked) if asked else published
    events = platform_stream.run_stream_events(
        user=user, thread_id=thread_id, run_id=run_id, modes=modes, after=after, limit=_wait_limit()
    )
    return _stream_response(request, thread_id, run_id, events)


@api.get("/threads/{thread_id}/stream", tags=["threads"])
async def thread_join_stream(
    request: HttpRequest, thread_id: AnyUuid, query: Query[ThreadStreamQuery]
) -> StreamingHttpResponse:
    """Join a thread's stream: its active runs and those created after, each as ``runs.join_stream`` sends it
    (``run_modes``), their start and end (``lifecycle``), state updates (``state_update``); for
    ``GATEHOUSE_PLATFORM_WAIT_SECONDS``, then join again with ``Last-Event-ID``."""
    user = _user(request)
    if query.stream_modes:
        modes = platform_thread_stream.thread_stream_modes_parse([query.stream_modes], field="stream_modes")
    else:
        modes = platform_thread_stream.thread_stream_modes_parse(query.stream_mode)
    await between_waits(platform.thread_get_for)(user, thread_id)
    after = request.headers.get("Last-Event-ID") or None
    if after is not None and not run_log().valid_id(after):
        raise InvalidInput("not an event id of this stream", field="Last-Event-ID")
    events = platform_thread_stream.thread_stream_events(
        user=user, thread_id=thread_id, modes=modes, after=after, limit=_wait_limit(), follow=query.follow
    )
    response = StreamingHttpResponse(
        platform_stream.events_ended(events, thread_id=thread_id, run_id=None), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    return response


# --- stateless runs: each on a thread made for it, which Gatehouse keeps ---------------------------


def _stateless(body: StatelessRunCreateIn) -> tuple[UUID, RunCreateIn]:
    """The new thread's id, and the run to create on it (``lgplatform.services.stateless_run_check``)."""
    platform.stateless_run_check(
        on_completion=body.on_completion,
        input=body.input,
        command=body.command,
        checkpoint=body.checkpoint,
        checkpoint_id=body.checkpoint_id,
    )
    return uuid.uuid4(), body.model_copy(update={"if_not_exists": "create"})


@api.post("/runs", response=RunOut, tags=["runs"])
@token_needs("runtime.start_thread")
def stateless_run_create(request: HttpRequest, body: StatelessRunCreateIn) -> HttpResponse:
    """A background run on a new thread; ``Content-Location`` names both (the thread is kept)."""
    return _run_created(request, *_stateless(body))


@api.post("/runs/wait", tags=["runs"])
@token_needs("runtime.start_thread")
async def stateless_run_wait(request: HttpRequest, body: StatelessRunCreateIn) -> HttpResponse:
    """A run on a new thread, answered with its output as ``/threads/{thread_id}/runs/wait`` answers."""
    return await _run_waited(request, *_stateless(body))


@api.post("/runs/stream", tags=["runs"])
@token_needs("runtime.start_thread")
async def stateless_run_stream(request: HttpRequest, body: StatelessRunCreateIn) -> StreamingHttpResponse:
    """A run on a new thread, streamed as ``/threads/{thread_id}/runs/stream`` streams."""
    return await _run_streamed(request, *_stateless(body))


@api.post("/runs/batch", response=list[RunOut], tags=["runs"], url_name="runs-batch")
@token_needs("runtime.start_thread")
def stateless_run_batch(request: HttpRequest, body: Body[StatelessRunBatchIn]) -> list[RunOut]:
    """Background runs, each on a new thread: all created or, if one is refused, none (its error's field
    starts with its index: ``[2].input``). No policy refusal to audit (``_run_create_sync``): a stateless run
    carries no decision."""
    return [platform.run_out(run, run.thread) for run in _stateless_batch_create(request, body)]


@transaction.atomic
def _stateless_batch_create(request: HttpRequest, bodies: list[StatelessRunCreateIn]) -> list[Run]:
    runs = []
    for index, body in enumerate(bodies):
        try:
            thread_id, run_body = _stateless(body)
            runs.append(_run_create_atomic(request, thread_id, run_body, stream=published_modes(run_body)))
        except DomainError as error:
            error.field = f"[{index}].{error.field}" if error.field else f"[{index}]"
            raise
    return runs


api.add_router("", "lgplatform.store_api.router")  # long-term memory store (client.store)
api.add_router("", "lgplatform.crons_api.router")  # crons (client.crons)
