"""Time travel for operators: replay or fork a thread from a past checkpoint, copy a thread.

Every surface (console, native API, ``/lg/``) calls these services; they
authorise (``runtime.time_travel``), require a reason, validate, delegate the
LangGraph work to ``runtime.branches`` and audit, in one transaction.

What the original branch keeps: its checkpoints, decisions, effects and audit
rows are never rewritten. The thread moves to the new branch (as LangGraph's
own time travel does), so approval tasks still pending on the old branch can no
longer be answered there: they are superseded (audited), and the new branch's
pauses open new tasks bound to its own checkpoints.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from approvals import gateway, permissions
from approvals.audit import audit_record, audit_thread
from approvals.errors import Conflict, InvalidInput, NotFound
from approvals.inputs import CHECKPOINT_ID_PATTERN
from approvals.models import ApprovalTask, AuditAction, TaskStatus
from approvals.services import graph_runnable_check, state_write_guard, task_supersede
from runtime.branches import (
    BRANCH_KEY,
    CheckpointNotFound,
    UnknownNode,
    branch_fork,
    branch_replay,
    branches_of,
    checkpoint_saved,
    effect_key_branch,
    thread_copy,
)
from runtime.models import Branch, Effect, Run, RunKind, Thread, ThreadStatus
from runtime.registry import UnknownGraph, graph_get, graph_is_external, graph_is_registered
from runtime.runs import ThreadBusy, run_enqueue
from runtime.state import thread_state_read
from runtime.state_schema import FieldError, has_validators, values_validate

# As a decision's reason: what the audit row keeps is bounded, and a longer one is refused, not cut.
REASON_MAX = 4000


def _reason_clean(reason: str | None, thread: Thread) -> str:
    """The reason, checked: required unless the thread's graph says ``"reasons": {"time_travel": "optional"}``."""
    text = (reason or "").strip()
    if not text and _reason_required(thread):
        raise InvalidInput("a reason is required to replay, fork or copy a thread", field="reason")
    if len(text) > REASON_MAX:
        raise InvalidInput(f"the reason is longer than {REASON_MAX} characters", field="reason")
    return text


def _reason_required(thread: Thread) -> bool:
    try:
        return graph_get(thread.graph).time_travel_reason_required
    except UnknownGraph:  # a graph no longer registered: the strict default
        return True


def _checkpoint_check(checkpoint_id: str) -> None:
    if not isinstance(checkpoint_id, str) or not re.fullmatch(CHECKPOINT_ID_PATTERN, checkpoint_id):
        raise InvalidInput(f"checkpoint_id: {checkpoint_id!r} is not a checkpoint id", field="checkpoint_id")


def _thread_for(actor: User, thread_id: Any) -> Thread:
    thread = permissions.thread_get_for(actor, thread_id)
    permissions.require_time_travel(actor, thread)
    if not thread.graph or graph_is_external(thread.graph) or not _has_checkpoints(thread):
        raise Conflict("this thread has no checkpoints to travel to", field="thread_id")
    graph_runnable_check(thread.graph)
    return thread


def _has_checkpoints(thread: Thread) -> bool:
    """The row names its latest checkpoint, or the saver holds one: a first run that failed on a state the
    graph cannot load recorded none on the row, and the fork that repairs it was refused."""
    if thread.checkpoint_id:
        return True
    try:
        checkpoint_saved(thread=thread)
    except CheckpointNotFound:
        return False
    return True


def _open_tasks_lock(thread: Thread) -> None:
    """Lock the thread's pending tasks before the branch locks the thread: a decision locks its task, then
    the thread (``permissions.task_get_for(lock=True)``), and a fork or replay that took the thread first and
    its tasks after (to supersede them) deadlocked with it; PostgreSQL ended one, answered as a 503."""
    list(ApprovalTask.objects.select_for_update().filter(thread=thread, status=TaskStatus.PENDING).values_list("pk"))


