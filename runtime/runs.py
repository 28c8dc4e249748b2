"""Run lifecycle: enqueue after commit, claim with a lease and fencing token, finish.

At most one run per thread is queued or running (a partial unique index), so a
second start or resume fails on insert. A worker claims a run by bumping the
thread's fence; every later write of that worker is conditional on the fence,
so a worker that lost its lease (it stalled, or was presumed dead) cannot
overwrite the work of the one that took over. The same fence guards the run's
checkpoint writes and effects (``runtime.fencing``).

Lease arithmetic uses the database's clock (``Now()`` inside the statements),
never a process's own: a worker or sweeper whose clock is off by more than a
lease would otherwise steal a live run or keep a dead one. See docs/zombies.md.
"""

from __future__ import annotations

import functools
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerOperationalError

from runtime import rows, signals
from runtime.fencing import LeaseLost
from runtime.models import ERROR_TYPE_MAX_LENGTH, Branch, Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.notify import CHANNEL

# Gatehouse's keys in a run's configurable, hence in its checkpoints' metadata (``gatehouse_branch_id``,
# ``gatehouse_run_id``, ``gatehouse_fence``): no run metadata may stand in for them.
RESERVED_METADATA_PREFIX = "gatehouse_"


class SignedCommandRefused(Exception):
    """The signed command cannot be applied exactly as signed: the run fails instead of continuing without it."""


__all__ = ["LeaseLost"]  # re-exported: callers catch it from here

log = logging.getLogger(__name__)

# What publishing raises when the broker cannot be reached: Celery re-raises the transport's
# connection errors (refused, timed out, reset) as kombu's OperationalError.
BROKER_UNREACHABLE = (BrokerOperationalError, OSError)

# The Celery task that executes a run (runtime.tasks.execute_run).
EXECUTE_RUN_TASK = "runtime.execute_run"


class ThreadBusy(Exception):
    """A run is already queued or running on this thread."""

    def __init__(self, thread: Thread) -> None:
        super().__init__(f"thread {thread.id} already has a queued or running run")
        self.thread = thread


@dataclass(frozen=True)
class PendingInterrupt:
    interrupt_id: str
    value: Any
    node: str
    checkpoint_id: str
    checkpoint_ns: str = ""
    kind: str = "interrupt"  # or "breakpoint"
    response_schema: dict[str, Any] | None = None


@dataclass
class RunOutcome:
    """Where a run's pass through the graph stopped: interrupted (with its pending interrupts) or succeeded."""

    status: str  # RunStatus.INTERRUPTED | RunStatus.SUCCEEDED
    checkpoint_id: str
    values: dict[str, Any]
    interrupts: list[PendingInterrupt] = field(default_factory=list)


# The partial unique index that keeps one queued or running run per thread (runtime.models.Run).
ONE_ACTIVE_RUN = "one_active_run_per_thread"


def thread_start_enqueue(
    *, graph: str, metadata: dict[str, Any], input: dict[str, Any], created_by: User | None
) -> tuple[Thread, Run]:
    """A new thread and its first (start) run, dispatched once the caller's transaction commits.

    The thread is created busy and has no other run, so neither the busy
    update nor the active-run conflict of ``run_enqueue`` applies: two inserts.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("thread_start_enqueue must be called inside transaction.atomic()")
    thread = rows.row_insert(Thread(graph=graph, metadata=metadata, created_by=created_by, status=ThreadStatus.BUSY))
    run = rows.row_insert(
        Run(thread=thread, kind=RunKind.START, input=input, created_by=created_by, dispatched_at=timezone.now())
    )
    _dispatch_on_commit(run)
    return thread, run


def run_enqueue(
    *,
    thread: Thread,
    kind: RunKind,
    input: dict[str, Any] | None = None,
    command: dict[str, Any] | None = None,
    created_by: User | None = None,
    run_id: uuid.UUID | None = None,
) -> Run:
    """Create a queued run; it is dispatched to Celery only once the caller's transaction commits.

    ``run_id``: the id to give it, when rows written before it already name it.

    ``ThreadBusy`` if the thread already has a queued or running run. The
    insert runs without a savepoint: its only possible conflict is that one
    (the index named ``ONE_ACTIVE_RUN``; the primary key is a random UUID and
    foreign keys are checked at commit), and every caller turns ``ThreadBusy``
    into a refusal that rolls its transaction (or savepoint) back.

    The thread is marked busy by the insert's own statement on PostgreSQL (``rows.row_insert``'s
    ``along``: a data-modifying ``WITH``), one round trip; a refused insert marks nothing.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("run_enqueue must be called inside transaction.atomic()")
    now = timezone.now()
    busy = [ThreadStatus.BUSY.value, rows.db_value(Thread, "updated_at", now), rows.db_value(Thread, "pk", thread.pk)]
    try:
        run = rows.row_insert(
            Run(
                id=run_id or uuid.uuid4(),
                thread=thread,
                kind=kind,
                input=input,
                command=command,
                created_by=created_by,
                dispatched_at=now,
            ),
            along=(_THREAD_BUSY, busy),
        )
    except IntegrityError as exc:
        if _violates(exc, ONE_ACTIVE_RUN):
            raise ThreadBusy(thread) from exc
        raise
    thread.status = ThreadStatus.BUSY
    _dispatch_on_commit(run)
    return run


