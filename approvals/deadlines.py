"""Deadlines: how due a task is, and the sweep (run by beat) that reminds, escalates and times tasks out.

The policy (when a gate is due, whom to escalate to, what happens on timeout) is
``approvals.gate_policy.gate_deadline``; a task stores the times it produced when it
opened (``due_at``, ``remind_at``). The sweep takes three steps, each at most once per
task however many sweepers run (beat on two machines, a manual ``deadlines_sweep``):

1. **remind** (``remind_at`` passed, not yet due): e-mail those who may decide the task now
   (``_recipients``), queue the ``task.reminded`` outbound webhook; ``reminded_at`` is set.
2. **escalate** (``due_at`` passed): reassign to the gate's ``escalate_to`` group (or role) if
   a lead could (``assignment.group_refusal``: a member must be able to finish the task), else
   keep the assignment and say why; e-mail those who may decide it, queue ``task.escalated``;
   ``escalated_at`` and ``escalation_reason`` say since when and why (shown in the inbox, task
   page and API).
3. **time out** (with escalation, if the gate has ``on_timeout``): decide the task through
   ``services.task_decide`` as the system principal ``system:deadlines`` with the configured
   reason, so the decision is signed, audited and resumes the thread like any other.
   An approval only where langgraph.json allowed it (``allow_auto_approve``); checked at
   start-up and again here.

Exactly once: each step locks its row with ``SELECT ... FOR UPDATE SKIP LOCKED`` and
re-checks the step's condition under the lock, in the transaction that records it. A
second sweeper skips a row the first holds and finds the step done once it commits.
Every step writes its audit event in that transaction; e-mail and live updates go
after commit.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from approvals import permissions
from approvals.assignment import assignees_able, group_refusal, permission_holders_q
from approvals.audit import audit_record, audit_task
from approvals.errors import DomainError
from approvals.gate_policy import gate_deadline
from approvals.models import ApprovalTask, AuditAction, GraphAssignment, TaskStatus
from approvals.payloads import DecisionRequest
from approvals.services import Signer, task_decide
from runtime.deadlines import Deadline, TimeoutOutcome, duration_human

log = logging.getLogger(__name__)

SYSTEM_USERNAME = "system:deadlines"  # decides timed-out gates; no password, no token, cannot sign in
SYSTEM_LABEL = "deadlines"  # the audit actor of reminders and escalations (no principal acts)
SERVICE_ROLE = "service"
SWEEP_LIMIT = 200  # tasks per step per sweep; the next beat tick takes the rest
MAX_RECIPIENTS = 50
# "Due soon": within this long, or past the gate's reminder time.
SOON_SECONDS = 3600


# --- how due a task is (every surface renders this) -------------------------------------------


@dataclass(frozen=True)
class DueState:
    due_at: datetime
    seconds: int  # until due; negative once overdue
    overdue: bool
    soon: bool
    text: str  # "due in 3 h", "overdue 20 min"


def due_state(
    due_at: datetime | None, *, remind_at: datetime | None = None, now: datetime | None = None
) -> DueState | None:
    if due_at is None:
        return None
    now = now or timezone.now()
    delta = (due_at - now).total_seconds()
    overdue = delta <= 0  # on the instant, not a second early: console.js decides the same way
    seconds = math.floor(delta)
    soon = not overdue and (delta <= SOON_SECONDS or (remind_at is not None and remind_at <= now))
    text = f"overdue {duration_human(math.floor(-delta))}" if overdue else f"due in {duration_human(math.ceil(delta))}"
    return DueState(due_at=due_at, seconds=seconds, overdue=overdue, soon=soon, text=text)


def overdue_q(*, now: datetime) -> Q:
    """Open tasks at or past their due time: the one definition the inbox filter and the dashboard count with."""
    return Q(status=TaskStatus.PENDING, due_at__lte=now)


def escalated_q() -> Q:
    """Open tasks a deadline escalated (``escalated_at`` says since when, ``escalation_reason`` why)."""
    return Q(status=TaskStatus.PENDING, escalated_at__isnull=False)


def tasks_due_filter(qs: QuerySet[ApprovalTask], due: str, *, now: datetime | None = None) -> QuerySet[ApprovalTask]:
    """``due``: "overdue" (past due, still open), "escalated", or "soon" (see ``due_state``)."""
    now = now or timezone.now()
    if due == "overdue":
        return qs.filter(overdue_q(now=now))
    if due == "escalated":
        return qs.filter(escalated_q())
    if due == "soon":
        return qs.filter(status=TaskStatus.PENDING, due_at__gt=now).filter(
            Q(due_at__lte=now + timedelta(seconds=SOON_SECONDS)) | Q(remind_at__lte=now)
        )
    return qs


DUE_FILTERS = ("overdue", "escalated", "soon")


# --- the sweep ---------------------------------------------------------------------------------


@dataclass
class SweepResult:
    reminded: int = 0
    escalated: int = 0
    timed_out: int = 0


def deadlines_sweep(*, now: datetime | None = None, graphs: Iterable[str] | None = None) -> SweepResult:
    """Take every step that is due (reminders, then escalations); ``graphs`` narrows the sweep."""
    now = now or timezone.now()
    result = SweepResult()
    for task_id in deadlines_reminders_due(now=now, graphs=graphs):
        try:
            result.reminded += task_remind(task_id=task_id, now=now)
        except Exception:  # one task's failure must not stop the others' steps (logged)
            log.exception("deadline reminder of task %s failed", task_id)
    for task_id in deadlines_escalations_due(now=now, graphs=graphs):
        try:
            escalated, timed_out = task_escalate(task_id=task_id, now=now)
        except Exception:  # as above; the step rolled back and is retried next sweep
            log.exception("deadline escalation of task %s failed", task_id)
            continue
        result.escalated += escalated
        result.timed_out += timed_out
    return result


def _scoped(qs: QuerySet[ApprovalTask], graphs: Iterable[str] | None) -> QuerySet[ApprovalTask]:
    return qs if graphs is None else qs.filter(graph__in=list(graphs))


def deadlines_reminders_due(*, now: datetime, graphs: Iterable[str] | None = None) -> list[Any]:
    qs = ApprovalTask.objects.filter(
        status=TaskStatus.PENDING, remind_at__lte=now, reminded_at__isnull=True, due_at__gt=now
    )
    return list(_scoped(qs, graphs).order_by("remind_at").values_list("pk", flat=True)[:SWEEP_LIMIT])


def deadlines_escalations_due(*, now: datetime, graphs: Iterable[str] | None = None) -> list[Any]:
    qs = ApprovalTask.objects.filter(status=TaskStatus.PENDING, due_at__lte=now, escalated_at__isnull=True)
    return list(_scoped(qs, graphs).order_by("due_at").values_list("pk", flat=True)[:SWEEP_LIMIT])


def _locked(task_id: Any, **condition: Any) -> ApprovalTask | None:
    """The task if its step is still to take and nobody holds it or its thread (skip, never wait).

    Task and thread are locked in one statement, as ``task_decide`` locks them: a sweeper that
    held the task while waiting for a thread a run holds (and the run waiting for the task) could
    deadlock; skipping leaves the step to the next sweep.
    """
    return (
        ApprovalTask.objects.select_for_update(skip_locked=True, of=("self", "thread"))
        .select_related("thread")
        .filter(pk=task_id, status=TaskStatus.PENDING, **condition)
        .first()
    )


def _claim(task: ApprovalTask, *, values: dict[str, Any], **condition: Any) -> bool:
    """Take the step with a conditional UPDATE: the database says who won (the row lock above
    already makes it certain on PostgreSQL; on SQLite, which has no row locks, this alone decides)."""
    return ApprovalTask.objects.filter(pk=task.pk, status=TaskStatus.PENDING, **condition).update(**values) == 1


def task_remind(*, task_id: Any, now: datetime) -> bool:
    """Send the task's one reminder; False if it is not due, already sent, or another sweeper has it."""
    with transaction.atomic():
        task = _locked(task_id, remind_at__lte=now, reminded_at__isnull=True, due_at__gt=now)
        if task is None:
            return False
        if not _claim(task, reminded_at__isnull=True, values={"reminded_at": now}):
            return False
        task.reminded_at = now
        recipients = _recipients(task)
        state = due_state(task.due_at, now=now)
        audit_task(
            task=task,
            actor=None,
            actor_label=SYSTEM_LABEL,
            action=AuditAction.DEADLINE_REMINDED,
            details={
                "node": task.node,
                "due_at": task.due_at.isoformat() if task.due_at else None,
                "notified": [u.get_username() for u in recipients],
            },
        )
        _mail_on_commit(
            recipients,
            subject=f"[Gatehouse] {state.text if state else 'due'}: {task.title or task.node}",
            body=_mail_body(task, f"This task is {state.text if state else 'due'} and still waits for a decision."),
        )
    return True


