"""The task rows every pause and every decision reads and writes, written out once per process.

``task_decide`` runs these under the task's lock on every decision, and ``tasks_open`` on every run
that pauses: what the ORM would compose and compile on each call (~0.3–0.5 ms of CPU apiece) is
fixed SQL, prepared on PostgreSQL (``runtime.rows``). Each returns or writes what its ORM form did;
``tests/approvals/test_task_rows.py`` compares them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from approvals.models import ApprovalTask, Decision, TaskClaim, TaskStatus
from runtime import rows
from runtime.models import Thread


@dataclass(frozen=True)
class DecisionGrounds:
    """What a decision on a task is judged against, read under the task's lock (``decision_grounds``)."""

    claim: TaskClaim | None  # the task's active claim with its holder (an expired row is no claim)
    decisions: list[Decision]  # the decisions made on it so far, unordered, each knowing its task
    pending_sibling: bool  # another task of the thread is pending
    checkpoint_sibling: bool  # another task of the thread was opened at this task's checkpoint


@functools.cache
def _grounds_sql(vendor: str) -> str:
    q = connection.ops.quote_name
    tasks, claims, users = q(ApprovalTask._meta.db_table), q(TaskClaim._meta.db_table), q(User._meta.db_table)
    decisions = q(Decision._meta.db_table)
    # Portable SQL (SQLite runs it too). One row per decision made, or one row if none, each with the
    # claim and its holder (NULLs when unclaimed) and the two EXISTS, uncorrelated: run once.
    return (
        f"SELECT {rows.columns(TaskClaim, 'c')}, {rows.columns(User, 'u')}, {rows.columns(Decision, 'd')}, "  # noqa: S608 - our names
        f"EXISTS (SELECT 1 FROM {tasks} s WHERE s.thread_id = %s AND s.status = %s AND s.id <> %s), "
        f"EXISTS (SELECT 1 FROM {tasks} s WHERE s.thread_id = %s AND s.checkpoint_id = %s AND s.id <> %s) "
        f"FROM (SELECT 1 AS one) k LEFT JOIN {claims} c ON c.task_id = %s LEFT JOIN {users} u ON u.id = c.user_id "
        f"LEFT JOIN {decisions} d ON d.task_id = %s"
    )


def decision_grounds(task: ApprovalTask) -> DecisionGrounds:
    """``task``'s claim, its earlier decisions and whether other tasks of its thread are pending or share its
    checkpoint: what ``claims.claim_for``, ``task.decisions.all()`` and a read of the siblings' statuses found,
    in one statement.

    Call it after the locking read of ``task`` (``permissions.task_get_for(lock=True)``), never fold it into
    that read: under READ COMMITTED a ``SELECT ... FOR UPDATE`` that waited for the lock re-checks only the
    rows it locks, so its sub-selects would see the snapshot from before the wait and miss a decision a
    concurrent signer committed meanwhile. A statement of its own takes a snapshot after the lock is held.
    """
    task_key, thread_key = (
        rows.db_value(ApprovalTask, "pk", task.pk),
        rows.db_value(ApprovalTask, "thread", task.thread_id),
    )
    pending = TaskStatus.PENDING.value
    params = [thread_key, pending, task_key, thread_key, task.checkpoint_id, task_key, task_key, task_key]
    with rows.fixed_cursor() as cursor:
        cursor.execute(_grounds_sql(connection.vendor), params)
        found = cursor.fetchall()
    claim_end = rows.width(TaskClaim) + rows.width(User)
    decision_end = claim_end + rows.width(Decision)
    first = found[0]
    claim = None if first[0] is None else rows.model_and_related(TaskClaim, "user", User, first[:claim_end])
    made = [row[claim_end:decision_end] for row in found if row[claim_end] is not None]
    return DecisionGrounds(
        claim=claim if claim is not None and claim.is_active else None,
        decisions=rows.models_knowing(Decision, made, "task", task),
        pending_sibling=bool(first[decision_end]),
        checkpoint_sibling=bool(first[decision_end + 1]),
    )


@functools.cache
def _pending_sql(vendor: str) -> str:
    return (
        f"SELECT {rows.columns(ApprovalTask)} FROM approvals_approvaltask "  # noqa: S608 - our names
        "WHERE thread_id = %s AND status = %s ORDER BY created_at"
    )


def tasks_pending(thread: Thread) -> list[ApprovalTask]:
    """``thread``'s pending tasks, oldest first, each knowing its thread (what a run's outcome reconciles)."""
    with rows.fixed_cursor() as cursor:
        cursor.execute(
            _pending_sql(connection.vendor), [rows.db_value(Thread, "pk", thread.pk), TaskStatus.PENDING.value]
        )
        found = cursor.fetchall()
    return rows.models_knowing(ApprovalTask, found, "thread", thread)


_TASK_DECIDED = "UPDATE approvals_approvaltask SET status = %s, decided_at = %s WHERE id = %s"


def task_closing(task: ApprovalTask) -> tuple[str, list[Any]]:
    """The write that marks ``task`` decided, now (``task.save(update_fields=["status", "decided_at"])``);
    ``task`` says so at once.

    For ``rows.row_insert(decision, along=...)`` of the signature that decides the task: on PostgreSQL
    the insert and the close are one statement, and neither is written without the other.
    """
    task.status, task.decided_at = TaskStatus.DECIDED, timezone.now()
    decided_at = rows.db_value(ApprovalTask, "decided_at", task.decided_at)
    return _TASK_DECIDED, [TaskStatus.DECIDED.value, decided_at, rows.db_value(ApprovalTask, "pk", task.pk)]