def _supersede_open_tasks(thread: Thread, branch: Branch) -> list[str]:
    """Pending tasks of the line the thread leaves cannot be answered any more: supersede them (audited)."""
    superseded = []
    for task in ApprovalTask.objects.select_for_update().filter(thread=thread, status=TaskStatus.PENDING):
        task_supersede(
            task,
            reason=f"the thread moved to {branch.kind} branch {branch.id}",
            details={"branch": str(branch.id)},
        )
        superseded.append(str(task.id))
    return superseded


def _branch_audit(
    actor: User,
    action: AuditAction,
    thread: Thread,
    branch: Branch,
    *,
    checkpoint_id: str,
    reason: str,
    **extra: Any,
) -> None:
    """Supersede the tasks of the line the thread leaves and record the move to ``branch`` (fork and replay)."""
    superseded = _supersede_open_tasks(thread, branch)
    audit_thread(
        thread=thread,
        actor=actor,
        action=action,
        details={
            "branch": str(branch.id),
            "parent_branch": str(branch.parent_id) if branch.parent_id else None,
            "from_checkpoint_id": checkpoint_id,
            "reason": reason,
            "run": str(branch.run_id) if branch.run_id else None,
            "superseded_tasks": superseded,
            **extra,
        },
    )


@transaction.atomic
def thread_fork(
    *,
    actor: User,
    thread_id: Any,
    checkpoint_id: str,
    values: dict[str, Any] | None,
    as_node: str | None = None,
    reason: str | None,
    run: bool = False,
    redone_seen: str | None = None,
) -> Branch:
    """Update the state at a past checkpoint as a new branch; with ``run``, continue it on the worker.

    ``redone_seen``: the ids of the actions the caller's confirmation said run again (``effects_redone_for``).
    """
    thread = _thread_for(actor, thread_id)
    reason = _reason_clean(reason, thread)
    _checkpoint_check(checkpoint_id)
    if run:
        _redone_check(thread, checkpoint_id, redone_seen)
    if values is not None and not isinstance(values, dict):
        raise InvalidInput("values must be an object of state keys", field="values")
    schema = graph_get(thread.graph).state_schema
    # A model validator reading several fields judges the write over the checkpoint's values (read only then).
    at = thread_state_read(thread, checkpoint_id) if values and has_validators(schema) else None
    try:
        values_validate(schema, values or {}, prefix="values", current=at.values if at else None)
    except FieldError as exc:
        raise InvalidInput(exc.message, field=exc.field) from None
    if values:  # the fork writes over that checkpoint's values
        values = state_write_guard(
            actor=actor, thread=thread, values=values, field="values", checkpoint_id=checkpoint_id
        )
    _open_tasks_lock(thread)
    try:
        branch = branch_fork(
            thread=thread,
            checkpoint_id=checkpoint_id,
            values=values or None,
            as_node=as_node,
            reason=reason,
            created_by=actor,
            run=run,
        )
    except CheckpointNotFound as exc:
        raise NotFound(str(exc), field="checkpoint_id") from None
    except UnknownNode as exc:
        raise InvalidInput(str(exc), field="as_node") from None
    except ThreadBusy:
        raise Conflict("a run is active on this thread; wait for it to settle", field="thread_id") from None
    _branch_audit(
        actor,
        AuditAction.THREAD_FORKED,
        thread,
        branch,
        checkpoint_id=checkpoint_id,
        reason=reason,
        head_checkpoint_id=branch.head_checkpoint_id,
        values=values or {},  # masked on the way out (gateway.audit_details_for)
        as_node=as_node,
    )
    return branch


