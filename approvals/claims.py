"""Claims: who is working on a task right now (a domain concept every surface honours).

A claim is a time-limited lock (``GATEHOUSE_CLAIM_SECONDS``) one reviewer takes
on an open task. ``task_decide`` checks it inline (``claim_check``): someone
else's active claim refuses the decision on every surface (console, API,
webhooks, /lg/). Only the holder or a principal with
``approvals.release_any_claim`` (admins, leads) releases it early; an expired
claim is simply overwritten by the next claimant.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone
from django.utils.formats import date_format

from approvals import permissions
from approvals.audit import audit_task
from approvals.errors import Conflict, Forbidden
from approvals.models import ApprovalTask, AuditAction, AuditEvent, TaskClaim
from runtime import rows


def can_release_any(user: permissions.Principal) -> bool:
    """Admins and leads may break someone else's claim (a reviewer went home holding ten tasks)."""
    return permissions.can(user, "approvals.release_any_claim")


def claim_for(task: ApprovalTask) -> TaskClaim | None:
    """The task's active claim, if any (an expired row is no claim), with its holder.

    What ``TaskClaim.objects.select_related("user").filter(task_id=...)`` reads, written out once per
    process: every decision and task page reads it.
    """
    with rows.fixed_cursor() as cursor:
        cursor.execute(_claim_sql(connection.vendor), [rows.db_value(ApprovalTask, "pk", task.pk)])
        row = cursor.fetchone()
    if row is None:
        return None
    claim = rows.model_and_related(TaskClaim, "user", User, row)
    return claim if claim.is_active else None


@functools.cache
def _claim_sql(vendor: str) -> str:
    q = connection.ops.quote_name
    claims, users = q(TaskClaim._meta.db_table), q(User._meta.db_table)
    return (
        f"SELECT {rows.columns(TaskClaim, 'c')}, {rows.columns(User, 'u')} FROM {claims} c "  # noqa: S608 - our names
        f"JOIN {users} u ON u.id = c.user_id WHERE c.task_id = %s"
    )


def claim_held_message(claim: TaskClaim) -> str:
    until = date_format(timezone.localtime(claim.expires_at), "H:i")
    return f"{claim.user.get_username()} has claimed this task until {until} UTC"


def claim_check(actor: User, claim: TaskClaim | None) -> TaskClaim | None:
    """Refuse ``actor``'s decision while someone else holds ``claim``, the task's active claim (read under
    the task's lock: ``task_rows.decision_grounds``).

    Returns ``actor``'s own active claim, which the decision then ends.
    """
    if claim is not None and claim.user_id != actor.pk:
        raise Conflict(f"{claim_held_message(claim)}; ask them, a lead or an admin to release it", field="claim")
    return claim


def claim_put(*, task: ApprovalTask, user: User) -> TaskClaim:
    """Write ``user``'s claim on ``task`` (the caller holds the task's lock and audits)."""
    now = timezone.now()
    expires = now + timedelta(seconds=settings.GATEHOUSE_CLAIM_SECONDS)
    claim, _ = TaskClaim.objects.update_or_create(
        task=task, defaults={"user": user, "claimed_at": now, "expires_at": expires}
    )
    return claim


_CLAIM_DROP = "DELETE FROM console_taskclaim WHERE task_id = %s"


def claim_drop(*, task: ApprovalTask) -> None:
    """End ``task``'s claim, if any (one row per task; nothing refers to it)."""
    with rows.fixed_cursor() as cursor:
        cursor.execute(_CLAIM_DROP, [rows.db_value(ApprovalTask, "pk", task.pk)])


@transaction.atomic
def task_claim(*, actor: User, task_id: Any) -> TaskClaim:
    visible = permissions.task_get_for(actor, task_id)
    permissions.require_decide(actor, visible)
    # Lock the task row so two reviewers clicking "Claim" at once serialise here.
    task = ApprovalTask.objects.select_for_update().get(pk=visible.pk)
    if not task.is_open:
        raise Conflict(f"this task is {task.status}; there is nothing to claim", field="task_id")
    held = claim_for(task)
    if held is not None and held.user_id != actor.pk:
        raise Conflict(claim_held_message(held), field="claim")
    claim = claim_put(task=task, user=actor)
    audit_task(
        task=task,
        actor=actor,
        action=AuditAction.TASK_CLAIMED,
        details={"until": claim.expires_at.isoformat()},
    )
    return claim


@transaction.atomic
def task_release(*, actor: User, task_id: Any) -> None:
    visible = permissions.task_get_for(actor, task_id)
    task = ApprovalTask.objects.select_for_update().get(pk=visible.pk)
    claim = TaskClaim.objects.select_related("user").filter(task=task).first()
    if claim is None or not claim.is_active:
        claim_drop(task=task)
        return
    if claim.user_id != actor.pk and not can_release_any(actor):
        # can_release_any: leads too (docs/hand-offs.md), which the message left out.
        raise Forbidden(f"only {claim.user.get_username()}, a lead or an admin can release this claim", field="claim")
    holder = claim.user.get_username()
    claim.delete()
    audit_task(
        task=task,
        actor=actor,
        action=AuditAction.TASK_RELEASED,
        details={"holder": holder},
    )


@dataclass(frozen=True)
class ClaimRelease:
    """Someone ended another person's claim ("Release their claim"): who did, and whose it was."""

    by: str
    holder: str


def claim_release_last(task: ApprovalTask) -> ClaimRelease | None:
    """The task's claim as it last ended, when someone other than its holder released it (an admin, a lead)
    and nobody has claimed it since. The holder's open page turned to "Nobody is working on this task."
    with no word of who had taken their claim away."""
    last = (
        AuditEvent.objects.filter(
            subject_type="task",
            subject_id=str(task.pk),
            action__in=[AuditAction.TASK_CLAIMED, AuditAction.TASK_RELEASED],
        )
        .order_by("-id")
        .only("action", "actor_label", "details")
        .first()
    )
    if last is None or last.action != AuditAction.TASK_RELEASED:
        return None
    holder = str((last.details or {}).get("holder", ""))
    if not holder or holder == last.actor_label:
        return None
    return ClaimRelease(by=last.actor_label, holder=holder)
