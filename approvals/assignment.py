"""Hand-offs: who a task is assigned to, reassigning (leads), delegating (claim holders), out-of-office.

The routing fields are ``ApprovalTask.assigned_user`` / ``assigned_group`` /
``assigned_at``. They narrow who is *asked*, never who may see or decide: the
one policy (``approvals.permissions``) still decides that. Reading them follows
one rule, kept here (``task_assignees``, ``assigned_to_q``), whoever wrote them
(a hand-off here, or deadline escalation, which writes ``assigned_group``):

- a named user is the assignee; the group is then where the task falls back to;
- no user and a group: every member of the group is asked;
- neither: everyone the policy lets decide the gate.

Whoever is made assignee must be able to decide the gate (graph and gate
assignments) and must not be someone separation of duties would refuse (a
signer of the task, or the thread's starter when the gate separates duties).
A target who is away is replaced by their delegate, chains followed up to
``MAX_AWAY_HOPS`` and never round a loop; if no one is found the task falls
back to the group (or to everyone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from approvals import permissions
from approvals.abilities import (
    approvals_given,
    node_gone_refusal,
    separation_required,
    signature_standing,
    thread_started_by,
)
from approvals.audit import audit_record, audit_task
from approvals.claims import claim_drop, claim_for, claim_put
from approvals.comments import CONTROL_CHARACTERS
from approvals.errors import Conflict, Forbidden, InvalidInput
from approvals.gateway import may_see_sensitive
from approvals.models import ApprovalTask, AuditAction, AuditEvent, Away
from runtime.storable import NotStorable, value_storable_check

MAX_AWAY_HOPS = 5
SERVICE_PREFIX = "webhook:"  # inbound webhooks' principals (approvals.inbound.webhooks): never handed work
NOTE_MAX = 1000
AWAY_NOTE_MAX = 300  # shown beside the name wherever the person is offered as an assignee


# --- reading the routing fields (one rule) ------------------------------------------------------


@dataclass(frozen=True)
class Assignees:
    user: User | None
    group: Group | None

    @property
    def label(self) -> str:
        if self.user is not None:
            return self.user.get_username()
        return f"group {self.group.name}" if self.group is not None else ""


def task_assignees(task: ApprovalTask) -> Assignees:
    """Who ``task`` is assigned to (see the module doc for what each combination means)."""
    return Assignees(user=task.assigned_user, group=task.assigned_group)


@dataclass(frozen=True)
class HandOff:
    """The task's latest reassignment or delegation: who made it, which, when, with what note, and whom
    it was meant for when an out-of-office sent it on to a delegate instead."""

    by: str
    kind: str  # "reassigned" | "delegated"
    at: datetime
    note: str = ""
    note_by_sighted: bool = True  # its author could see redacted values (unknown: assume so, and mask)
    meant_for: str = ""  # the person asked, when someone away was replaced by their delegate
    away: tuple[str, ...] = ()  # who was skipped as away, in order


def last_handoff(task: ApprovalTask) -> HandOff | None:
    """One indexed read of the trail (its subject index): the page's confirmation that a hand-off took,
    which a live re-render cannot wipe as it did the response's own notice."""
    event = (
        AuditEvent.objects.filter(
            subject_type="task",
            subject_id=str(task.pk),
            action__in=(AuditAction.TASK_REASSIGNED, AuditAction.TASK_DELEGATED),
        )
        .order_by("-id")
        .only("actor_label", "action", "at", "details")
        .first()
    )
    if event is None:
        return None
    kind = "reassigned" if event.action == AuditAction.TASK_REASSIGNED else "delegated"
    details = event.details if isinstance(event.details, dict) else {}
    requested = details.get("requested")
    asked = (requested.get("user") if isinstance(requested, dict) else requested) or ""
    routed = details.get("to")
    to: dict[str, Any] = routed if isinstance(routed, dict) else {}
    away = tuple(str(name) for name in to.get("away") or ())
    return HandOff(
        by=event.actor_label,
        kind=kind,
        at=event.at,
        note=str(details.get("note") or ""),
        note_by_sighted=bool(details.get("author_saw_sensitive", True)),
        meant_for=str(asked) if away and asked and asked != to.get("user") else "",
        away=away,
    )


def assigned_to_q(user: permissions.Principal) -> Q:
    """Tasks asked of ``user``: assigned to them by name, or to one of their groups with no one named."""
    if not user.is_authenticated:
        return Q(pk__in=[])
    return Q(assigned_user_id=user.pk) | Q(assigned_user__isnull=True, assigned_group__in=user.groups.all())


