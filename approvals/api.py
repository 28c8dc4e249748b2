"""The native REST API: threads, tasks, decisions, audit."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import User
from ninja import Query, Router, Schema, Status
from pydantic import Field

from approvals import gateway, permissions, selectors, services
from approvals.abilities import superseded, task_abilities
from approvals.api_common import AuthedRequest, params_unknown_refuse
from approvals.audit_filters import audit_filters_parse
from approvals.errors import Forbidden, InvalidInput
from approvals.inbox_filter import ALIASES, COLUMN_PARAM, FILTER_KEYS, InboxFilter
from approvals.inputs import CheckpointId, DbId
from approvals.models import ApprovalTask, AuditEvent, Decision
from approvals.payloads import NOT_GIVEN, DecisionRequest, decisions_allowed, payload_kind
from approvals.permissions import token_needs
from approvals.schemas import (
    AuditEventOut,
    CheckpointOut,
    DecisionIn,
    DecisionOut,
    EffectOut,
    GraphOut,
    RefusalOut,
    RunOut,
    TaskOut,
    TaskPageOut,
    TaskSummaryOut,
    ThreadIn,
    ThreadOut,
    ThreadPageOut,
    ThreadSummaryOut,
)
from approvals.security import request_proof_at, session_proof_record, signed_via
from runtime.models import ACTIVE_RUN_STATUSES, Effect, Run, Thread, ThreadStatus
from runtime.notify import ThreadWatch, wait_bounded
from runtime.registry import graph_get, graph_names
from runtime.state import CheckpointView
from runtime.state_schema import json_schema_for

router = Router()


def _user(request: AuthedRequest) -> User:
    return request.auth


def _task_summary(task: ApprovalTask) -> TaskSummaryOut:
    return TaskSummaryOut.model_validate(task, from_attributes=True)


def _thread_out(
    user: Any,
    thread: Thread,
    run: Run | None = None,
    *,
    pending: list[ApprovalTask] | None = None,
    values: dict[str, Any] | None = None,
) -> ThreadOut:
    """``pending``: the thread's pending tasks when the caller knows them (read here otherwise);
    ``values``: what to show instead of the thread's values as ``user`` may read them. ``run``: the run the
    caller just queued; without it, the thread's active run while it is busy (``run_id``)."""
    if pending is None:
        pending = selectors.tasks_pending_for_thread(user=user, thread=thread)
    return ThreadOut(
        id=thread.id,
        graph=thread.graph,
        status=thread.status,
        metadata=thread.metadata,
        values=gateway.thread_values_for(user, thread) if values is None else values,
        checkpoint_id=thread.checkpoint_id,
        error=thread.error,
        created_at=thread.created_at,
        updated_at=thread.updated_at,
        pending_tasks=[_task_summary(t) for t in pending],
        run_id=run.id if run else selectors.thread_active_run_id(thread=thread),
    )


@router.get("/graphs", response=list[GraphOut], tags=["graphs"])
def graphs_list(request: AuthedRequest) -> list[GraphOut]:
    user = _user(request)
    return [
        GraphOut(
            name=name,
            description=graph_get(name).description,
            state_schema=json_schema_for(graph_get(name).state_schema),
        )
        for name in graph_names()
        if permissions.graph_visible(user, name)
    ]


class ThreadListQuery(Schema):
    status: str | None = Field(default=None, pattern=f"^({'|'.join(ThreadStatus.values)})$")
    graph: str | None = Field(default=None, max_length=100)
    q: str | None = Field(
        default=None, max_length=200, description="A thread id, or text of the metadata its graph makes searchable."
    )
    limit: int = Field(default=50, ge=1, le=200)
    cursor: str | None = Field(default=None, max_length=400)


@router.get("/threads", response=ThreadPageOut, tags=["threads"])
def threads_list(request: AuthedRequest, query: Query[ThreadListQuery]) -> ThreadPageOut:
    """The threads you may see, newest first; ``next_cursor`` pages on."""
    wanted = selectors.ThreadFilter(status=query.status or "", graph=query.graph or "", q=query.q or "")
    items, next_cursor = selectors.threads_list(
        user=_user(request), filter=wanted, limit=query.limit, cursor=query.cursor
    )
    return ThreadPageOut(
        items=[ThreadSummaryOut.model_validate(t, from_attributes=True) for t in items], next_cursor=next_cursor
    )


class ThreadWaitQuery(Schema):
    wait_for: str | None = Field(
        default=None, description="Comma-separated thread statuses: hold the request until the thread reaches one."
    )
    timeout: float = Field(default=30.0, description="With wait_for: the longest wait in seconds.")


