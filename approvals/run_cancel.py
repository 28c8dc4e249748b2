"""Cancelling a run, for every surface (``/lg/`` cancel and ``multitask_strategy``, the native API, the console).

Operators and admins (``runtime.retry_thread``: the run controls) may cancel a
queued or running run of a thread they can see: ``interrupt`` stops it at its
last checkpoint, ``rollback`` also removes the checkpoints it wrote. The
runtime does the work (``runtime.cancel``: the cancel is recorded and the fence
revoked, so the executing worker's late writes are refused); this module checks
the permission, withdraws the run's pending tasks and audits, in the cancel's
transaction. The rollback of the checkpoints runs after that commit (only then
can no write of the run land any more) and is audited on its own.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from approvals import permissions
from approvals.audit import audit_record, audit_task
from approvals.errors import Conflict, InvalidInput, NotFound
from approvals.models import ApprovalTask, AuditAction, TaskStatus
from runtime.cancel import (
    CancelRefused,
    cancel_action_parse,
    run_cancel_settle,
    run_cancel_stopped,
    run_rollback_unfinished,
)
from runtime.cancel import run_cancel as runtime_run_cancel
from runtime.models import ACTIVE_RUN_STATUSES, Run, RunCancelAction, Thread

REASON_MAX = 4000


def cancel_action_of(value: str) -> RunCancelAction:
    try:
        return cancel_action_parse(value)
    except CancelRefused as exc:
        raise InvalidInput(exc.message, field=exc.field) from None


def run_cancel(
    *,
    actor: User,
    thread_id: Any,
    run_id: Any | None,
    action: str,
    reason: str,
    via: str,
    reason_required: bool = False,
) -> Run:
    """Cancel ``run_id`` of the thread (or, with ``run_id`` None, the thread's active run).

    Must not run inside a transaction: the rollback step needs the cancel committed first.
    """
    run = _run_cancel(
        actor=actor,
        thread_id=thread_id,
        run_id=run_id,
        action=action,
        reason=reason,
        via=via,
        reason_required=reason_required,
    )
    _run_settle(actor=actor, run=run, via=via)
    run.refresh_from_db()
    return run


@transaction.atomic
def _run_cancel(
    *, actor: User, thread_id: Any, run_id: Any | None, action: str, reason: str, via: str, reason_required: bool
) -> Run:
    thread = permissions.thread_get_for(actor, thread_id)
    permissions.require_run_cancel(actor, thread)
    cancel = cancel_action_of(action)
    if reason_required and not reason.strip():
        raise InvalidInput("say why the run is cancelled", field="reason")
    if len(reason) > REASON_MAX:
        raise InvalidInput(f"at most {REASON_MAX} characters", field="reason")
    if run_id is None:
        run = thread.runs.filter(status__in=ACTIVE_RUN_STATUSES).first()
        if run is None:
            raise Conflict(f"thread {thread.id} has no queued or running run to cancel", field="thread_id")
    else:
        run = thread.runs.filter(pk=run_id).first()
        if run is None:
            raise NotFound(f"run {run_id} not found on thread {thread.id}", field="run_id")
    if run_rollback_unfinished(run=run):
        return run  # cancelled and audited before; only the rollback of its checkpoints is left to do
    was = run.status
    try:
        run = runtime_run_cancel(run=run, action=cancel, actor_label=actor.get_username(), reason=reason)
    except CancelRefused as exc:
        raise Conflict(exc.message, field=exc.field) from None
    audit_record(
        actor=actor,
        action=AuditAction.RUN_CANCELLED,
        subject_type="run",
        subject_id=run.id,
        thread_id=thread.id,
        graph=thread.graph,
        details={"kind": run.kind, "action": cancel, "reason": reason, "was": was, "via": via},
    )
    if cancel == RunCancelAction.ROLLBACK:
        # Tasks are opened only by a run's recorded outcome, which a cancelled run never reaches;
        # any pending task still naming the run goes with it.
        for task in ApprovalTask.objects.filter(run=run, status=TaskStatus.PENDING):
            task.status = TaskStatus.CANCELLED
            task.save(update_fields=["status"])
            audit_task(
                task=task,
                actor=actor,
                action=AuditAction.TASK_CANCELLED,
                details={"reason": f"run {run.id} was rolled back", "run": str(run.id)},
            )
    return run


def _run_settle(*, actor: User, run: Run, via: str) -> None:
    removed = run_cancel_settle(run=run)
    if run.cancel_action != RunCancelAction.ROLLBACK:
        return
    thread = Thread.objects.get(pk=run.thread_id)
    with transaction.atomic():
        audit_record(
            actor=actor,
            action=AuditAction.RUN_ROLLED_BACK,
            subject_type="run",
            subject_id=run.id,
            thread_id=thread.id,
            graph=thread.graph,
            details={"checkpoints_removed": removed, "checkpoint_id": thread.checkpoint_id, "via": via},
        )


def run_cancel_done(*, user: permissions.Principal, thread_id: Any, run_id: Any) -> bool:
    """For ``cancel?wait=true``: the cancelled run is no longer executed by any worker."""
    thread = permissions.thread_get_for(user, thread_id)
    run = thread.runs.filter(pk=run_id).first()
    return run is not None and run_cancel_stopped(run=run)