def task_is_assigned_to(task: ApprovalTask, user: permissions.Principal) -> bool:
    if not user.is_authenticated:
        return False
    if task.assigned_user_id is not None:
        return bool(task.assigned_user_id == user.pk)
    return task.assigned_group_id is not None and user.groups.filter(pk=task.assigned_group_id).exists()


# --- who may be made assignee -------------------------------------------------------------------


def assignee_refusal(*, task: ApprovalTask, user: User) -> str | None:
    """Why ``user`` cannot be made assignee of ``task``, or None when they can."""
    # Nobody may decide a task whose node the graph no longer has: handed to someone, or mailed a reminder,
    # it would wait on them for a decision the service refuses.
    if (gone := node_gone_refusal(task)) is not None:
        return f"nobody may decide this task now: {gone.message}"
    name = user.get_username()
    if not user.is_active:
        return f"{name} is not an active user"
    if name.startswith(SERVICE_PREFIX):
        return f"{name} is a webhook's service principal, not a person"
    if not permissions.can_decide(user, task):
        if permissions.can(user, "approvals.decide_task") and permissions.graph_visible(user, task.graph):
            return f"{name} is not assigned to the gate {task.node!r} of {task.graph!r}"
        return f"{name} may not decide tasks of {task.graph!r}"
    decisions = list(task.decisions.all())
    if signature_standing(user, decisions) is not None:
        return f"{name} has already signed this task; another approver must decide (separation of duties)"
    if separation_required(task) and thread_started_by(task.thread, user):
        return f"{name} started this thread, so separation of duties keeps the task from them"
    # The approval they would give is the quorum's last, which needs a role they lack: handed to them, the
    # task could only be rejected or sent back with a proposal.
    if not permissions.final_approval_allowed(user, task, approvals_before=approvals_given(decisions)):
        return f"{name} cannot give this task's last approval: {permissions.FINAL_APPROVER_NEEDED}"
    return None


def assignees_able(*, task: ApprovalTask, among: QuerySet[User], limit: int = 1, scan: int = 200) -> list[User]:
    """Of ``among``, up to ``limit`` people who may be made ``task``'s assignee (``assignee_refusal``): who can
    finish it now. Hand-offs refuse a group by it and deadline reminders and escalations e-mail by it."""
    # Only those whose role may decide are tried one by one (each costs its permission reads): a group
    # nobody in which may decide (auditors) answers in one query, not one per member.
    # Two filters, two joins: in one (or after ``group.user_set``, whose next filter shares its join)
    # the role would be looked for in the group's permissions only; ``among`` must be a ``User.objects``
    # query for the same reason.
    candidates = among.filter(Q(is_superuser=True) | _DECIDER, is_active=True).distinct().order_by("pk")
    able: list[User] = []
    for user in candidates[:scan]:
        if assignee_refusal(task=task, user=user) is None:
            able.append(user)
            if len(able) >= limit:
                break
    return able


def group_refusal(*, task: ApprovalTask, group: Group) -> str | None:
    """Why ``task`` cannot be handed to ``group``, or None when it can: a member must be able to finish it.
    The one rule for a lead's reassignment and a deadline's escalation."""
    if assignees_able(task=task, among=User.objects.filter(groups=group)):
        return None
    return (
        f"no member of group {group.name!r} may decide this task now (the gate, a signature already given, "
        "separation of duties or the role its last approval needs keeps it from each)"
    )


# --- out-of-office ------------------------------------------------------------------------------


def away_active(user: User, *, now: datetime | None = None) -> Away | None:
    """``user``'s out-of-office if it covers ``now``."""
    away = Away.objects.select_related("delegate").filter(user_id=user.pk).first()
    return away if away is not None and away.is_active_at(now or timezone.now()) else None


def away_get(user: permissions.Principal) -> Away | None:
    """``user``'s out-of-office, current or scheduled."""
    if not user.is_authenticated:
        return None
    return Away.objects.select_related("delegate").filter(user_id=user.pk).first()


@dataclass
class Resolved:
    user: User | None
    group: Group | None
    away: list[str] = field(default_factory=list)  # who was skipped as away, in order
    fallback: str = ""  # why the chain ended without a person ("loop", "too long", "<refusal>")

    def details(self) -> dict[str, Any]:
        return {
            "user": self.user.get_username() if self.user else None,
            "group": self.group.name if self.group else None,
            **({"away": self.away} if self.away else {}),
            **({"fallback": self.fallback} if self.fallback else {}),
        }