@router.post("/threads", response={201: ThreadOut}, tags=["threads"])
@token_needs("runtime.start_thread")
def thread_create(request: AuthedRequest, body: ThreadIn, query: Query[ThreadWaitQuery]) -> Status[ThreadOut]:
    """Start a thread; with ``wait_for`` (long poll) the response waits until the thread reaches one of
    those statuses (e.g. ``interrupted``: its approval tasks are in ``pending_tasks``) or ``timeout`` passes."""
    user = _user(request)
    if query.wait_for is None:
        return Status(201, _thread_started(user, body))
    # Checked before anything is written: a bad wait leaves no thread behind.
    wanted, seconds = _statuses(query.wait_for), _wait_seconds(query.timeout, "timeout")
    thread_id, run_id = _thread_start_to_wait(user, body)
    value = _until(thread_id, _detail_once(user, thread_id, wanted), _answered(wanted), seconds)
    out = value if isinstance(value, ThreadOut) else _thread_detail(user, thread_id)
    out.run_id = run_id
    return Status(201, out)


def _detail_once(user: Any, thread_id: Any, wanted: set[str]) -> Callable[[], ThreadOut | str]:
    """A long poll's read of its thread: the visible row (``NotFound`` once it is not), and the whole
    answer when its status is one of ``wanted``, so the wake that ends the wait reads the row once."""

    def read() -> ThreadOut | str:
        thread = permissions.thread_get_for(user, thread_id)
        return _thread_detail(user, thread_id, thread) if thread.status in wanted else thread.status

    return read


def _answered(wanted: set[str]) -> Callable[[ThreadOut | str], bool]:
    return lambda value: isinstance(value, ThreadOut) or value in wanted


def _thread_started(user: Any, body: ThreadIn) -> ThreadOut:
    """Start; the thread as it was created, before its first run (no task yet). A token scoped to
    starting threads starts them without reading them: its answer has the id and status, not values."""
    readable = permissions.graph_threads_visible(user, body.graph)
    thread, run = services.thread_start(actor=user, graph=body.graph, input=body.input, metadata=body.metadata)
    return _thread_out(user, thread, run, pending=[], values=None if readable else {})


def _thread_start_to_wait(user: Any, body: ThreadIn) -> tuple[Any, Any]:
    """Start a thread whose answer will be its state: its reader must be allowed to see it, which is
    checked before anything is written. (thread id, run id)"""
    services.graph_entry(body.graph)  # an unknown graph is a 422 naming it, as without wait_for, not a 403
    if not permissions.graph_threads_visible(user, body.graph):
        raise Forbidden("waiting needs permission to read this graph's threads; start without it", field="wait_for")
    thread, run = services.thread_start(actor=user, graph=body.graph, input=body.input, metadata=body.metadata)
    return thread.id, run.id


def _wait_seconds(value: float, field: str) -> float:
    limit = float(settings.GATEHOUSE_PLATFORM_WAIT_SECONDS)
    if not 0 <= value <= limit:
        raise InvalidInput(f"{field} must be between 0 and {limit:g} seconds", field=field)
    return value


def _statuses(value: str) -> set[str]:
    wanted = {s.strip() for s in value.split(",") if s.strip()}
    unknown = sorted(wanted - set(ThreadStatus.values))
    if not wanted or unknown:
        raise InvalidInput(
            f"wait_for takes thread statuses ({', '.join(ThreadStatus.values)}); got {', '.join(unknown) or 'none'}",
            field="wait_for",
        )
    return wanted


def _until(thread_id: Any, read: Any, done: Any, seconds: float) -> Any:
    """Re-read with ``read()`` until ``done(value)`` or ``seconds`` pass, waking on the thread's NOTIFY.

    The wait blocks the request's own thread, which the request holds until it answers either way
    (console.request_threads): waiting in an async view instead cost two more crossings between the
    thread and the event loop per read. ``ThreadWatch.wait`` gives the pooled connection back while
    it blocks."""
    deadline = time.monotonic() + wait_bounded(seconds)
    with ThreadWatch(thread_id) as watch:
        while True:
            value = read()
            remaining = deadline - time.monotonic()
            if done(value) or remaining <= 0 or watch.ended:  # ended: the client left, or the server stops
                return value
            watch.wait(remaining)


