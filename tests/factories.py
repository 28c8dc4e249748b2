"""Test data made the way the product makes it: through the runtime and domain services.

``task_make`` opens an approval task as a worker does when a run stops at a gate:
the thread is created (``thread_create``), a start run is queued, claimed and
recorded as interrupted (``run_enqueue``, ``run_claim``, ``run_finish``), and the
domain's receivers open the task (``approvals.services.tasks_open``). The payload
digest, the thread's checkpoint, the deadline, the quorum and the audit rows are
therefore the ones production writes. No graph runs and no checkpoint is stored:
that is all inbox, permission, form and domain tests need; flows that must resume
a thread use the real worker (``tests/conftest.py``).

``decision_make`` decides through ``approvals.services.task_decide`` and, when the
decision resumes the thread, records that resume run as done (as a worker would),
so no run is left queued for a worker that never comes.

Each maker is one transaction: the runs it queues are dispatched only once they
are finished, so a live worker that receives them finds nothing to do.

Only times are moved by hand afterwards (``created_at``, ``due_at``, a decision's
``at``): a test stands in for the passing of time, which no service does. A signed
decision refuses that on PostgreSQL (migration 0035): it is moved with triggers off
(``triggers_off``), as only a superuser could.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from approvals.models import ApprovalTask, Decision, TaskStatus
from approvals.payloads import DecisionRequest
from approvals.services import Signer, task_decide, task_supersede
from runtime.gatekeeper import gate_payload
from runtime.models import Run, RunKind, RunStatus, Thread
from runtime.runs import PendingInterrupt, RunOutcome, run_claim, run_enqueue, run_finish
from runtime.threads import thread_create

# The lease owner of the runs recorded here (``worker:tests.factories`` in the audit trail).
FACTORY_WORKER = "tests.factories"


def loan_gate(
    amount: int = 20000, *, required_approvals: int = 1, decisions: tuple[str, ...] | list[str] | None = None
) -> dict[str, Any]:
    extra: dict[str, Any] = {"decisions": decisions} if decisions is not None else {}
    return gate_payload(
        title=f"Loan for {amount}",
        summary="Borderline risk",
        proposed_action={"name": "disburse", "args": {"amount": amount, "term_months": 24}},
        editable=["amount", "term_months"],
        required_approvals=required_approvals,
        sla_seconds=3600,
        details={"risk_score": 0.5},
        **extra,
    )


def thread_make(
    *, graph: str = "loan_approval", metadata: dict[str, Any] | None = None, created_by: Any = None
) -> Thread:
    return thread_create(graph=graph, metadata=metadata or {}, created_by=created_by)


def _run_recorded(thread: Thread, kind: RunKind, outcome: RunOutcome, **run: Any) -> Run:
    """Queue a run of ``thread``, claim it and record ``outcome``, as a worker does (same transaction)."""
    queued = run_enqueue(thread=thread, kind=kind, **run)
    claimed = run_claim(run_id=str(queued.id), worker=FACTORY_WORKER)
    assert claimed is not None, f"run {queued.id} could not be claimed"
    run_finish(run=claimed, outcome=outcome)
    return claimed


def task_make(
    *,
    graph: str = "loan_approval",
    node: str = "human_review",
    payload: Any = None,
    status: str = TaskStatus.PENDING,
    metadata: dict[str, Any] | None = None,
    created_at: datetime | None = None,
    due_at: datetime | None = None,
    title: str = "",
    created_by: User | None = None,
    values: dict[str, Any] | None = None,
) -> ApprovalTask:
    """A task opened at ``node`` of a new thread of ``graph``, pending (or ``superseded``), whose thread's
    state is ``values``.

    ``title`` becomes the payload's title (the task's title is read from it); a decided task is one
    ``decision_make`` decided.
    """
    if status not in (TaskStatus.PENDING, TaskStatus.SUPERSEDED):
        raise ValueError(f"task_make makes pending or superseded tasks, not {status!r}: decide one with decision_make")
    payload = loan_gate() if payload is None else payload
    if title and isinstance(payload, dict):
        payload = {**payload, "title": title}
    checkpoint = uuid.uuid4().hex
    interrupt = PendingInterrupt(interrupt_id=uuid.uuid4().hex, value=payload, node=node, checkpoint_id=checkpoint)
    with transaction.atomic():
        thread = thread_make(graph=graph, metadata=metadata, created_by=created_by)
        outcome = RunOutcome(
            status=RunStatus.INTERRUPTED, checkpoint_id=checkpoint, values=values or {}, interrupts=[interrupt]
        )
        _run_recorded(thread, RunKind.START, outcome, input={}, created_by=created_by)
        task = ApprovalTask.objects.select_related("thread").get(thread=thread, interrupt_id=interrupt.interrupt_id)
        if status == TaskStatus.SUPERSEDED:
            task_supersede(task, reason="the thread moved on without this interrupt")
    moved = {"created_at": created_at} if created_at is not None else {}
    if due_at is not None:
        moved["due_at"] = due_at
    if moved:
        ApprovalTask.objects.filter(pk=task.pk).update(**moved)
    task.refresh_from_db()
    return task


@contextmanager
def triggers_off() -> Iterator[None]:
    """One transaction with the database's triggers off, as a superuser may switch them (``session_replication_role``):
    the insider of the threat model, or a test moving a signed row in time. Nothing to switch on SQLite."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = replica")
        yield


def decision_make(
    task: ApprovalTask, actor: User, outcome: str = "approve", *, at: datetime | None = None, **request: Any
) -> Decision:
    """``actor``'s decision on ``task`` through ``task_decide`` (signed in just now); the thread's resume, if the
    decision completes the task, is recorded as done. ``at`` moves the decision (and the task's closing) in time."""
    with transaction.atomic():
        decision = task_decide(
            actor=actor,
            task_id=task.pk,
            request=DecisionRequest(outcome=outcome, **request),
            signer=Signer(authenticated_at=timezone.now()),
        )
        if decision.run is not None:
            done = RunOutcome(status=RunStatus.SUCCEEDED, checkpoint_id=uuid.uuid4().hex, values={})
            resume = run_claim(run_id=str(decision.run.id), worker=FACTORY_WORKER)
            assert resume is not None, f"resume run {decision.run.id} could not be claimed"
            run_finish(run=resume, outcome=done)
    if at is not None:
        with triggers_off():
            Decision.objects.filter(pk=decision.pk).update(created_at=at)
        ApprovalTask.objects.filter(pk=task.pk, decided_at__isnull=False).update(decided_at=at)
        decision.refresh_from_db()
    task.refresh_from_db()
    return decision


def task_decided(*, by: User, at: datetime | None = None, **task: Any) -> ApprovalTask:
    """A task (``task_make``'s arguments) approved by ``by``; ``at`` is when."""
    made = task_make(**task)
    decision_make(made, by, at=at)
    made.refresh_from_db()
    return made