# What ``Thread.objects.filter(pk=...).update(status=BUSY, error="", updated_at=now)`` sends.
_THREAD_BUSY = "UPDATE runtime_thread SET status = %s, error = '', updated_at = %s WHERE id = %s"


def run_options_record(
    *,
    run: Run,
    multitask_strategy: str,
    recursion_limit: int | None,
    config: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> None:
    """The run options a /lg/ client created ``run`` with; call in the transaction that enqueued it
    (it is dispatched when that commits, so its worker reads them, with the run, at its claim).
    ``config``: the RunnableConfig keys the graph runs with (``Run.config``), None for none; ``metadata``
    the run's (``Run.metadata``). One statement, whatever is recorded."""
    Run.objects.filter(pk=run.pk).update(
        multitask_strategy=multitask_strategy, recursion_limit=recursion_limit, config=config, metadata=metadata
    )
    run.multitask_strategy, run.recursion_limit, run.config = multitask_strategy, recursion_limit, config
    run.metadata = metadata


def _violates(exc: IntegrityError, constraint: str) -> bool:
    """Whether ``exc`` is the violation of ``constraint`` (PostgreSQL names it; SQLite names its columns)."""
    diag = getattr(exc.__cause__, "diag", None)
    if diag is not None:
        return bool(diag.constraint_name == constraint)
    return "UNIQUE constraint failed: runtime_run.thread_id" in str(exc)


def _dispatch_on_commit(run: Run) -> None:
    run_id = run.id
    transaction.on_commit(lambda: run_dispatch(run_id=run_id))


def retry_input(*, thread: Thread) -> dict[str, Any] | None:
    """The input a retry of ``thread`` must apply again: its failed start run's, when that run failed before
    the thread's first checkpoint (a graph factory that raised, a node before the first step's checkpoint).
    A retry continues from the last checkpoint, and there was none: LangGraph refused it ("Received no input
    for __start__"), and the input, kept only in the trail, was lost."""
    last = thread.runs.order_by("-created_at").first()
    if last is None or last.kind != RunKind.START or last.status != RunStatus.FAILED or thread.checkpoint_id:
        return None
    return dict(last.input or {})


def retry_command(*, thread: Thread) -> dict[str, Any] | None:
    """The command a retry of ``thread`` must carry: the signed command of its failed (or cancelled) resume, if any.

    A resume run that failed, or that an operator cancelled, may have stored its command only in part; the
    retry re-applies what is missing (or fails), instead of continuing from the
    checkpoints without it (see ``runtime.executor``).
    """
    last = thread.runs.order_by("-created_at").first()
    if last is None or last.status not in (RunStatus.FAILED, RunStatus.CANCELLED) or not last.command:
        return None
    if last.command.get("resume") is None and not last.command.get("update"):
        return None
    return {**last.command, "retry_of": str(last.id)}


def run_dispatch(*, run_id: Any) -> None:
    """Send the run to Celery. A failure here is logged, not raised: the sweeper re-sends.

    A run is inserted already stamped as dispatched (``dispatched_at``: sent when its transaction
    commits), so sending costs no statement. A message lost on the way, or never sent because the
    process died after the commit, looks to the sweeper like a run sent and not claimed: it re-sends
    it after ``GATEHOUSE_REDISPATCH_AFTER_SECONDS``, as it would a run never stamped.

    Sent by task name: runtime.tasks imports the executor, which imports this module.
    """
    try:
        current_app.send_task(EXECUTE_RUN_TASK, args=[str(run_id)])
    except BROKER_UNREACHABLE as exc:
        # An outage (expected, documented): one line per run, not a traceback per thread started.
        log.error("dispatch of run %s failed (%s: %s); the sweeper will retry", run_id, type(exc).__name__, exc)
    except Exception:  # a bug: the run stays queued all the same, and its author needs the traceback
        log.exception("dispatch of run %s failed; the sweeper will retry", run_id)


# PostgreSQL: a claim's two writes in one statement. The thread's row is locked by the claim's read.
# The lease runs from this statement's start, not from the read's: the read may have waited on a lock
# (a cut-off worker's session holding the thread row) for longer than a lease, and a lease counted
# from before that wait would be over when the claim commits, free for the next claimant at once.
_CLAIM_UPDATE = """
WITH bumped AS (UPDATE runtime_thread SET fence = fence + 1 WHERE id = %s)
UPDATE runtime_run SET status = %s, attempts = attempts + 1, fence = %s, lease_owner = %s,
    lease_expires_at = STATEMENT_TIMESTAMP() + %s * INTERVAL '1 second',
    started_at = COALESCE(started_at, STATEMENT_TIMESTAMP())
WHERE id = %s
RETURNING lease_expires_at, started_at
"""

# PostgreSQL: a finish's fenced run update, then the thread's (only if the run's won), which
# notifies the thread's waiters (runtime.notify) when the transaction commits. Its row count is 1
# if the run was still this claim's.
_FINISH_UPDATE = """
WITH won AS (
    UPDATE runtime_run SET status = %s, finished_at = %s, lease_expires_at = NULL
    WHERE id = %s AND fence = %s AND status = %s
    RETURNING thread_id
)
UPDATE runtime_thread SET status = %s, "values" = %s, checkpoint_id = %s, error = '', updated_at = %s
WHERE id = (SELECT thread_id FROM won)
RETURNING pg_notify(%s, id::text)
"""


def _lease_end() -> CombinedExpression:
    """A new lease's expiry, by the database's clock."""
    return Now() + timedelta(seconds=settings.GATEHOUSE_LEASE_SECONDS)


def run_claim(*, run_id: str, worker: str) -> Run | None:
    """Take the run if it is queued, or running under a lapsed lease. None if someone else has it.

    One locking read and one update (two on SQLite): the read locks the run and its thread
    (so the fence it read is the one to bump) and takes the database's clock, by
    which a lease has lapsed, and the thread's current branch
    (``run.current_branch_id``; no branch can start while the run is active). The
    new lease runs from the update (PostgreSQL), after any wait for those locks.
    """
    with transaction.atomic():
        read = _claim_read(run_id)
        if read is None:
            return None
        run, now = read
        lapsed = run.status == RunStatus.RUNNING and (run.lease_expires_at is None or run.lease_expires_at < now)
        if run.status != RunStatus.QUEUED and not lapsed:
            return None
        if run.attempts >= settings.GATEHOUSE_MAX_RUN_ATTEMPTS:
            _run_fail_locked(run, _gave_up(run), dead_letter=True)
            return None
        run.thread.fence += 1  # the thread row is locked by the read above: this is the value written below
        run.status = RunStatus.RUNNING
        run.attempts += 1
        run.fence = run.thread.fence
        run.lease_owner = worker
        run.lease_expires_at = now + timedelta(seconds=settings.GATEHOUSE_LEASE_SECONDS)
        run.started_at = run.started_at or now
        if connection.vendor == "postgresql":
            # Both writes in one statement (a data-modifying WITH): one round trip, nothing to compile.
            lease = settings.GATEHOUSE_LEASE_SECONDS
            with rows.fixed_cursor() as cursor:
                cursor.execute(_CLAIM_UPDATE, [run.thread_id, run.status, run.fence, worker, lease, run.pk])
                run.lease_expires_at, run.started_at = cursor.fetchone()
        else:
            Thread.objects.filter(pk=run.thread_id).update(fence=F("fence") + 1)
            Run.objects.filter(pk=run.pk).update(
                status=run.status,
                attempts=F("attempts") + 1,
                fence=run.fence,
                lease_owner=worker,
                lease_expires_at=run.lease_expires_at,
                started_at=run.started_at,
            )
        signals.run_claimed.send(sender=Run, run=run)
    return run


def _claim_read(run_id: Any) -> tuple[Run, datetime] | None:
    """The claim's locking read: the run with its thread (``run.current_branch_id`` set), and the database's clock."""
    if connection.vendor != "postgresql":
        locked = (
            Run.objects.select_for_update()
            .select_related("thread")
            .annotate(
                db_now=Now(),
                current_branch_id=Subquery(
                    Branch.objects.filter(thread_id=OuterRef("thread_id")).order_by("-created_at").values("id")[:1]
                ),
            )
            .filter(pk=run_id)
        )
        found = next(iter(locked[:1]), None)  # a key lookup: no ORDER BY (which .first() adds and compiles)
        return None if found is None else (found, found.db_now)
    # PostgreSQL: the statement the queryset above compiles to, written out once per process
    # (its compilation was a good part of a claim's CPU); rows become models as the ORM makes them.
    with rows.fixed_cursor() as cursor:
        cursor.execute(_claim_sql(), [uuid.UUID(str(run_id))])
        row = cursor.fetchone()
    if row is None:
        return None
    split = rows.width(Run)
    run = rows.model_from_row(Run, row[:split])
    thread = rows.model_from_row(Thread, row[split : split + rows.width(Thread)])
    Run._meta.get_field("thread").set_cached_value(run, thread)
    run.current_branch_id = row[-1]  # type: ignore[attr-defined]  # as the queryset's annotation
    return run, row[-2]


@functools.cache
def _claim_sql() -> str:
    return (
        f"SELECT {rows.columns(Run, 'r')}, {rows.columns(Thread, 't')}, STATEMENT_TIMESTAMP(), "  # noqa: S608 - names from the models
        "(SELECT b.id FROM runtime_branch b WHERE b.thread_id = r.thread_id ORDER BY b.created_at DESC LIMIT 1) "
        "FROM runtime_run r INNER JOIN runtime_thread t ON t.id = r.thread_id WHERE r.id = %s FOR UPDATE"
    )


def lease_renew(*, run: Run) -> None:
    renewed = Run.objects.filter(pk=run.pk, fence=run.fence, status=RunStatus.RUNNING).update(
        lease_expires_at=_lease_end()
    )
    if not renewed:
        raise LeaseLost(f"run {run.id} was taken over (fence {run.fence})")


def lease_lost_record(*, run: Run, error: str) -> None:
    """A worker that found its claim of ``run`` taken over says so on the trail (``run.lease_lost``): its
    fence, refused, and who holds the run now. A transaction of its own, after the refused write rolled
    back; only on this path, never on a healthy run's."""
    try:
        with transaction.atomic():
            now = Run.objects.filter(pk=run.pk).values_list("fence", "lease_owner", "status").first()
            holder = dict(zip(("fence", "owner", "status"), now or (None, "", None), strict=True))
            signals.run_lease_lost.send(sender=Run, run=run, holder=holder, error=error)
    except Exception:  # the trail is evidence, not the run's outcome: the worker goes on serving runs
        log.exception("run %s: could not record that its lease was lost", run.id)


def run_finish(*, run: Run, outcome: RunOutcome) -> None:
    """Record the run's outcome; tasks and audit rows are written by signal receivers in this transaction."""
    now = timezone.now()
    thread_status = ThreadStatus.INTERRUPTED if outcome.status == RunStatus.INTERRUPTED else ThreadStatus.COMPLETED
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # The fenced run update, the thread update and the waiters' notification in one statement:
            # the thread is written (and notified) only if the run's update won.
            values = Thread._meta.get_field("values").get_db_prep_save(outcome.values, connection)
            with rows.fixed_cursor() as cursor:
                run_part: list[Any] = [outcome.status, now, run.pk, run.fence, RunStatus.RUNNING]
                cursor.execute(_FINISH_UPDATE, [*run_part, thread_status, values, outcome.checkpoint_id, now, CHANNEL])
                won = cursor.rowcount
            notified = True
        else:
            won = Run.objects.filter(pk=run.pk, fence=run.fence, status=RunStatus.RUNNING).update(
                status=outcome.status, finished_at=now, lease_expires_at=None
            )
            if won:
                Thread.objects.filter(pk=run.thread_id).update(
                    status=thread_status,
                    values=outcome.values,
                    checkpoint_id=outcome.checkpoint_id,
                    error="",
                    updated_at=now,
                )
            notified = False
        if not won:
            raise LeaseLost(f"run {run.id} was taken over before it finished")
        run.status = outcome.status
        run.finished_at = now
        run.lease_expires_at = None
        # What the update above wrote (the row is not read back).
        thread = run.thread
        thread.status, thread.values, thread.checkpoint_id = thread_status, outcome.values, outcome.checkpoint_id
        thread.error, thread.updated_at = "", now
        # ``notified``: waiters were notified by the statement above (runtime.notify does it otherwise).
        if outcome.status == RunStatus.INTERRUPTED:
            signals.run_interrupted.send(sender=Run, run=run, interrupts=outcome.interrupts, notified=notified)
        else:
            signals.run_completed.send(sender=Run, run=run, values=outcome.values, notified=notified)


def run_fail(*, run: Run, error: str, error_type: str = "", checkpoint_id: str = "") -> None:
    """Fail ``run`` with ``error`` (its text) and ``error_type``, the class name of the exception that
    failed it ("" for none): kept apart so no reader has to parse the type back out of the text."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().select_related("thread").get(pk=run.pk)
        if locked.fence != run.fence or locked.status != RunStatus.RUNNING:
            raise LeaseLost(f"run {run.id} was taken over before it failed")
        _run_fail_locked(locked, error, error_type=error_type, checkpoint_id=checkpoint_id)


def _run_fail_locked(
    run: Run, error: str, *, error_type: str = "", checkpoint_id: str = "", dead_letter: bool = False
) -> None:
    """Fail ``run`` (locked) and its thread. ``dead_letter``: the runtime gave up on it (no worker failed it)."""
    now = timezone.now()
    run.status = RunStatus.FAILED
    run.error = error
    run.error_type = error_type[:ERROR_TYPE_MAX_LENGTH]
    run.finished_at = now
    run.lease_expires_at = None
    run.save(update_fields=["status", "error", "error_type", "finished_at", "lease_expires_at"])
    updates: dict[str, Any] = {"status": ThreadStatus.FAILED, "error": error, "updated_at": now}
    if checkpoint_id:
        updates["checkpoint_id"] = checkpoint_id
    Thread.objects.filter(pk=run.thread_id).update(**updates)
    run.thread.refresh_from_db()
    signals.run_failed.send(sender=Run, run=run, error=error, dead_letter=dead_letter)


def run_release(*, run: Run, error: str) -> bool:
    """Hand a claimed run back for a later attempt (a transient error): its lease lapses now.

    The sweeper re-dispatches it after the backoff for its attempt count, or
    dead-letters it once the attempts are spent. ``error`` is kept on the run so
    operators see why it is retrying, and the dead letter says what kept failing.
    False if the run was taken over meanwhile (nothing to hand back).
    """
    released = Run.objects.filter(pk=run.pk, fence=run.fence, status=RunStatus.RUNNING).update(
        lease_expires_at=Now(), lease_owner="", error=error
    )
    return bool(released)


def runs_hand_back(*, owner_prefix: str) -> int:
    """Release the leases of every run this worker process holds (it is shutting down)."""
    return Run.objects.filter(status=RunStatus.RUNNING, lease_owner__startswith=owner_prefix).update(
        lease_expires_at=Now(), lease_owner=""
    )


def run_retry_due(*, run: Run, now: Any) -> bool:
    """A running run whose lease lapsed may be dispatched again once its backoff has passed (``now``: the DB's)."""
    from runtime.retry import retry_backoff

    if run.lease_expires_at is None:
        return True
    return bool(run.lease_expires_at + timedelta(seconds=retry_backoff(run.attempts)) <= now)


def runs_sweep() -> int:
    """Re-dispatch runs that no worker is executing: lapsed leases (after a backoff) and lost dispatches.

    A lapsed run that already used all its attempts is not sent again: it is
    marked failed here (the dead letter), so a run that kills every worker it
    lands on stops after GATEHOUSE_MAX_RUN_ATTEMPTS.
    """
    stale_dispatch = Now() - timedelta(seconds=settings.GATEHOUSE_REDISPATCH_AFTER_SECONDS)
    candidates = (
        Run.objects.annotate(db_now=Now())
        .filter(
            Q(status=RunStatus.RUNNING, lease_expires_at__lt=Now())
            | Q(status=RunStatus.QUEUED, dispatched_at__isnull=True, created_at__lt=stale_dispatch)
            | Q(status=RunStatus.QUEUED, dispatched_at__lt=stale_dispatch)
        )
        .only(
            "id",
            "thread_id",
            "status",
            "attempts",
            "fence",
            "lease_owner",
            "lease_expires_at",
            "dispatched_at",
            "created_at",
        )
        .order_by(F("dispatched_at").asc(nulls_first=True))[:500]
    )
    count = 0
    for run in candidates:
        now = run.db_now
        if run.status == RunStatus.RUNNING:
            if run.attempts >= settings.GATEHOUSE_MAX_RUN_ATTEMPTS:
                _run_dead_letter(run_id=run.id)
                continue
            if not run_retry_due(run=run, now=now) or _resent_since_lapse(run, now):
                continue
        elif not _redispatch_due(run, now):
            continue
        with transaction.atomic():
            if not _redispatch_claim(run, now):
                continue  # an overlapping sweep re-sent it a moment ago
            # On the trail, with the re-dispatch: the lease that lapsed, whose it was, which attempt. Once
            # per lapse; not for a run its worker handed back (a transient error, a shutdown: no owner).
            if run.status == RunStatus.RUNNING and run.lease_owner and not _resent_after_lapse(run):
                signals.run_lease_lapsed.send(sender=Run, run=run)
        log.warning("sweeper: re-dispatching run %s (attempts so far: %s)", run.id, run.attempts)
        run_dispatch(run_id=run.id)
        count += 1
    return count


def _redispatch_due(run: Run, now: Any) -> bool:
    """A queued run is re-sent at doubling intervals: once more after as long again as it had waited.

    A backlog longer than the re-dispatch delay (a slow or busy worker) is not a
    lost dispatch; re-sending every queued run each time would grow the queue
    faster than the worker drains it.
    """
    if run.dispatched_at is None:
        return True
    delay = timedelta(seconds=settings.GATEHOUSE_REDISPATCH_AFTER_SECONDS)
    waited_before = min(run.dispatched_at - run.created_at, delay * 16)  # capped: a lost one is still found
    return bool(now - run.dispatched_at >= max(delay, waited_before))


def _resent_since_lapse(run: Run, now: Any) -> bool:
    """A lapsed run already re-sent after its lease ended is given the re-dispatch delay to be claimed."""
    if run.dispatched_at is None or run.lease_expires_at is None or run.dispatched_at < run.lease_expires_at:
        return False
    return bool(now - run.dispatched_at < timedelta(seconds=settings.GATEHOUSE_REDISPATCH_AFTER_SECONDS))


def _resent_after_lapse(run: Run) -> bool:
    """Re-sent already since its lease lapsed (that re-dispatch recorded the lapse): ``dispatched_at`` as
    read before this sweep's claim moved it."""
    return (
        run.dispatched_at is not None and run.lease_expires_at is not None and run.dispatched_at >= run.lease_expires_at
    )


def _redispatch_claim(run: Run, now: datetime) -> bool:
    """Only one sweeper re-sends a run: the one whose conditional UPDATE moves its dispatch stamp.

    The new stamp is ``now``, the database's clock as the sweep read it, written as a value, not
    ``Now()``: the next sweep's compare must match what it reads back, and SQLite's ``Now()`` stores
    text with milliseconds that no value read back from it compares equal to (the run was then
    never re-sent again).
    """
    claimed = Run.objects.filter(pk=run.pk, status=run.status, dispatched_at=run.dispatched_at)
    return bool(claimed.update(dispatched_at=now))


def _run_dead_letter(*, run_id: Any) -> None:
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("thread").annotate(db_now=Now()).filter(pk=run_id).first()
        lapsed = run is not None and run.lease_expires_at is not None and run.lease_expires_at < run.db_now
        if run is None or run.status != RunStatus.RUNNING or not lapsed:
            return  # finished or re-claimed meanwhile
        _run_fail_locked(run, _gave_up(run), dead_letter=True)


def _gave_up(run: Run) -> str:
    last = f"; last error: {run.error}" if run.error else ": the worker was lost each time"
    return f"gave up after {run.attempts} attempts{last}"[:4000]