@router.get("/threads/{thread_id}", response=ThreadOut, tags=["threads"])
def thread_detail(request: AuthedRequest, thread_id: UUID, query: Query[ThreadWaitQuery]) -> ThreadOut:
    """The thread; with ``wait_for`` (long poll) once it reaches one of those statuses or ``timeout`` passes."""
    user = _user(request)
    if query.wait_for is None:
        return _thread_detail(user, thread_id)
    wanted, seconds = _statuses(query.wait_for), _wait_seconds(query.timeout, "timeout")
    # Every read checks visibility (404 before any wait, and once access is withdrawn) and, when the
    # status is a wanted one, is the answer: the wake that ends the wait makes one read, not two.
    value = _until(thread_id, _detail_once(user, thread_id, wanted), _answered(wanted), seconds)
    return value if isinstance(value, ThreadOut) else _thread_detail(user, thread_id)


def _thread_detail(user: Any, thread_id: UUID, thread: Thread | None = None) -> ThreadOut:
    """``thread``: the row when the caller has just read it through ``thread_get_for``."""
    if thread is None:
        thread = permissions.thread_get_for(user, thread_id)
    state = gateway.thread_state_for(user, thread)
    if state is None:  # no checkpoint yet: the listing snapshot
        return _thread_out(user, thread)
    # The checkpoint's values, guarded (and a reveal audited) once: the snapshot is not shown.
    out = _thread_out(user, thread, values=state.values)
    out.checkpoint_id = state.checkpoint_id
    out.state_unreadable = state.unreadable
    return out


class HistoryQuery(Schema):
    limit: int = Field(default=50, ge=1, le=500)
    before: CheckpointId | None = None


@router.get("/threads/{thread_id}/history", response=list[CheckpointOut], tags=["threads"])
def thread_history(request: AuthedRequest, thread_id: UUID, query: Query[HistoryQuery]) -> list[CheckpointOut]:
    views = gateway.history_for(_user(request), thread_id, limit=query.limit, before=query.before)
    return [_checkpoint_out(v) for v in views]


def _checkpoint_out(view: CheckpointView) -> CheckpointOut:
    out = CheckpointOut.model_validate(view, from_attributes=True)
    out.state_unreadable = view.unreadable
    return out


@router.get("/threads/{thread_id}/runs", response=list[RunOut], tags=["threads"])
def thread_runs(request: AuthedRequest, thread_id: UUID) -> list[Run]:
    thread = permissions.thread_get_for(_user(request), thread_id)
    return list(thread.runs.order_by("-created_at")[:100])


@router.get("/threads/{thread_id}/effects", response=list[EffectOut], tags=["threads"])
def thread_effects(request: AuthedRequest, thread_id: UUID) -> list[Effect]:
    """The actions the thread's runs performed through the effect ledger, oldest first: what an operator checks
    before a retry (an ``unknown`` one may have happened)."""
    user = _user(request)
    thread = permissions.thread_get_for(user, thread_id)
    effects = list(thread.effects.select_related("run").order_by("created_at", "id")[:500])
    return gateway.effects_masked(user, thread, effects, args_kept=False)


@router.post("/threads/{thread_id}/retry", response={202: RunOut}, tags=["threads"])
@token_needs("runtime.retry_thread")
def thread_retry(request: AuthedRequest, thread_id: UUID) -> Status[Run]:
    return Status(202, services.thread_retry(actor=_user(request), thread_id=thread_id))


class TaskQuery(Schema):
    status: str | None = Field(default=None, pattern="^(pending|decided|superseded|cancelled)$")
    graph: str | None = Field(default=None, max_length=100)
    gate: str | None = Field(default=None, max_length=100)
    thread: UUID | None = None
    q: str | None = Field(
        default=None,
        max_length=200,
        description="The inbox's search: a task or thread id, or text of the title, case or applicant.",
    )
    claimed: str | None = Field(default=None, pattern="^(mine|unclaimed|others)$")
    assigned: str | None = Field(
        default=None, pattern="^me$", description="me: asked of you by name or through a group."
    )
    limit: int = Field(default=50, ge=1, le=200)
    cursor: str | None = Field(default=None, max_length=400)
    due: str | None = Field(default=None, pattern="^(overdue|escalated|soon)$")  # deadlines


# The parameters GET /api/tasks takes besides c.<key>: its query schema's, and the parser's aliases (node).
TASK_LIST_PARAMS = frozenset({*TaskQuery.model_fields, *ALIASES})


