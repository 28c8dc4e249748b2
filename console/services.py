"""Console writes: claim and release tasks, and decide through the claim check.

Claims are a console concern (who is looking at a task right now), kept out
of ``approvals`` until the domain takes them over; see ``task_decide_checked``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.formats import date_format

from approvals import permissions, services
from approvals.audit import audit_record
from approvals.errors import Conflict, Forbidden
from approvals.models import ApprovalTask, AuditAction, Decision
from approvals.payloads import DecisionRequest
from console.models import TaskClaim


def can_release_any(user: permissions.Principal) -> bool:
    """Admins may break someone else's claim (a reviewer went home holding ten tasks)."""
    if not user.is_authenticated:
        return False
    return bool(user.has_perm("console.release_any_claim") or user.has_perms(permissions.ROLES["admin"]))


def claim_active(task: ApprovalTask) -> TaskClaim | None:
    claim = TaskClaim.objects.select_related("user").filter(task=task).first()
    return claim if claim is not None and claim.is_active else None


def _held_message(claim: TaskClaim) -> str:
    until = date_format(timezone.localtime(claim.expires_at), "H:i")
    return f"{claim.user.get_username()} has claimed this task until {until} UTC"


@transaction.atomic
def task_claim(*, actor: User, task_id: Any) -> TaskClaim:
    visible = permissions.task_get_for(actor, task_id)
    permissions.require_decide(actor, visible)
    # Lock the task row so two reviewers clicking "Claim" at once serialise here.
    task = ApprovalTask.objects.select_for_update().get(pk=visible.pk)
    if not task.is_open:
        raise Conflict(f"this task is {task.status}; there is nothing to claim", field="task_id")
    claim = TaskClaim.objects.select_related("user").filter(task=task).first()
    if claim is not None and claim.is_active and claim.user_id != actor.pk:
        raise Conflict(_held_message(claim), field="claim")
    now = timezone.now()
    expires = now + timedelta(seconds=settings.GATEHOUSE_CLAIM_SECONDS)
    claim, _ = TaskClaim.objects.update_or_create(
        task=task, defaults={"user": actor, "claimed_at": now, "expires_at": expires}
    )
    audit_record(
        actor=actor,
        action=AuditAction.TASK_CLAIMED,
        subject_type="task",
        subject_id=task.id,
        thread_id=task.thread_id,
        graph=task.graph,
        details={"until": expires.isoformat()},
    )
    return claim


@transaction.atomic
def task_release(*, actor: User, task_id: Any) -> None:
    visible = permissions.task_get_for(actor, task_id)
    task = ApprovalTask.objects.select_for_update().get(pk=visible.pk)
    claim = TaskClaim.objects.select_related("user").filter(task=task).first()
    if claim is None or not claim.is_active:
        TaskClaim.objects.filter(task=task).delete()
        return
    if claim.user_id != actor.pk and not can_release_any(actor):
        raise Forbidden(f"only {claim.user.get_username()} or an admin can release this claim", field="claim")
    holder = claim.user.get_username()
    claim.delete()
    audit_record(
        actor=actor,
        action=AuditAction.TASK_RELEASED,
        subject_type="task",
        subject_id=task.id,
        thread_id=task.thread_id,
        graph=task.graph,
        details={"holder": holder},
    )


def claim_guard(actor: User, task: ApprovalTask) -> None:
    """Registered as an approvals decision guard: someone else's active claim refuses the decision."""
    claim = TaskClaim.objects.select_related("user").filter(task_id=task.pk).first()
    if claim is not None and claim.is_active and claim.user_id != actor.pk:
        raise Conflict(f"{_held_message(claim)}; ask them or an admin to release it", field="claim")


def task_decide_checked(
    *,
    actor: User,
    task_id: Any,
    request: DecisionRequest,
    authenticated_at: datetime | None,
    password: str = "",
) -> Decision:
    """Decide from the console: signed with this session's proof time (or the re-entered password).

    ``authenticated_at`` is the session's own (``approvals.security.request_proof_at``), never
    the user's last sign-in anywhere: a login in another browser must not refresh this one.
    Not wrapped in a transaction of its own: ``task_decide`` audits policy
    refusals in a separate transaction, which an outer one would roll back.
    """
    signer = services.Signer(authenticated_at=authenticated_at, password=password or None)
    decision = services.task_decide(actor=actor, task_id=task_id, request=request, signer=signer)
    TaskClaim.objects.filter(task_id=decision.task_id).delete()
    return decision
