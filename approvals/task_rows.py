"""The task rows every pause and every decision reads and writes, written out once per process.

``task_decide`` runs these under the task's lock on every decision, and ``tasks_open`` on every run
that pauses: what the ORM would compose and compile on each call (~0.3–0.5 ms of CPU apiece) is
fixed SQL, prepared on PostgreSQL (``runtime.rows``). Each returns or writes what its ORM form did;
``tests/approvals/test_task_rows.py`` compares them.
"""

from __future__ import annotations

import functools

from django.db import connection
from django.utils import timezone

from approvals.models import ApprovalTask, Decision, TaskStatus
from runtime import rows
from runtime.models import Thread


@functools.cache
def _decisions_sql(vendor: str) -> str:
    return f"SELECT {rows.columns(Decision)} FROM approvals_decision WHERE task_id = %s"  # noqa: S608 - our names


def decisions_on(task: ApprovalTask) -> list[Decision]:
    """The decisions made on ``task`` so far (``task.decisions.all()``: unordered, each knowing its task)."""
    with rows.fixed_cursor() as cursor:
        cursor.execute(_decisions_sql(connection.vendor), [rows.db_value(ApprovalTask, "pk", task.pk)])
        found = cursor.fetchall()
    return rows.models_knowing(Decision, found, "task", task)


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


_SIBLING_STATUSES = (
    "SELECT status FROM approvals_approvaltask "
    "WHERE thread_id = %s AND (status = %s OR checkpoint_id = %s) AND id <> %s"
)


def sibling_statuses(task: ApprovalTask) -> set[str]:
    """The statuses of the thread's other tasks that are pending or opened at ``task``'s checkpoint."""
    thread_key, task_key = (
        rows.db_value(ApprovalTask, "thread", task.thread_id),
        rows.db_value(ApprovalTask, "pk", task.pk),
    )
    params = [thread_key, TaskStatus.PENDING.value, task.checkpoint_id, task_key]
    with rows.fixed_cursor() as cursor:
        cursor.execute(_SIBLING_STATUSES, params)
        return {status for (status,) in cursor.fetchall()}


_TASK_DECIDED = "UPDATE approvals_approvaltask SET status = %s, decided_at = %s WHERE id = %s"


def task_close(task: ApprovalTask) -> None:
    """Mark ``task`` decided, now (``task.save(update_fields=["status", "decided_at"])``)."""
    task.status, task.decided_at = TaskStatus.DECIDED, timezone.now()
    decided_at = rows.db_value(ApprovalTask, "decided_at", task.decided_at)
    with rows.fixed_cursor() as cursor:
        cursor.execute(
            _TASK_DECIDED, [TaskStatus.DECIDED.value, decided_at, rows.db_value(ApprovalTask, "pk", task.pk)]
        )