def _task_list_extras(request: AuthedRequest) -> dict[str, Any]:
    """What of GET /api/tasks's query its schema does not read: the column filters (``c.<key>=<filter>``,
    as the inbox page takes them) and ``node`` (an alias of ``gate``). Any other name is refused, naming it:
    a client that asked for a filter or an order this list does not have must not act on the whole list."""
    columns: dict[str, str] = {}
    extras: dict[str, Any] = {"columns": columns}
    for name, values in request.GET.lists():
        if name.startswith(COLUMN_PARAM):
            if len(values) > 1:
                raise InvalidInput(f"{name}: give one filter per column", field=name)
            columns[name.removeprefix(COLUMN_PARAM)] = values[0]
        elif name == "sort":
            raise InvalidInput(
                "this list is newest first (next_cursor pages on) and takes no sort; "
                "sort=col:<key> is the inbox page's",
                field="sort",
            )
        elif name not in TASK_LIST_PARAMS:
            known = ", ".join(sorted(TASK_LIST_PARAMS))
            raise InvalidInput(f"unknown parameter {name!r} (the list takes {known}, and c.<key>)", field=name)
        elif name in ALIASES:
            extras[name] = values[-1]
    return extras


@router.get("/tasks", response=TaskPageOut, tags=["tasks"])
def tasks_list(request: AuthedRequest, query: Query[TaskQuery]) -> TaskPageOut:
    """The inbox's filters (console/inbox): the same tasks, newest first; ``next_cursor`` pages on.

    ``c.<key>=<filter>`` filters by a column of the gate (``gate`` given; docs/bulk-and-columns.md); a bad
    one (no such column, redacted for you, not a number for a numeric column) is a 422 naming ``c.<key>``.
    An unknown parameter (``sort`` included) is a 422 naming it."""
    # The one parser of the inbox filter (a bulk "filter" goes through it too): the names are FILTER_KEYS.
    given = {key: str(value) for key, value in query.model_dump().items() if key in FILTER_KEYS and value is not None}
    wanted = InboxFilter.parse({**given, **_task_list_extras(request)}, prefix="", status=True)
    items, next_cursor = selectors.tasks_list(
        user=_user(request), filter=wanted, limit=query.limit, cursor=query.cursor
    )
    return TaskPageOut(items=[_task_summary(t) for t in items], next_cursor=next_cursor)


@router.get("/tasks/{task_id}", response=TaskOut, tags=["tasks"])
def task_detail(request: AuthedRequest, task_id: UUID) -> TaskOut:
    user = _user(request)
    task = permissions.task_get_for(user, task_id)
    state = gateway.task_state_for(user, task)
    payload, _ = gateway.payload_for(user, task)
    summary = _task_summary(task).model_dump()
    decisions = list(task.decisions.select_related("actor").order_by("created_at"))
    abilities = task_abilities(user, task, decisions, unreadable=state.unreadable if state else "")
    refused, gone = abilities.approve_refused, abilities.decide_refused
    return TaskOut(
        **summary,
        payload=payload,
        evidence_digest=services.evidence_digest(
            task=task, redaction=services.redaction_policy(user, task), decisions=decisions
        ),
        required_approvals=task.required_approvals,
        approvals=_decisions_out(user, task, decisions),
        payload_digest=gateway.payload_digest_for(user, task),
        response_schema=task.response_schema,
        payload_kind=payload_kind(task.payload, task.kind),
        allowed_decisions=decisions_allowed(task.payload, task.kind, task.response_schema),
        can_decide=abilities.decide_now,
        claimed_by=abilities.claim_holder or None,
        approvals_remaining=abilities.remaining,
        approve_refused=None if refused is None else RefusalOut(rule=refused.rule, message=refused.message),
        decide_refused=None if gone is None else RefusalOut(rule=gone.rule, message=gone.message),
        state=state.values if state else None,
        state_unreadable=state.unreadable if state else "",
    )


def _decisions_out(user: Any, task: ApprovalTask, decisions: list[Decision]) -> list[DecisionOut]:
    shown = gateway.decisions_shown(user, task, decisions)
    gone = {d.pk for d in superseded(decisions)}
    return [
        _decision_out(d, s, superseded=d.pk in gone, digest=gateway.decision_digests_for(user, task, d)[0])
        for d, s in zip(decisions, shown, strict=True)
    ]


def _decision_out(
    decision: Decision, shown: gateway.DecisionShown, *, superseded: bool = False, digest: str | None = None
) -> DecisionOut:
    """A decision as its reader may see it: state patch and resume value through the gateway, and its evidence
    digest (``digest``: as ``gateway.decision_digests_for`` shows it; the signer's own decision: theirs)."""
    return DecisionOut(
        id=decision.id,
        task_id=decision.task_id,
        outcome=decision.outcome,
        reason=decision.reason,
        actor=decision.actor.get_username(),
        state_patch=shown.state_patch,
        resume_value=shown.resume_value,
        checkpoint_id=decision.checkpoint_id,
        run_id=decision.run_id,
        created_at=decision.created_at,
        meaning=decision.meaning,
        signer_name=decision.signer_name,
        evidence_digest=decision.evidence_digest if digest is None else digest,
        superseded=superseded,
    )