@transaction.atomic
def thread_replay(
    *, actor: User, thread_id: Any, checkpoint_id: str, reason: str | None, redone_seen: str | None = None
) -> Branch:
    """Re-run the thread from a past checkpoint on the worker, as a new branch.

    ``redone_seen``: the ids of the actions the caller's confirmation said run again (``effects_redone_for``).
    """
    thread = _thread_for(actor, thread_id)
    reason = _reason_clean(reason, thread)
    _checkpoint_check(checkpoint_id)
    _redone_check(thread, checkpoint_id, redone_seen)
    _open_tasks_lock(thread)
    try:
        branch = branch_replay(thread=thread, checkpoint_id=checkpoint_id, reason=reason, created_by=actor)
    except CheckpointNotFound as exc:
        raise NotFound(str(exc), field="checkpoint_id") from None
    except ThreadBusy:
        raise Conflict("a run is active on this thread; wait for it to settle", field="thread_id") from None
    _branch_audit(actor, AuditAction.THREAD_REPLAYED, thread, branch, checkpoint_id=checkpoint_id, reason=reason)
    return branch


@transaction.atomic
def thread_copy_make(*, actor: User, thread_id: Any, reason: str | None) -> Thread:
    """A new thread holding a copy of the thread's checkpoints (``/lg/`` ``threads.copy``)."""
    thread = permissions.thread_get_for(actor, thread_id)
    permissions.require_time_travel(actor, thread)
    reason = _reason_clean(reason, thread)
    copy = thread_copy(thread=thread, created_by=actor)
    audit_thread(
        thread=copy,
        actor=actor,
        action=AuditAction.THREAD_COPIED,
        details={"copied_from": str(thread.id), "checkpoint_id": thread.checkpoint_id, "reason": reason},
    )
    return copy


@transaction.atomic
def thread_continue(*, actor: User, thread_id: Any) -> Run:
    """Run an idle thread on from its latest checkpoint (a fork made without a run, or a copy)."""
    thread = permissions.thread_get_for(actor, thread_id)
    permissions.require_start(actor, thread.graph)
    graph_runnable_check(thread.graph)
    thread = Thread.objects.select_for_update().get(pk=thread.pk)
    if thread.status != ThreadStatus.IDLE or not thread.checkpoint_id:
        raise Conflict(f"only an idle thread with checkpoints can be continued; this one is {thread.status}")
    try:
        # As a run past a static breakpoint: no input, no command; the checkpoint it
        # starts from tells a redelivered attempt whether it already moved on.
        run = run_enqueue(
            thread=thread, kind=RunKind.RESUME, command={"checkpoint_id": thread.checkpoint_id}, created_by=actor
        )
    except ThreadBusy:
        raise Conflict("a run is active on this thread", field="thread_id") from None
    audit_record(
        actor=actor,
        action=AuditAction.RUN_QUEUED,
        subject_type="run",
        subject_id=run.id,
        thread_id=thread.id,
        graph=thread.graph,
        details={"run": str(run.id), "kind": "continue", "checkpoint_id": thread.checkpoint_id},
    )
    return run


def branches_for(user: permissions.Principal, thread_id: Any) -> list[Branch]:
    """The thread's branches, oldest first (the thread's first line has none)."""
    thread = permissions.thread_get_for(user, thread_id)
    return branches_of(thread=thread)


def _checkpoint_at(thread: Thread, checkpoint_id: str) -> tuple[datetime, str | None] | None:
    """When ``checkpoint_id`` was written and the line it is on (None: the first line); None when it
    cannot be read (a retired graph, an external engine's thread, an unknown checkpoint).

    Read from the saver, not through the graph: both are in the checkpoint as stored, and a state the graph
    cannot load (``state_unreadable``) made the thread page a 500 here."""
    if not thread.graph or graph_is_external(thread.graph) or not graph_is_registered(thread.graph):
        return None
    if not checkpoint_id:
        return None
    try:
        saved = checkpoint_saved(thread=thread, checkpoint_id=checkpoint_id)
        at = datetime.fromisoformat(str(saved.checkpoint["ts"]))
    except (CheckpointNotFound, ValueError):
        return None
    line = (saved.metadata or {}).get(BRANCH_KEY)
    return at, str(line) if line else None


def _effects_after(thread: Thread, checkpoint_id: str) -> list[Effect]:
    """The effects ``checkpoint_id``'s line recorded after it (the thread's first line: unscoped keys)."""
    found = _checkpoint_at(thread, checkpoint_id)
    if found is None:  # a retired graph's thread replays nothing
        return []
    at, line = found
    effects = thread.effects.filter(created_at__gt=at).select_related("run").order_by("created_at", "id")
    return [e for e in effects if effect_key_branch(e.key) == line]