def task_escalate(*, task_id: Any, now: datetime) -> tuple[int, int]:
    """Escalate an overdue task once (and apply its timeout outcome); (escalated, timed out) as 0/1."""
    with transaction.atomic():
        task = _locked(task_id, due_at__lte=now, escalated_at__isnull=True)
        if task is None or task.due_at is None:
            return 0, 0
        deadline = gate_deadline(graph=task.graph, node=task.node, payload=task.payload, task_kind=task.kind)
        group = _escalation_group(deadline)
        # The rule a lead's reassignment is refused by: a group none of whose members can finish the task (a
        # quorum's last approval needs a role they lack, they all signed it) would only hold it.
        refused = group_refusal(task=task, group=group) if group is not None else None
        overdue = duration_human((now - task.due_at).total_seconds())
        why = [f"not decided by its deadline ({task.due_at:%Y-%m-%d %H:%M} UTC, overdue {overdue})"]
        if group is not None and refused is None:
            why.append(f"reassigned to {group.name}")
        elif group is not None:
            why.append(f"not reassigned to {group.name}: {refused}")
        elif deadline is not None and deadline.escalate_to:
            why.append(f"escalation group {deadline.escalate_to!r} does not exist: not reassigned")
        else:  # it said only "escalated", which read as a hand-off that never happened
            why.append("not reassigned (the gate names no escalate_to)")
        before = {
            "user": _username(task.assigned_user),
            "group": task.assigned_group.name if task.assigned_group else None,
        }
        values: dict[str, Any] = {"escalated_at": now}
        if group is not None and refused is None:
            values.update(assigned_group=group, assigned_user=None, assigned_at=now, escalated_to=group.name)
        for name, value in values.items():  # whom it waits for from now: they are told
            setattr(task, name, value)
        recipients = _recipients(task)
        if recipients:
            why.append(f"e-mailed {len(recipients)} {'person' if len(recipients) == 1 else 'people'} who may decide it")
        else:
            why.append("nobody may decide it now: no one e-mailed")
        values["escalation_reason"] = task.escalation_reason = "; ".join(why)[:500]
        if not _claim(task, escalated_at__isnull=True, values=values):
            return 0, 0
        on_timeout = deadline.on_timeout if deadline is not None else None
        audit_task(
            task=task,
            actor=None,
            actor_label=SYSTEM_LABEL,
            action=AuditAction.DEADLINE_ESCALATED,
            details={
                "node": task.node,
                "due_at": task.due_at.isoformat(),
                "reason": task.escalation_reason,
                "escalated_to": task.escalated_to or None,
                **({"escalation_refused": {"group": group.name, "reason": refused}} if group and refused else {}),
                "assigned_before": before,
                "notified": [u.get_username() for u in recipients],
                "on_timeout": on_timeout.outcome if on_timeout else None,
            },
        )
        _mail_on_commit(
            recipients,
            subject=f"[Gatehouse] escalated, overdue {overdue}: {task.title or task.node}",
            body=_mail_body(task, f"This task is escalated: {task.escalation_reason}."),
        )
        timed_out = _timeout_apply(task, deadline, on_timeout) if on_timeout is not None and deadline else False
    return 1, int(timed_out)


