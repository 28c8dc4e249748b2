"""Cancel a queued or running run: ``interrupt`` it, or ``rollback`` to where it started.

A running run is not stopped by killing anything. The cancel is a database
write, in one transaction that locks the run: the run becomes ``cancelled``
(with who asked, which action and why) and the thread's fencing token moves
on, exactly as a takeover by another worker would move it (docs/zombies.md).
From that commit on, every write the executing worker still attempts is
refused by the guards that already stop a zombie:

- checkpoint and pending writes: the fenced savers compare the fence in the
  write's own transaction (``runtime.fencing``);
- effects: ``perform_effect`` compares the fence before it records an intent
  or calls out; an effect that completed before the cancel stays recorded in
  the ledger, once;
- heartbeat, outcome, failure, hand-back: conditional on ``status = running``;
  so no task is opened, no audit event or webhook is sent for the outcome.

The worker notices between graph steps (``run_cancel_check`` in the executor's
stream loop; the next fenced write or heartbeat otherwise), stops, logs that
the run was cancelled and acknowledges it (``run_cancel_acknowledge``), which
is what a waiting ``cancel?wait=true`` waits for. A node in the middle of its
work finishes that work first (nothing interrupts Python code mid-way); only
what it then tries to write is refused.

``rollback`` then removes the checkpoints the run wrote (each carries the run
id in its metadata), so the thread's state and history are back at the
checkpoint the run started from. That is a second step, after the cancel has
committed (``run_cancel_settle``): only then can no write of the run land any
more. It is idempotent, so it can be repeated if the process dies in between.
Rolling back never undoes the outside world: effects stay in the ledger.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from runtime.checkpointer import checkpointer_get
from runtime.fencing import LeaseLost
from runtime.models import Run, RunCancelAction, RunKind, RunStatus, Thread, ThreadStatus
from runtime.notify import thread_notify
from runtime.retention import _is_postgres, thread_checkpoints_delete
from runtime.state import thread_state_read

log = logging.getLogger(__name__)


class CancelRefused(Exception):
    """The run cannot be cancelled as asked; ``field`` names what to change."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class RunCancelled(LeaseLost):
    """Raised in the executing worker: an operator cancelled its run; it must stop writing."""


def cancel_action_parse(value: str) -> RunCancelAction:
    try:
        return RunCancelAction(value)
    except ValueError:
        raise CancelRefused(
            f"unknown action {value!r}; use one of: {', '.join(RunCancelAction.values)}", field="action"
        ) from None


def cancel_message(*, action: str, actor_label: str, reason: str) -> str:
    text = f"cancelled by {actor_label} ({action})"
    return f"{text}: {reason}"[:4000] if reason else text


def run_cancel(*, run: Run, action: str, actor_label: str, reason: str) -> Run:
    """Cancel ``run`` (queued or running) in the caller's transaction; returns the locked, updated run.

    Queued: no worker has it; it simply never runs. Running: the cancel is
    recorded and the fence revoked (see the module docstring). A queued resume
    is refused (it carries decisions already recorded), and so is ``rollback``
    of a resume: the decision it applies is signed and audited; rolling the
    thread back under it would leave a recorded decision that never happened.
    Interrupt a resume run instead (the thread stops at its last checkpoint).

    Call ``run_cancel_settle`` after the transaction commits: it rolls back the
    checkpoints (``rollback``) and refreshes the thread's snapshot.
    """
    cancel = cancel_action_parse(action)
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("run_cancel must be called inside transaction.atomic()")
    locked = Run.objects.select_for_update().select_related("thread").get(pk=run.pk)
    if locked.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
        raise CancelRefused(
            f"run {locked.id} is {locked.status}; only a queued or running run can be cancelled", field="run_id"
        )
    if locked.kind == RunKind.RESUME and locked.status == RunStatus.QUEUED:
        raise CancelRefused(
            f"run {locked.id} is a queued resume: it carries decisions already recorded and cannot be cancelled "
            "before it runs",
            field="run_id",
        )
    if locked.kind == RunKind.RESUME and cancel == RunCancelAction.ROLLBACK:
        raise CancelRefused(
            "a resume run applies a recorded decision and cannot be rolled back; use action=interrupt",
            field="action",
        )
    now = timezone.now()
    # The same move as a takeover: every fenced write of the worker that holds the run is refused from now on.
    Thread.objects.filter(pk=locked.thread_id).update(fence=F("fence") + 1)
    locked.status = RunStatus.CANCELLED
    locked.error = cancel_message(action=cancel, actor_label=actor_label, reason=reason)
    locked.cancel_action = cancel
    locked.cancelled_by = actor_label[:150]
    locked.cancel_reason = reason[:4000]
    locked.finished_at = now
    locked.lease_expires_at = None
    # A running run keeps its lease owner until that worker acknowledges it stopped (``run_cancel_acknowledge``).
    locked.save(
        update_fields=[
            "status",
            "error",
            "cancel_action",
            "cancelled_by",
            "cancel_reason",
            "finished_at",
            "lease_expires_at",
        ]
    )
    thread = locked.thread
    if cancel == RunCancelAction.ROLLBACK:
        # Busy until its checkpoints are gone (``run_cancel_settle``): no new run may build on them meanwhile.
        Thread.objects.filter(pk=thread.pk).update(error="", updated_at=now)
    else:
        Thread.objects.filter(pk=thread.pk, status=ThreadStatus.BUSY).update(
            status=_idle_status(locked, thread.checkpoint_id), error="", updated_at=now
        )
    thread.refresh_from_db()
    thread_notify(thread.id)  # wakes joins and long polls on commit
    log.info("run %s: %s", locked.id, locked.error)
    return locked