class EffectLine(StrEnum):
    """Where an effect was recorded, seen from the line the thread is on now."""

    THIS_LINE = "this_line"  # on the current line, since it began (or the thread never branched)
    BEFORE_BRANCH = "before_branch"  # on a line the current one grew from, before it branched: its history
    ORIGINAL_LINE = "original_line"  # on the first line, after the current line left it
    OTHER_BRANCH = "other_branch"  # on a branch the current line does not descend from (or past where it left)


def effects_lines(*, thread: Thread, effects: list[Effect]) -> dict[Any, EffectLine]:
    """Each effect's line (by effect id), as the thread stands now. A replayed thread listed the original
    line's payment beside "Waiting for a decision" as though it had happened on the line shown.

    The current line is the newest branch (every fork or replay moves the thread there). An effect on a line
    it descends from belongs to its history if it was recorded before the checkpoint where the current line
    (or its ancestor) left that line: the checkpoint's own time tells (``_checkpoint_at``); one that cannot
    be read counts the effect as not this line's."""
    branches = {str(b.id): b for b in thread.branches.all()}
    if not branches:
        return {e.pk: EffectLine.THIS_LINE for e in effects}
    current = max(branches.values(), key=lambda b: b.created_at)
    left_at: dict[str | None, datetime | None] = {}  # ancestor line → when the current line's history left it
    child: Branch | None = current
    while child is not None:
        parent = str(child.parent_id) if child.parent_id else None
        if parent in left_at:  # a cycle cannot be made, but a loop here must not hang a page
            break
        found = _checkpoint_at(thread, child.from_checkpoint_id)
        left_at[parent] = found[0] if found else None
        child = branches.get(parent) if parent else None
    lines: dict[Any, EffectLine] = {}
    for effect in effects:
        line = effect_key_branch(effect.key)
        left = left_at.get(line)
        if line == str(current.id):
            lines[effect.pk] = EffectLine.THIS_LINE
        elif line in left_at and left is not None and effect.created_at < left:
            lines[effect.pk] = EffectLine.BEFORE_BRANCH
        else:
            lines[effect.pk] = EffectLine.ORIGINAL_LINE if line is None else EffectLine.OTHER_BRANCH
    return lines


def _redone_check(thread: Thread, checkpoint_id: str, seen: str | None) -> None:
    """``seen``: the effect ids the confirmation named (None: a caller that showed none, the API). One recorded
    since the page asked is not performed again unannounced: the form comes back with the new question."""
    if seen is None:
        return
    now = ",".join(str(e.pk) for e in _effects_after(thread, checkpoint_id))
    if now != seen:
        raise Conflict(
            "actions were recorded after this checkpoint since the page was loaded; nothing was done: "
            "read the question again"
        )


def effects_redone_for(user: permissions.Principal, thread: Thread, checkpoint_id: str) -> list[Effect]:
    """The actions a replay (or a fork that runs) from ``checkpoint_id`` performs again: those its line
    recorded after that checkpoint, oldest first, results masked for ``user`` (copies of the rows).

    On a branch they are new actions with their own idempotency keys (``runtime.branches.scoped_effect_key``):
    a provider does not refuse them as repeats. A replay from after an approval paid a loan a second time
    with nothing said first; the console asks with this list.
    """
    permissions.thread_require_visible(user, thread)
    # Arguments are not shown, so never carried out of here unmasked.
    return gateway.effects_masked(user, thread, _effects_after(thread, checkpoint_id), args_kept=False)


def subgraph_states_for(user: permissions.Principal, thread_id: Any, checkpoint_id: str | None = None) -> Any:
    """Subgraph states (by ``checkpoint_ns``) at the checkpoint, redacted for ``user``."""
    return gateway.subgraph_states_for(user, thread_id, checkpoint_id)