@router.post("/tasks/{task_id}/decision", response={201: DecisionOut}, tags=["tasks"])
@token_needs("approvals.decide_task")
def task_decide(
    request: AuthedRequest, task_id: UUID, body: DecisionIn, wait: float | None = None
) -> Status[DecisionOut]:
    """Decide; with ``?wait=<seconds>`` the response waits until the resumed run has finished (bounded)."""
    seconds = _wait_seconds(wait, "wait") if wait is not None else 0.0
    out, thread_id = _task_decide(request, task_id, body)
    if seconds and out.run_id is not None:
        run_id = out.run_id
        out.run_status = _until(
            thread_id,
            lambda: selectors.status_read(model=Run, pk=run_id),
            lambda s: s not in ACTIVE_RUN_STATUSES,
            seconds,
        )
    return Status(201, out)


def _task_decide(request: AuthedRequest, task_id: UUID, body: DecisionIn) -> tuple[DecisionOut, Any]:
    if body.message and body.decision in ("approve", "edit"):
        # No approval or edit carries a message (a response does; a tool call's rejection may): refused as
        # action_args without an edit is, rather than dropped while the caller believes it was sent.
        raise InvalidInput(
            f"message is sent with a respond or reject decision, not with {body.decision}", field="message"
        )
    decision_request = DecisionRequest(
        outcome=body.decision,
        reason=body.reason,
        checkpoint_id=body.checkpoint_id,
        state_patch=body.edits,
        action_args=body.action_args,
        message=body.message,
        decisions=body.decisions,
        resume=body.resume if "resume" in body.model_fields_set else NOT_GIVEN,
        evidence_digest=body.evidence_digest,
    )
    signer = services.Signer(
        authenticated_at=request_proof_at(request), password=body.password, otp=body.otp, via=signed_via(request)
    )
    decision = services.task_decide(actor=_user(request), task_id=task_id, request=decision_request, signer=signer)
    session_proof_record(request, decision.reauthenticated_at)
    [shown] = gateway.decisions_shown(_user(request), decision.task, [decision])
    return _decision_out(decision, shown), decision.task.thread_id


class AuditQuery(Schema):
    # The console audit page's and the export's filters (approvals.audit_filters), as plain strings: the one
    # parser reads them, so a value means here what it means there, and its refusal names the field.
    thread: str | None = None
    action: str | None = None
    actor: str | None = None
    graph: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    before_id: DbId | None = None


AUDIT_LIST_PARAMS = frozenset(AuditQuery.model_fields)


@router.get("/audit", response=list[AuditEventOut], tags=["audit"])
def audit_list(request: AuthedRequest, query: Query[AuditQuery]) -> list[AuditEventOut]:
    """The audit events you may read, newest first; ``before_id`` (the last id you got) pages on.

    Filters as the console's audit page and the export: ``actor`` (any case), ``action`` (ending in ``.``, a
    family: ``decision.``), ``graph``, ``thread``, ``since``/``until`` (ISO 8601, UTC without an offset; a
    bare date is the whole day). An unknown parameter, or a bad value, is a 422 naming it."""
    permissions.require(_user(request), "approvals.view_audit", "read the audit trail")
    params_unknown_refuse(request, AUDIT_LIST_PARAMS, what="the audit list")
    filters = audit_filters_parse(
        thread=query.thread,
        action=query.action,
        actor=query.actor,
        graph=query.graph,
        since=query.since,
        until=query.until,
    )
    events = selectors.audit_list(user=_user(request), filters=filters, limit=query.limit, before_id=query.before_id)
    with gateway.reveals_gathered(_user(request), reading="audit:list"):  # one reveal for the page
        shown = gateway.audit_details_many(_user(request), events)
        # Each hash covers the event's unmasked details: withheld from a reader who sees values masked.
        withheld = gateway.audit_hashes_withheld(_user(request))
        return [_audit_out(e, details, withheld=withheld) for e, details in zip(events, shown, strict=True)]


def _audit_out(event: AuditEvent, details: dict[str, Any], *, withheld: bool) -> AuditEventOut:
    return AuditEventOut(
        id=event.id,
        chain=event.chain,
        at=event.at,
        actor=event.actor_label,
        action=event.action,
        subject_type=event.subject_type,
        subject_id=event.subject_id,
        thread_id=event.thread_id,
        graph=event.graph,
        details=details,
        prev_hash=gateway.DIGEST_WITHHELD if withheld else event.prev_hash,
        hash=gateway.DIGEST_WITHHELD if withheld else event.hash,
    )