def run_cancel_settle(*, run: Run) -> int:
    """After the cancel committed: roll back the run's checkpoints (``rollback``) and refresh the thread snapshot.

    Returns how many checkpoints were removed. Idempotent.
    """
    run = Run.objects.select_related("thread").get(pk=run.pk)
    if run.status != RunStatus.CANCELLED:
        raise RuntimeError(f"run {run.id} is not cancelled")
    removed = 0
    if run.cancel_action == RunCancelAction.ROLLBACK and run.thread.graph:
        saver = checkpointer_get()
        doomed = checkpoints_of_run(saver, str(run.thread_id), str(run.id))
        if doomed:
            thread_checkpoints_delete(saver, str(run.thread_id), doomed)
            removed = len(doomed)
    view = thread_state_read(run.thread) if run.thread.graph else None
    checkpoint_id = view.checkpoint_id if view else ""
    with transaction.atomic():
        Thread.objects.filter(pk=run.thread_id).update(
            checkpoint_id=checkpoint_id, values=view.values if view else {}, updated_at=timezone.now()
        )
        # A rolled-back thread was kept busy until now; no run can have been enqueued on it meanwhile.
        Thread.objects.filter(pk=run.thread_id, status=ThreadStatus.BUSY).exclude(
            runs__status__in=(RunStatus.QUEUED, RunStatus.RUNNING)
        ).update(status=_idle_status(run, checkpoint_id))
        thread_notify(run.thread_id)
    if removed:
        log.info("run %s: rolled back, %s checkpoint(s) of the run removed", run.id, removed)
    return removed


def _idle_status(run: Run, checkpoint_id: str) -> ThreadStatus:
    """Stopped mid-way: idle at its last checkpoint. Never started: back to how it was before."""
    return ThreadStatus.COMPLETED if (checkpoint_id and run.started_at is None) else ThreadStatus.IDLE


def run_rollback_unfinished(*, run: Run) -> bool:
    """A rollback whose second step did not complete (the process died): the thread is still busy for it."""
    return (
        run.status == RunStatus.CANCELLED
        and run.cancel_action == RunCancelAction.ROLLBACK
        and Thread.objects.filter(pk=run.thread_id, status=ThreadStatus.BUSY).exists()
        and not Run.objects.filter(thread_id=run.thread_id, status__in=(RunStatus.QUEUED, RunStatus.RUNNING)).exists()
    )


def checkpoints_of_run(saver: Any, thread_id: str, run_id: str) -> list[tuple[str, str]]:
    """(namespace, checkpoint id) of every checkpoint ``run_id`` wrote: the executor stamps its id in their metadata."""
    if _is_postgres(saver):
        with saver._cursor() as cur:
            cur.execute(
                "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = %s "
                "AND metadata ->> 'gatehouse_run_id' = %s",
                (thread_id, run_id),
            )
            return [(r["checkpoint_ns"], r["checkpoint_id"]) for r in cur.fetchall()]
    with saver.cursor(transaction=False) as cur:
        cur.execute("SELECT checkpoint_ns, checkpoint_id, metadata FROM checkpoints WHERE thread_id = ?", (thread_id,))
        rows = cur.fetchall()
    out = []
    for ns, cid, metadata in rows:
        if (json.loads(metadata) if metadata else {}).get("gatehouse_run_id") == run_id:
            out.append((ns, cid))
    return out


def run_cancel_check(*, run: Run) -> None:
    """In the executing worker, between graph steps: stop if the run was cancelled."""
    cancelled = Run.objects.filter(pk=run.pk, status=RunStatus.CANCELLED).values_list("error", flat=True).first()
    if cancelled is not None:
        raise RunCancelled(f"run {run.id} was {cancelled}")


def run_cancel_acknowledge(*, run: Run) -> bool:
    """The worker that held a cancelled run has stopped executing it: it lets go of the lease.

    Conditional on the run being cancelled *and* still naming this claim, so it
    can change nothing else. True if this worker's run was cancelled.
    """
    acknowledged = Run.objects.filter(
        pk=run.pk, status=RunStatus.CANCELLED, fence=run.fence, lease_owner=run.lease_owner
    ).update(lease_owner="")
    if acknowledged:
        thread_notify(run.thread_id)  # wakes a ``cancel?wait=true``
    return bool(acknowledged)


def run_cancel_stopped(*, run: Run) -> bool:
    """A cancelled run no worker is executing any more (never claimed, or acknowledged)."""
    return run.status == RunStatus.CANCELLED and not run.lease_owner
