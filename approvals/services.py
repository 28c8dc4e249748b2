"""Writes of the approvals domain: start threads, open tasks, decide, retry.

Each service runs in one transaction with its audit event; Celery dispatch
happens after commit (``runtime.runs.run_enqueue``).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from approvals import permissions
from approvals.audit import audit_record, canonical
from approvals.errors import Conflict, InvalidInput
from approvals.models import ApprovalTask, Decision, TaskKind, TaskStatus
from approvals.payloads import (
    DecisionRequest,
    payload_kind,
    payload_title,
    resume_value_build,
)
from runtime.models import Run, RunKind, Thread, ThreadStatus
from runtime.registry import UnknownGraph, graph_get, graph_names
from runtime.runs import PendingInterrupt, ThreadBusy, run_enqueue, thread_create
from runtime.schema import FieldError, values_validate

REASON_REQUIRED = {"reject", "edit"}


def payload_digest(payload: Any) -> str:
    return hashlib.sha256(canonical(payload).encode()).hexdigest()


def _graph_entry(graph: str) -> Any:
    try:
        return graph_get(graph)
    except UnknownGraph:
        raise InvalidInput(f"unknown graph {graph!r} (registered: {', '.join(graph_names())})", field="graph") from None


@transaction.atomic
def thread_start(
    *, actor: User, graph: str, input: dict[str, Any], metadata: dict[str, Any]
) -> tuple[Thread, Run]:
    permissions.require(actor, "runtime.start_thread", "start threads")
    entry = _graph_entry(graph)
    permissions.require_start(actor, graph)
    try:
        values_validate(entry.input_schema, input, prefix="input")
    except FieldError as exc:
        raise InvalidInput(exc.message, field=exc.field) from None
    thread = thread_create(graph=graph, metadata=metadata, created_by=actor)
    run = run_enqueue(thread=thread, kind=RunKind.START, input=input, created_by=actor)
    audit_record(
        actor=actor,
        action="thread.started",
        subject_type="thread",
        subject_id=thread.id,
        thread_id=thread.id,
        graph=graph,
        details={"run": str(run.id), "input": input, "metadata": metadata},
    )
    return thread, run


@transaction.atomic
def thread_retry(*, actor: User, thread_id: Any) -> Run:
    thread = permissions.thread_get_for(actor, thread_id)
    permissions.require_retry(actor, thread)
    thread = Thread.objects.select_for_update().get(pk=thread.pk)
    if thread.status != ThreadStatus.FAILED:
        raise Conflict(f"only failed threads can be retried; this one is {thread.status}", field="thread_id")
    try:
        run = run_enqueue(thread=thread, kind=RunKind.RETRY, created_by=actor)
    except ThreadBusy as exc:
        raise Conflict(str(exc), field="thread_id") from None
    audit_record(
        actor=actor,
        action="thread.retried",
        subject_type="thread",
        subject_id=thread.id,
        thread_id=thread.id,
        graph=thread.graph,
        details={"run": str(run.id)},
    )
    return run


def tasks_open(*, run: Run, interrupts: list[PendingInterrupt]) -> list[ApprovalTask]:
    """Turn a run's pending interrupts into approval tasks, idempotently.

    Called inside the transaction that records the run's outcome. A pending
    task for the same interrupt id and payload is kept (a redelivered run
    changes nothing); one whose payload changed, or whose interrupt is no
    longer pending, is superseded.
    """
    thread = run.thread
    current_ids = {i.interrupt_id for i in interrupts}
    stale = ApprovalTask.objects.filter(thread=thread, status=TaskStatus.PENDING).exclude(interrupt_id__in=current_ids)
    for task in stale:
        _task_supersede(task, reason="the thread moved on without this interrupt")
    opened = []
    for item in interrupts:
        digest = payload_digest(item.value)
        existing = ApprovalTask.objects.filter(
            thread=thread, interrupt_id=item.interrupt_id, status=TaskStatus.PENDING
        ).first()
        if existing is not None and existing.payload_digest == digest:
            if existing.checkpoint_id != item.checkpoint_id:
                existing.checkpoint_id = item.checkpoint_id
                existing.save(update_fields=["checkpoint_id"])
            continue
        if existing is not None:
            _task_supersede(existing, reason="the interrupt was raised again with a different payload")
        task = ApprovalTask.objects.create(
            thread=thread,
            run=run,
            graph=thread.graph,
            node=item.node,
            kind=TaskKind.BREAKPOINT if item.kind == "breakpoint" else TaskKind.INTERRUPT,
            interrupt_id=item.interrupt_id,
            checkpoint_id=item.checkpoint_id,
            checkpoint_ns=item.checkpoint_ns,
            payload=item.value,
            payload_digest=digest,
            response_schema=item.response_schema,
            title=payload_title(item.value, item.node),
            due_at=_due_at(item.value),
        )
        audit_record(
            actor=None,
            actor_label="runtime",
            action="task.opened",
            subject_type="task",
            subject_id=task.id,
            thread_id=thread.id,
            graph=thread.graph,
            details={
                "node": task.node,
                "interrupt_id": task.interrupt_id,
                "checkpoint_id": task.checkpoint_id,
                "checkpoint_ns": task.checkpoint_ns,
                "kind": task.kind,
                "payload_digest": digest,
            },
        )
        opened.append(task)
    return opened


def _due_at(payload: Any) -> Any:
    if payload_kind(payload) == "gatehouse" and isinstance(payload.get("sla_seconds"), int):
        return timezone.now() + timedelta(seconds=payload["sla_seconds"])
    return None


def _task_supersede(task: ApprovalTask, *, reason: str) -> None:
    task.status = TaskStatus.SUPERSEDED
    task.save(update_fields=["status"])
    audit_record(
        actor=None,
        actor_label="runtime",
        action="task.superseded",
        subject_type="task",
        subject_id=task.id,
        thread_id=task.thread_id,
        graph=task.graph,
        details={"reason": reason},
    )


@transaction.atomic
def task_decide(*, actor: User, task_id: Any, request: DecisionRequest) -> Decision:
    visible = permissions.task_get_for(actor, task_id)
    permissions.require_decide(actor, visible)
    task = ApprovalTask.objects.select_for_update().get(pk=visible.pk)
    thread = Thread.objects.select_for_update().get(pk=task.thread_id)
    if task.status != TaskStatus.PENDING:
        raise Conflict(f"this task is {task.status} and can no longer be decided", field="task_id")
    if request.checkpoint_id is not None and request.checkpoint_id != task.checkpoint_id:
        raise Conflict(
            f"stale view: you saw checkpoint {request.checkpoint_id}, the task is at {task.checkpoint_id}; reload",
            field="checkpoint_id",
        )
    if thread.status != ThreadStatus.INTERRUPTED or thread.checkpoint_id != task.checkpoint_id:
        raise Conflict("the thread has moved on since this task opened; reload it", field="checkpoint_id")
    if request.outcome in REASON_REQUIRED and not request.reason.strip():
        raise InvalidInput(f"a reason is required to {request.outcome}", field="reason")
    state_patch = _state_patch_check(task, request)
    resume_value = resume_value_build(
        payload=task.payload,
        task_kind=task.kind,
        response_schema=task.response_schema,
        request=request,
        reviewer=actor.get_username(),
    )
    decision = Decision.objects.create(
        task=task,
        actor=actor,
        outcome=request.outcome,
        reason=request.reason,
        state_patch=state_patch,
        resume_value=resume_value,
        checkpoint_id=task.checkpoint_id,
        payload_digest=task.payload_digest,
    )
    task.status = TaskStatus.DECIDED
    task.decided_at = timezone.now()
    task.save(update_fields=["status", "decided_at"])
    audit_record(
        actor=actor,
        action="decision.made",
        subject_type="task",
        subject_id=task.id,
        thread_id=thread.id,
        graph=thread.graph,
        details={
            "decision": str(decision.id),
            "outcome": request.outcome,
            "reason": request.reason,
            "state_patch": state_patch,
            "resume": resume_value,
            "checkpoint_id": task.checkpoint_id,
            "payload_digest": task.payload_digest,
        },
    )
    if task.kind == TaskKind.BREAKPOINT and request.outcome == "reject":
        _thread_cancel(thread, actor=actor, reason=request.reason)
    elif not ApprovalTask.objects.filter(thread=thread, status=TaskStatus.PENDING).exists():
        _resume_enqueue(thread, task.checkpoint_id, actor)
    return decision


def _state_patch_check(task: ApprovalTask, request: DecisionRequest) -> dict[str, Any] | None:
    patch = request.state_patch
    if request.outcome == "edit" and not patch and request.action_args is None and request.decisions is None:
        raise InvalidInput("an edit needs state edits or edited action arguments", field="edits")
    if not patch:
        return None
    if request.outcome not in ("edit", "approve"):
        raise InvalidInput("state edits go with an edit or approve decision", field="edits")
    editable = None
    payload = task.payload if isinstance(task.payload, dict) else {}
    if payload_kind(payload, task.kind) == "gatehouse" and payload.get("editable"):
        editable = payload["editable"]
    try:
        return values_validate(graph_get(task.graph).state_schema, patch, prefix="edits", allowed=editable)
    except FieldError as exc:
        raise InvalidInput(exc.message, field=exc.field) from None


def _resume_enqueue(thread: Thread, checkpoint_id: str, actor: User) -> Run:
    # Interrupts raised in one super-step are resumed together, with an id → value map.
    waiting = list(
        Decision.objects.select_related("task")
        .filter(task__thread=thread, task__checkpoint_id=checkpoint_id, run__isnull=True)
        .order_by("created_at")
    )
    resume = {d.task.interrupt_id: d.resume_value for d in waiting if d.task.kind == TaskKind.INTERRUPT}
    update: dict[str, Any] = {}
    for d in waiting:
        update.update(d.state_patch or {})
    command = {"resume": resume or None, "update": update or None, "checkpoint_id": checkpoint_id}
    try:
        run = run_enqueue(thread=thread, kind=RunKind.RESUME, command=command, created_by=actor)
    except ThreadBusy as exc:
        raise Conflict(str(exc), field="thread_id") from None
    Decision.objects.filter(pk__in=[d.pk for d in waiting]).update(run=run)
    audit_record(
        actor=actor,
        action="run.queued",
        subject_type="run",
        subject_id=run.id,
        thread_id=thread.id,
        graph=thread.graph,
        details={"kind": "resume", "interrupts": sorted(resume), "update": update or None},
    )
    return run


def _thread_cancel(thread: Thread, *, actor: User, reason: str) -> None:
    Thread.objects.filter(pk=thread.pk).update(status=ThreadStatus.CANCELLED, updated_at=timezone.now())
    audit_record(
        actor=actor,
        action="thread.cancelled",
        subject_type="thread",
        subject_id=thread.id,
        thread_id=thread.id,
        graph=thread.graph,
        details={"reason": reason},
    )