def assignee_resolve(*, task: ApprovalTask, user: User | None, group: Group | None) -> Resolved:
    """Who gets ``task`` when it is meant for ``user`` (and/or ``group``): away people are replaced by
    their delegates, safely. Callers that assign (hand-offs here, escalation) resolve through this."""
    if user is None:
        return Resolved(user=None, group=group)
    now = timezone.now()
    skipped: list[str] = []
    seen = {user.pk}
    current = user
    for _ in range(MAX_AWAY_HOPS + 1):
        away = away_active(current, now=now)
        if away is None:
            return Resolved(user=current, group=group, away=skipped)
        skipped.append(current.get_username())
        delegate = away.delegate
        if delegate.pk in seen:
            return Resolved(user=None, group=group, away=skipped, fallback="the delegates form a loop")
        refusal = assignee_refusal(task=task, user=delegate)
        if refusal is not None:
            return Resolved(user=None, group=group, away=skipped, fallback=refusal)
        seen.add(delegate.pk)
        current = delegate
    return Resolved(user=None, group=group, away=skipped, fallback=f"more than {MAX_AWAY_HOPS} delegates in a row")


# --- services -----------------------------------------------------------------------------------


def _note_check(note: str, *, required: bool, max_length: int = NOTE_MAX) -> str:
    note = note.replace("\r\n", "\n").strip()
    if required and not note:
        raise InvalidInput("a note for the colleague is required", field="note")
    if len(note) > max_length:
        raise InvalidInput(f"the note is longer than {max_length} characters", field="note")
    if CONTROL_CHARACTERS.search(note):
        raise InvalidInput("the note: control characters are not allowed", field="note")
    try:
        value_storable_check(note, field="note")
    except NotStorable as exc:
        raise InvalidInput(exc.message, field=exc.field) from None
    return note


def _locked(actor: User, task: ApprovalTask) -> ApprovalTask:
    locked = permissions.task_get_for(actor, task.pk, lock=True)
    if not locked.is_open:
        raise Conflict(f"this task is {locked.status} and can no longer be handed off", field="task_id")
    return locked


def _route(task: ApprovalTask, resolved: Resolved) -> dict[str, Any]:
    before = task_assignees(task)
    task.assigned_user = resolved.user
    task.assigned_group = resolved.group
    task.assigned_at = timezone.now()
    task.save(update_fields=["assigned_user", "assigned_group", "assigned_at"])
    return {
        "user": before.user.get_username() if before.user else None,
        "group": before.group.name if before.group else None,
    }


@transaction.atomic
def task_reassign(
    *, actor: User, task: ApprovalTask, to_user: User | None = None, to_group: Group | None = None, note: str = ""
) -> ApprovalTask:
    """A lead moves ``task`` to a person and/or a group. A claim held by anyone else is released."""
    task = _locked(actor, task)
    permissions.require_reassign(actor, task)
    if to_user is None and to_group is None:
        raise InvalidInput("name a user or a group to reassign the task to", field="to_user")
    note = _note_check(note, required=False)
    if to_user is not None and (refusal := assignee_refusal(task=task, user=to_user)):
        raise Forbidden(refusal, field="to_user")
    if to_group is not None and (refusal := group_refusal(task=task, group=to_group)):
        raise Forbidden(refusal, field="to_group")
    resolved = assignee_resolve(task=task, user=to_user, group=to_group)
    claim = claim_for(task)
    released = None
    if claim is not None and claim.user_id != (resolved.user.pk if resolved.user else None):
        released = claim.user.get_username()
        claim_drop(task=task)
    before = _route(task, resolved)
    audit_task(
        task=task,
        actor=actor,
        action=AuditAction.TASK_REASSIGNED,
        details={
            "from": before,
            "to": resolved.details(),
            "requested": {
                "user": to_user.get_username() if to_user else None,
                "group": to_group.name if to_group else None,
            },
            "note": note,
            "author_saw_sensitive": may_see_sensitive(actor),  # how the note is shown (gateway.text_shown)
            **({"claim_released": released} if released else {}),
        },
    )
    return task


@transaction.atomic
def task_delegate(*, actor: User, task: ApprovalTask, to_user: User, note: str) -> ApprovalTask:
    """A reviewer hands the task they have claimed to a colleague, with a note; the claim goes with it."""
    task = _locked(actor, task)
    permissions.require_decide(actor, task)
    claim = claim_for(task)
    if claim is None:
        raise Conflict("claim the task before you delegate it", field="claim")
    if claim.user_id != actor.pk:
        raise Forbidden(
            f"{claim.user.get_username()} holds this task's claim; only they can delegate it", field="claim"
        )
    if to_user.pk == actor.pk:
        raise InvalidInput("delegate to a colleague, not to yourself", field="to_user")
    note = _note_check(note, required=True)
    if refusal := assignee_refusal(task=task, user=to_user):
        raise Forbidden(refusal, field="to_user")
    resolved = assignee_resolve(task=task, user=to_user, group=task.assigned_group)
    if resolved.user is not None and resolved.user.pk == actor.pk:
        # Their work comes to the one delegating it: the task would be handed back with the claim unmoved.
        raise InvalidInput(
            f"{to_user.get_username()} is away and their tasks come to you: delegate to someone else",
            field="to_user",
        )
    if resolved.user is not None:
        claim_put(task=task, user=resolved.user)
    else:
        claim_drop(task=task)
    before = _route(task, resolved)
    audit_task(
        task=task,
        actor=actor,
        action=AuditAction.TASK_DELEGATED,
        details={
            "from": before,
            "to": resolved.details(),
            "requested": to_user.get_username(),
            "note": note,
            "author_saw_sensitive": may_see_sensitive(actor),  # how the note is shown (gateway.text_shown)
        },
    )
    return task