def _timeout_apply(task: ApprovalTask, deadline: Deadline, on_timeout: TimeoutOutcome) -> bool:
    """Decide the task as the system, through the one decision path; a refusal is recorded, not raised."""
    details: dict[str, Any] = {"outcome": on_timeout.outcome, "reason": on_timeout.reason}
    if on_timeout.outcome != "reject" and not deadline.allow_auto_approve:
        # Start-up refuses such a policy; this guards a policy object built any other way.
        _timeout_refused(task, details, "an automatic approval needs allow_auto_approve on the gate")
        return False
    actor = _system_principal()
    request = DecisionRequest(
        outcome=on_timeout.outcome,
        reason=f"[system: deadline passed] {on_timeout.reason}",
        checkpoint_id=task.checkpoint_id,
    )
    try:
        decision = task_decide(
            actor=actor, task_id=task.pk, request=request, signer=Signer(authenticated_at=timezone.now())
        )
    except DomainError as exc:
        _timeout_refused(task, details, exc.message)
        return False
    audit_task(
        task=task,
        actor=actor,
        action=AuditAction.DEADLINE_TIMED_OUT,
        details={**details, "decision": str(decision.id)},
    )
    return True


def _timeout_refused(task: ApprovalTask, details: dict[str, Any], message: str) -> None:
    audit_task(
        task=task,
        actor=None,
        actor_label=SYSTEM_LABEL,
        action=AuditAction.DEADLINE_TIMEOUT_REFUSED,
        details={**details, "message": message},
    )


def _escalation_group(deadline: Deadline | None) -> Group | None:
    if deadline is None or not deadline.escalate_to:
        return None
    return Group.objects.filter(name=deadline.escalate_to).first()