@transaction.atomic
def away_set(
    *,
    actor: User,
    delegate: User,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    note: str = "",
) -> Away:
    """Mark ``actor`` away (from ``starts_at``, until ``ends_at``; both optional) with ``delegate``."""
    permissions.require(actor, "approvals.decide_task", "set yourself away", why="you review nothing")
    if delegate.pk == actor.pk:
        raise InvalidInput("choose a colleague as your delegate, not yourself", field="delegate")
    if not permissions.can(delegate, "approvals.decide_task"):
        raise InvalidInput(f"{delegate.get_username()} cannot decide tasks", field="delegate")
    for name, when in (("starts_at", starts_at), ("ends_at", ends_at)):
        if when is not None and timezone.is_naive(when):
            raise InvalidInput(f"{name}: give a time zone, e.g. Z or +02:00", field=name)
    if starts_at is not None and ends_at is not None and ends_at <= starts_at:
        raise InvalidInput("the end must come after the start", field="ends_at")
    if ends_at is not None and ends_at <= timezone.now():
        raise InvalidInput("the end is in the past", field="ends_at")
    note = _note_check(note, required=False, max_length=AWAY_NOTE_MAX)
    away, _ = Away.objects.update_or_create(
        user=actor, defaults={"delegate": delegate, "starts_at": starts_at, "ends_at": ends_at, "note": note}
    )
    audit_record(
        actor=actor,
        action=AuditAction.USER_AWAY_SET,
        subject_type="user",
        subject_id=actor.pk,
        details={
            "delegate": delegate.get_username(),
            "starts_at": starts_at.isoformat() if starts_at else None,
            "ends_at": ends_at.isoformat() if ends_at else None,
            "note": note,
        },
    )
    return away


@transaction.atomic
def away_clear(*, actor: User) -> None:
    deleted, _ = Away.objects.filter(user_id=actor.pk).delete()
    if deleted:
        audit_record(actor=actor, action=AuditAction.USER_AWAY_CLEARED, subject_type="user", subject_id=actor.pk)


def user_named(name: str, *, field: str) -> User:
    user = User.objects.filter(username=name).first()
    if user is None:
        raise InvalidInput(f"no user named {name!r}", field=field)
    return user


def group_named(name: str, *, field: str) -> Group:
    group = Group.objects.filter(name=name).first()
    if group is None:
        raise InvalidInput(f"no group named {name!r}", field=field)
    return group


COLLEAGUES_MAX = 100


def permission_holders_q(codename: str) -> Q:
    """Users whose role (a group's permissions) or own permissions grant ``approvals.<codename>``."""
    return Q(groups__permissions__codename=codename, groups__permissions__content_type__app_label="approvals") | Q(
        user_permissions__codename=codename, user_permissions__content_type__app_label="approvals"
    )


_DECIDER = permission_holders_q("decide_task")  # users whose role grants deciding


def colleagues_for(user: permissions.Principal, task: ApprovalTask | None = None) -> list[User]:
    """Reviewers ``user`` could hand work to (for the console's pickers): with ``task``, only those who
    may be made its assignee. Bounded: a larger team types the name."""
    reviewers = (
        User.objects.filter(is_active=True)
        .filter(_DECIDER)
        .exclude(pk=user.pk or 0)
        .exclude(username__startswith=SERVICE_PREFIX)
        .distinct()
        .order_by("username")[:COLLEAGUES_MAX]
    )
    if task is None:
        return list(reviewers)
    return [u for u in reviewers if assignee_refusal(task=task, user=u) is None]


def groups_for_reassign(task: ApprovalTask) -> list[Group]:
    """Groups ``task`` may be reassigned to (for the console's picker): those with a member who may decide
    it, the test ``task_reassign`` refuses a group by, so the picker offers nothing it would refuse."""
    groups = Group.objects.exclude(name="service").order_by("name")[:COLLEAGUES_MAX]
    return [g for g in groups if group_refusal(task=task, group=g) is None]