def _username(user: User | None) -> str | None:
    return user.get_username() if user is not None else None


def _system_principal() -> User:
    """The principal whose decisions are timeouts: role "service", every graph, unusable password."""
    user, created = User.objects.get_or_create(username=SYSTEM_USERNAME, defaults={"is_active": True})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
        user.groups.add(Group.objects.get_or_create(name=SERVICE_ROLE)[0])
        GraphAssignment.objects.get_or_create(user=user, graph=permissions.ALL_GRAPHS, gate="")
        audit_record(
            actor=None,
            actor_label=SYSTEM_LABEL,
            action=AuditAction.USER_CREATED,
            subject_type="user",
            subject_id=user.pk,
            details={"username": SYSTEM_USERNAME, "role": SERVICE_ROLE, "graphs": [permissions.ALL_GRAPHS]},
        )
    return user


def escalation_group_warnings(entries: dict[str, Any]) -> list[str]:
    """One line per gate whose configured ``escalate_to`` names no group: said as the registry loads
    (``graphs_check``, a worker's start). A misspelt group passed start-up and showed only when a task was
    overdue ("group … does not exist: not reassigned"); groups are data, made after a deploy too, so a warning,
    not a refusal."""
    wanted = {
        (graph, gate, deadline.escalate_to)
        for graph, entry in entries.items()
        for gate, deadline in entry.deadlines.items()
        if deadline.escalate_to
    }
    existing = set(Group.objects.filter(name__in={name for _, _, name in wanted}).values_list("name", flat=True))
    return [
        f"graph {graph!r}, gate {gate!r}: escalate_to {name!r} names no group, so its overdue tasks would not be "
        "reassigned (create the group, or correct langgraph.json; docs/deadlines.md)"
        for graph, gate, name in sorted(wanted)
        if name not in existing
    ]


# --- notifications -----------------------------------------------------------------------------


def _recipients(task: ApprovalTask) -> list[User]:
    """Whom a step e-mails: those who may decide the task now (``assignment.assignees_able``: the decide
    permission, the graph and gate, no signature of theirs standing, separation of duties, the role its next
    approval needs) among the people it is asked of — its assigned person, else its group's members, else
    those assigned to its gate. When none of the asked may, those assigned to its gate who may: a task is
    never reminded only to people who cannot finish it. When none of those may either, those whose role sees
    every graph without an assignment (admins). Only people with an e-mail address (at most 50)."""
    mailable = User.objects.exclude(email="")
    assigned = GraphAssignment.objects.filter(graph__in=[task.graph, permissions.ALL_GRAPHS], gate__in=["", task.node])
    tiers = [mailable.filter(pk__in=assigned.values("user_id")), _every_graph_by_role(mailable)]
    if task.assigned_user_id is not None:
        tiers.insert(0, mailable.filter(pk=task.assigned_user_id))
    elif task.assigned_group_id is not None:
        tiers.insert(0, mailable.filter(groups=task.assigned_group_id))
    for among in tiers:
        if able := assignees_able(task=task, among=among, limit=MAX_RECIPIENTS):
            return able
    return []


def _every_graph_by_role(users: QuerySet[User]) -> QuerySet[User]:
    """Of ``users``, those who see every graph by their role (``permissions.graphs_visible``), not by an
    assignment: a team whose only decider is its admin had reminders and escalations e-mailed to nobody."""
    every = User.objects.filter(Q(is_superuser=True) | permission_holders_q("view_all_graphs"))
    return users.filter(pk__in=every.values("pk"))


def _mail_body(task: ApprovalTask, headline: str) -> str:
    # Title, graph and gate only: the payload and state never leave in an e-mail (redaction).
    link = f"{settings.GATEHOUSE_PUBLIC_URL.rstrip('/')}/tasks/{task.pk}/"
    due = f"{task.due_at:%Y-%m-%d %H:%M} UTC" if task.due_at else "—"
    return (
        f"{headline}\n\nTask: {task.title or task.node}\nGraph: {task.graph}\nGate: {task.node}\nDue: {due}\n\n{link}\n"
    )


def _mail_on_commit(recipients: list[User], *, subject: str, body: str) -> None:
    addresses = sorted({u.email for u in recipients})
    if addresses:
        transaction.on_commit(partial(_mail_send, subject[:200], body, addresses), robust=True)


def _mail_send(subject: str, body: str, addresses: list[str]) -> None:
    # Bcc: recipients do not learn each other's addresses. A failure is logged: the step is recorded.
    try:
        EmailMessage(subject=subject, body=body, bcc=addresses).send()
    except Exception:
        log.exception("deadline e-mail %r not sent", subject)
