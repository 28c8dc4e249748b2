"""Deadlines: parsing, start-up validation, the sweep's steps (each exactly once, also under a race),
the timeout outcome through the real decision path, and no automatic approval a gate did not allow.

The test graph ``deadline_review`` (tests/graphs/langgraph.json) carries the policies; tests sweep only
that graph, or step one task by id, so they never touch another test's tasks.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.utils import timezone

from approvals import deadlines
from approvals.assignment import task_reassign
from approvals.deadlines import deadlines_sweep, due_state, task_escalate, task_remind
from approvals.errors import Forbidden
from approvals.gate_policy import gate_deadline
from approvals.models import (
    ApprovalTask,
    AuditAction,
    AuditEvent,
    Decision,
    GraphAssignment,
    OutboundDelivery,
    WebhookSubscription,
)
from approvals.payloads import GATE_MARKER
from runtime.deadlines import (
    Deadline,
    DeadlineError,
    TimeoutOutcome,
    deadline_parse,
    duration_human,
    duration_parse,
    payload_deadline,
)
from runtime.registry import GraphRegistryError, graphs_read
from tests.conftest import ROOT, loan_input, pending_tasks, scaled, thread_settled, thread_start
from tests.console.conftest import console_client
from tests.factories import decision_make, loan_gate, task_make

GRAPH = "deadline_review"
LEADS = "deadline-leads"


def _events(task: ApprovalTask, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(subject_type="task", subject_id=str(task.pk), action=action))


def _gate(**keys):
    return {"type": GATE_MARKER, "title": "Pay", "proposed_action": {"name": "pay", "args": {}}, **keys}


# --- durations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("30m", 1800), ("4h", 14400), ("2d", 172800), (45, 45), (" 5 m ", 300)]
)
def test_it_parses_durations(text, seconds):
    assert duration_parse(text) == seconds


@pytest.mark.parametrize("bad", ["4x", "", "h", "1.5h", "-3m", 0, -1, True, None, "400d", [1]])
def test_it_refuses_a_bad_duration_naming_the_field(bad):
    with pytest.raises(DeadlineError) as err:
        duration_parse(bad, field="gatehouse.deadlines.g.gate.due")
    assert err.value.field == "gatehouse.deadlines.g.gate.due"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45 s"), (1200, "20 min"), (3 * 3600, "3 h"), (3 * 3600 + 1800, "3 h 30 min"), (86400, "1 d"),
     (2 * 86400 + 4 * 3600, "2 d 4 h"), (-1200, "20 min")],
)  # fmt: skip
def test_durations_read_as_people_say_them(seconds, text):
    assert duration_human(seconds) == text


def test_the_due_state_says_due_in_or_overdue():
    now = timezone.now()
    assert due_state(now + timedelta(hours=3, seconds=5), now=now).text == "due in 3 h"
    late = due_state(now - timedelta(minutes=20), now=now)
    assert late.text == "overdue 20 min" and late.overdue and late.seconds == -1200
    assert due_state(now + timedelta(minutes=30), now=now).soon
    assert not due_state(now + timedelta(hours=5), now=now).soon
    assert due_state(now + timedelta(hours=5), now=now, remind_at=now - timedelta(seconds=1)).soon
    assert due_state(None) is None


# --- policy validation (start-up) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"due": "4h", "remind_befor": "1h"}, "x.remind_befor"),
        ({"remind_before": "1h"}, "x.due"),
        ({"due": "4h", "remind_before": "4h"}, "x.remind_before"),
        ({"due": "4h", "escalate_to": ""}, "x.escalate_to"),
        ({"due": "4h", "on_timeout": {"outcome": "cancel", "reason": "r"}}, "x.on_timeout.outcome"),
        ({"due": "4h", "on_timeout": {"outcome": "reject"}}, "x.on_timeout.reason"),
        ({"due": "4h", "on_timeout": {"outcome": "approve", "reason": "r"}}, "x.on_timeout.outcome"),
        ({"due": "4h", "allow_auto_approve": "yes"}, "x.allow_auto_approve"),
        ("4h", "x"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(policy, field):
    with pytest.raises(DeadlineError) as err:
        deadline_parse(policy, field="x")
    assert err.value.field == field


def test_an_automatic_approval_needs_the_gate_to_allow_it_explicitly():
    policy = {"due": "4h", "on_timeout": {"outcome": "approve", "reason": "low risk"}, "allow_auto_approve": True}
    assert deadline_parse(policy, field="x").on_timeout == TimeoutOutcome("approve", "low risk")


def _registry(tmp_path: Path, deadlines_section: object) -> Path:
    path = tmp_path / "langgraph.json"
    graph = ROOT / "tests" / "graphs" / "shapes.py"
    path.write_text(
        json.dumps({"graphs": {"g": f"{graph}:parallel_review"}, "gatehouse": {"deadlines": deadlines_section}})
    )
    return path


def test_start_up_refuses_an_auto_approval_the_gate_does_not_allow(tmp_path):
    path = _registry(tmp_path, {"g": {"legal": {"due": "1h", "on_timeout": {"outcome": "approve", "reason": "r"}}}})
    with pytest.raises(GraphRegistryError, match=r"gatehouse\.deadlines\.g\.legal\.on_timeout\.outcome.*allow_auto"):
        graphs_read(path)


def test_start_up_refuses_a_bad_duration_and_an_unknown_graph(tmp_path):
    with pytest.raises(GraphRegistryError, match=r"gatehouse\.deadlines\.g\.legal\.due: '4 hours' is not a duration"):
        graphs_read(_registry(tmp_path, {"g": {"legal": {"due": "4 hours"}}}))
    with pytest.raises(GraphRegistryError, match=r"gatehouse\.deadlines\.nope: no graph of that name"):
        graphs_read(_registry(tmp_path, {"nope": {"legal": {"due": "4h"}}}))


def test_start_up_reads_a_good_policy(tmp_path):
    entry = graphs_read(_registry(tmp_path, {"g": {"legal": {"due": "4h", "remind_before": "30m"}}}))["g"]
    assert entry.deadlines["legal"] == Deadline(due_seconds=14400, remind_before_seconds=1800)


def test_a_payload_cannot_grant_itself_an_automatic_approval():
    asked = _gate(due="1m", on_timeout={"outcome": "approve", "reason": "me"}, allow_auto_approve=True)
    policy = payload_deadline(asked)
    assert policy == Deadline(due_seconds=60)  # the approval and the "allow" are dropped
    # ...nor borrow the file's allowance: the gate's own policy has no timeout, the payload's approval stays out
    merged = gate_deadline(graph=GRAPH, node="compliance_review", payload=asked)
    assert merged.on_timeout is None and merged.due_seconds == 4 * 3600


def test_the_file_wins_and_the_payload_fills_the_rest():
    payload = _gate(due="1m", escalate_to="payload-group", remind_before="30s")
    merged = gate_deadline(graph=GRAPH, node="compliance_review", payload=payload)
    assert (merged.due_seconds, merged.remind_before_seconds, merged.escalate_to) == (4 * 3600, 1800, LEADS)
    assert gate_deadline(graph=GRAPH, node="other_gate", payload=payload).due_seconds == 2 * 86400  # "*"
    unconfigured = gate_deadline(graph="loan_approval", node="human_review", payload=payload)
    assert (unconfigured.due_seconds, unconfigured.escalate_to) == (60, "payload-group")
    legacy = gate_deadline(graph="loan_approval", node="human_review", payload=_gate(sla_seconds=86400))
    assert legacy.due_seconds == 86400  # sla_seconds keeps working


# --- the sweep's steps (in a transaction each) ---------------------------------------------------


def _reviewer_with_mail(graph: str = GRAPH, *, group: Group | None = None) -> User:
    user = User.objects.create_user(f"dl-{uuid.uuid4().hex[:6]}", email=f"{uuid.uuid4().hex[:6]}@example.com")
    user.groups.add(Group.objects.get(name="reviewer"))
    if group is not None:
        user.groups.add(group)
    GraphAssignment.objects.create(user=user, graph=graph)
    return user


def _subscription() -> WebhookSubscription:
    return WebhookSubscription.objects.create(
        url="http://127.0.0.1:9/hook", graph=GRAPH, event_types=["task.reminded", "task.escalated"], secret="s"
    )


@pytest.mark.django_db
def test_a_reminder_is_sent_once_before_the_deadline(personas, mailoutbox, django_capture_on_commit_callbacks):
    user = _reviewer_with_mail()
    subscription = _subscription()
    now = timezone.now()
    task = task_make(graph=GRAPH, node="compliance_review", due_at=now + timedelta(minutes=20))
    ApprovalTask.objects.filter(pk=task.pk).update(remind_at=now - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert deadlines_sweep(graphs=[GRAPH]).reminded >= 1
        assert task_remind(task_id=task.pk, now=timezone.now()) is False  # done: never twice
        assert deadlines_sweep(graphs=[GRAPH]).reminded == 0
    task.refresh_from_db()
    assert task.reminded_at is not None and task.escalated_at is None
    [event] = _events(task, AuditAction.DEADLINE_REMINDED)
    assert user.username in event.details["notified"] and event.actor_label == "deadlines"
    [mail] = [m for m in mailoutbox if user.email in m.bcc]
    assert "due in 20 min" in mail.subject or "due in 19 min" in mail.subject
    assert f"/tasks/{task.pk}/" in mail.body and "risk_score" not in mail.body  # no payload in e-mail
    assert OutboundDelivery.objects.filter(subscription=subscription, event_type="task.reminded").count() == 1


@pytest.mark.django_db
def test_an_overdue_task_is_escalated_once_to_its_group(personas, mailoutbox, django_capture_on_commit_callbacks):
    leads, _ = Group.objects.get_or_create(name=LEADS)
    lead = _reviewer_with_mail(group=leads)
    blind = _reviewer_with_mail("loan_approval", group=leads)  # in the group, but may not see this graph
    subscription = _subscription()
    task = task_make(graph=GRAPH, node="compliance_review", due_at=timezone.now() - timedelta(minutes=20))
    ApprovalTask.objects.filter(pk=task.pk).update(assigned_user=personas["reviewer"].user)
    with django_capture_on_commit_callbacks(execute=True):
        assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
        assert task_escalate(task_id=task.pk, now=timezone.now()) == (0, 0)
        deadlines_sweep(graphs=[GRAPH])
    task.refresh_from_db()
    assert task.assigned_group == leads and task.assigned_user is None and task.assigned_at == task.escalated_at
    assert (
        task.escalation_reason.startswith("not decided by its deadline") and "overdue 20 min" in task.escalation_reason
    )
    assert "reassigned to deadline-leads" in task.escalation_reason
    [event] = _events(task, AuditAction.DEADLINE_ESCALATED)
    assert event.details["escalated_to"] == LEADS
    assert event.details["assigned_before"] == {"user": personas["reviewer"].username, "group": None}
    assert event.details["notified"] == [lead.username]  # not ``blind``: mail goes only where the task may be seen
    assert [m for m in mailoutbox if lead.email in m.bcc and "escalated" in m.subject]
    assert not [m for m in mailoutbox if blind.email in m.bcc]
    assert OutboundDelivery.objects.filter(subscription=subscription, event_type="task.escalated").count() == 1
    assert task.status == "pending" and not task.decisions.exists()  # this gate has no timeout outcome


@pytest.mark.django_db
def test_an_escalation_without_a_group_says_it_reassigned_nothing_and_whom_it_told(personas):
    """A gate without escalate_to: the task is flagged and whom it waits for are e-mailed, nothing more; the
    reason said only "not decided by its deadline", and the inbox read "escalated" as a hand-off."""
    reader = _reviewer_with_mail("loan_approval")
    task = task_make(due_at=timezone.now() - timedelta(minutes=7))  # loan_approval's gate: no escalate_to
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    task.refresh_from_db()
    assert task.assigned_group is None and task.assigned_user is None
    assert "not reassigned (the gate names no escalate_to)" in task.escalation_reason
    [event] = _events(task, AuditAction.DEADLINE_ESCALATED)
    told = len(event.details["notified"])
    assert reader.username in event.details["notified"]
    assert f"e-mailed {told} {'person' if told == 1 else 'people'} who may decide it" in task.escalation_reason


@pytest.mark.django_db
def test_an_escalation_to_a_group_that_does_not_exist_is_recorded_not_invented(personas, settings):
    Group.objects.filter(name=LEADS).delete()
    task = task_make(graph=GRAPH, node="compliance_review", due_at=timezone.now() - timedelta(seconds=5))
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    task.refresh_from_db()
    assert task.assigned_group is None and "'deadline-leads' does not exist" in task.escalation_reason
    assert not Group.objects.filter(name=LEADS).exists()


QUORUM_GRAPH = "loan_approval"  # the deadline graph's gate the tests may decide has a timeout; this one has none


def _person_with_mail(role: str, *, group: Group | None = None) -> User:
    user = _reviewer_with_mail(QUORUM_GRAPH, group=group)
    user.groups.set([Group.objects.get(name=role), *([group] if group is not None else [])])
    return user


def _quorum_half_approved(**task: object) -> tuple[ApprovalTask, User]:
    """A four-eyes task (escalated to the leads) whose first approval a reviewer has given: the one missing is
    the last, which needs the approver role."""
    made = task_make(graph=QUORUM_GRAPH, payload={**loan_gate(required_approvals=2), "escalate_to": LEADS}, **task)
    signer = _reviewer_with_mail(QUORUM_GRAPH)
    decision_make(made, signer)
    assert made.status == "pending" and made.required_approvals == 2
    return made, signer


@pytest.mark.django_db
def test_an_escalation_keeps_a_task_from_a_group_that_could_not_finish_it(personas, mailoutbox):
    """An outside QA's find: a quorum task with one approval was escalated to the leads, none of whom may give
    its last approval (a lead's reassignment to them is refused), and only they were e-mailed."""
    leads, _ = Group.objects.get_or_create(name=LEADS)
    lead = _person_with_mail("lead", group=leads)
    approver = _person_with_mail("approver")
    task, signer = _quorum_half_approved()
    ApprovalTask.objects.filter(pk=task.pk).update(due_at=timezone.now() - timedelta(minutes=5))
    with pytest.raises(Forbidden) as by_hand:  # the rule the sweep must apply too
        task_reassign(actor=personas["admin"].user, task=task, to_group=leads)
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    task.refresh_from_db()
    assert task.assigned_group is None and task.assigned_user is None and task.escalated_at is not None
    assert f"not reassigned to {LEADS}: {by_hand.value.message}" in task.escalation_reason
    [event] = _events(task, AuditAction.DEADLINE_ESCALATED)
    assert event.details["escalated_to"] is None
    assert event.details["escalation_refused"] == {"group": LEADS, "reason": by_hand.value.message}
    notified = event.details["notified"]
    assert approver.username in notified  # who can give the missing approval is told
    assert lead.username not in notified and signer.username not in notified
    told = len(notified)
    assert f"e-mailed {told} {'person' if told == 1 else 'people'} who may decide it" in task.escalation_reason


@pytest.mark.django_db
def test_a_refused_escalation_of_a_task_with_a_group_does_not_read_as_a_move_to_it(personas, mailoutbox):
    """The inbox badge read "escalated → <the task's group>": a task already with the approvers, whose
    escalation to the leads was refused, read "escalated → approvers", a hand-off the escalation never made.
    The badge and the API name the group the escalation moved the task to, whatever happens after."""
    leads, _ = Group.objects.get_or_create(name=LEADS)
    _person_with_mail("lead", group=leads)
    approvers, _ = Group.objects.get_or_create(name=f"deadline-approvers-{uuid.uuid4().hex[:6]}")
    _person_with_mail("approver", group=approvers)
    task, _ = _quorum_half_approved()
    ApprovalTask.objects.filter(pk=task.pk).update(
        assigned_group=approvers, due_at=timezone.now() - timedelta(minutes=5)
    )
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    task.refresh_from_db()
    assert task.assigned_group == approvers and task.escalated_to == ""
    client = console_client(personas["admin"])
    page = client.get("/", {"due": "escalated", "graph": QUORUM_GRAPH}).content.decode()
    row = page[page.index(str(task.pk)) :][:4000]
    assert "escalated, not reassigned" in row and f"escalated → {approvers.name}" not in row
    body = personas["admin"].client.get(f"/api/tasks/{task.pk}").json()
    assert body["escalated_to"] is None and body["assigned_group"] == approvers.name


@pytest.mark.django_db
def test_an_escalation_names_the_group_it_moved_the_task_to_after_a_later_reassign(personas, mailoutbox):
    leads, _ = Group.objects.get_or_create(name=LEADS)
    _reviewer_with_mail(group=leads)
    task = task_make(graph=GRAPH, node="compliance_review", due_at=timezone.now() - timedelta(minutes=5))
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    task.refresh_from_db()
    assert task.assigned_group == leads and task.escalated_to == LEADS
    [event] = _events(task, AuditAction.DEADLINE_ESCALATED)
    assert event.details["escalated_to"] == LEADS
    others, _ = Group.objects.get_or_create(name=f"deadline-others-{uuid.uuid4().hex[:6]}")
    _reviewer_with_mail(group=others)
    task_reassign(actor=personas["admin"].user, task=task, to_group=others)
    page = console_client(personas["admin"]).get("/", {"due": "escalated", "graph": GRAPH}).content.decode()
    row = page[page.index(str(task.pk)) :][:4000]
    assert f"escalated → {LEADS}" in row and f"escalated → {others.name}" not in row
    assert personas["admin"].client.get(f"/api/tasks/{task.pk}").json()["escalated_to"] == LEADS


@pytest.mark.django_db
def test_an_escalation_nobody_could_finish_says_so_and_mails_no_one(personas, mailoutbox):
    leads, _ = Group.objects.get_or_create(name=LEADS)
    lead = _person_with_mail("lead", group=leads)
    task, signer = _quorum_half_approved()  # no approver with an address: nobody can give the last approval
    ApprovalTask.objects.filter(pk=task.pk).update(due_at=timezone.now() - timedelta(minutes=5))
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    task.refresh_from_db()
    assert task.assigned_group is None and "nobody may decide it now: no one e-mailed" in task.escalation_reason
    [event] = _events(task, AuditAction.DEADLINE_ESCALATED)
    assert event.details["notified"] == [] and event.details["escalation_refused"]["group"] == LEADS
    assert not [m for m in mailoutbox if lead.email in m.bcc or signer.email in m.bcc]


@pytest.mark.django_db
def test_a_reminder_goes_only_to_those_who_may_decide_the_task_now(personas, mailoutbox):
    """An outside QA's find: reminders went to every graph-assignment holder who could see the task, the
    thread's starter (an operator) among them, and reviewers who could not give a quorum's last approval."""
    operator = _person_with_mail("operator")
    reviewer, approver = _reviewer_with_mail(QUORUM_GRAPH), _person_with_mail("approver")
    starter = _person_with_mail("approver")
    now = timezone.now()
    task, signer = _quorum_half_approved(created_by=starter)
    ApprovalTask.objects.filter(pk=task.pk).update(due_at=now + timedelta(minutes=20), remind_at=now)
    assert task_remind(task_id=task.pk, now=timezone.now()) is True
    [event] = _events(task, AuditAction.DEADLINE_REMINDED)
    notified = event.details["notified"]
    assert approver.username in notified
    for cannot in (operator, reviewer, signer, starter):  # no role to decide, no last approval, signed, started
        assert cannot.username not in notified


def _admin_with_mail() -> User:
    """An admin: every graph by role, no assignment."""
    user = User.objects.create_user(f"adm-{uuid.uuid4().hex[:6]}", email=f"{uuid.uuid4().hex[:6]}@example.com")
    user.groups.add(Group.objects.get(name="admin"))
    return user


@pytest.mark.django_db
def test_a_reminder_reaches_an_admin_when_nobody_assigned_to_the_gate_may_decide(personas, mailoutbox):
    """A team whose only decider is its admin (every graph by role, no assignment) was never reminded:
    recipients were looked for among graph assignments only."""
    admin = _admin_with_mail()
    GraphAssignment.objects.filter(graph__in=[GRAPH, "*"]).delete()  # nobody assigned to the graph
    now = timezone.now()
    task = task_make(graph=GRAPH, node="compliance_review", due_at=now + timedelta(minutes=20))
    ApprovalTask.objects.filter(pk=task.pk).update(remind_at=now)
    assert task_remind(task_id=task.pk, now=timezone.now()) is True
    [event] = _events(task, AuditAction.DEADLINE_REMINDED)
    assert admin.username in event.details["notified"]


@pytest.mark.django_db
def test_an_admin_is_not_reminded_while_someone_assigned_to_the_gate_may_decide(personas, mailoutbox):
    admin, reviewer = _admin_with_mail(), _reviewer_with_mail()
    now = timezone.now()
    task = task_make(graph=GRAPH, node="compliance_review", due_at=now + timedelta(minutes=20))
    ApprovalTask.objects.filter(pk=task.pk).update(remind_at=now)
    assert task_remind(task_id=task.pk, now=timezone.now()) is True
    [event] = _events(task, AuditAction.DEADLINE_REMINDED)
    assert reviewer.username in event.details["notified"] and admin.username not in event.details["notified"]


@pytest.mark.django_db
def test_a_decided_task_is_never_reminded_or_escalated(personas):
    task = task_make(graph=GRAPH, node="compliance_review", due_at=timezone.now() - timedelta(minutes=1))
    ApprovalTask.objects.filter(pk=task.pk).update(status="decided", remind_at=timezone.now() - timedelta(hours=1))
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (0, 0)
    assert task_remind(task_id=task.pk, now=timezone.now()) is False
    assert not _events(task, AuditAction.DEADLINE_ESCALATED)


@pytest.mark.django_db
def test_a_payload_asking_for_an_automatic_approval_gets_none(personas):
    payload = _gate(due="1m", on_timeout={"outcome": "approve", "reason": "me"}, allow_auto_approve=True)
    task = task_make(graph="loan_approval", node="human_review", payload=payload)
    ApprovalTask.objects.filter(pk=task.pk).update(due_at=timezone.now() - timedelta(seconds=1))
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    task.refresh_from_db()
    assert task.status == "pending" and not Decision.objects.filter(task=task).exists()
    assert _events(task, AuditAction.DEADLINE_ESCALATED)[0].details["on_timeout"] is None


@pytest.mark.django_db
def test_an_approval_policy_without_the_allowance_is_refused_at_the_sweep_too(personas, monkeypatch):
    # Start-up refuses such a policy; a policy object made any other way meets the second check.
    forged = Deadline(due_seconds=60, on_timeout=TimeoutOutcome("approve", "forged"))
    monkeypatch.setattr(deadlines, "gate_deadline", lambda **kwargs: forged)
    task = task_make(graph=GRAPH, node="compliance_review", due_at=timezone.now() - timedelta(seconds=1))
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    [refused] = _events(task, AuditAction.DEADLINE_TIMEOUT_REFUSED)
    assert "allow_auto_approve" in refused.details["message"]
    assert not Decision.objects.filter(task=task).exists()


@pytest.mark.django_db
def test_a_timeout_refused_by_the_decision_path_is_recorded_and_the_task_stays_open(personas):
    from approvals.models import TaskClaim

    task = task_make(graph=GRAPH, node="human_review", due_at=timezone.now() - timedelta(seconds=1))
    now = timezone.now()
    TaskClaim.objects.create(
        task=task, user=personas["reviewer"].user, claimed_at=now, expires_at=now + timedelta(hours=1)
    )
    assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    [refused] = _events(task, AuditAction.DEADLINE_TIMEOUT_REFUSED)
    assert refused.details["outcome"] == "reject" and "claimed" in refused.details["message"]
    task.refresh_from_db()
    assert task.status == "pending" and task.escalated_at is not None and not task.decisions.exists()


# --- surfaces: API and console --------------------------------------------------------------------


@pytest.mark.django_db
def test_the_api_says_how_due_a_task_is(personas):
    reviewer = personas["reviewer"]
    late = task_make(graph=GRAPH, node="compliance_review", due_at=timezone.now() - timedelta(minutes=20, seconds=5))
    soon = task_make(graph=GRAPH, node="compliance_review", due_at=timezone.now() + timedelta(minutes=30))
    body = reviewer.client.get(f"/api/tasks/{late.pk}").json()
    assert body["overdue"] is True and body["due_text"] == "overdue 20 min" and body["due_in_seconds"] <= -1200
    assert body["escalated_at"] is None and body["due_at"]
    task_escalate(task_id=late.pk, now=timezone.now())
    body = reviewer.client.get(f"/api/tasks/{late.pk}").json()
    assert body["escalated_at"] and "overdue 20 min" in body["escalation_reason"]
    ids = lambda due: {t["id"] for t in reviewer.client.get("/api/tasks", due=due, graph=GRAPH).json()["items"]}  # noqa: E731
    assert str(late.pk) in ids("overdue") and str(late.pk) in ids("escalated") and str(late.pk) not in ids("soon")
    assert str(soon.pk) in ids("soon") and str(soon.pk) not in ids("overdue")
    # Scoped by the one policy: a reviewer of another graph sees neither the task nor its deadline.
    outside = personas["loan_reviewer"].client
    assert str(late.pk) not in {t["id"] for t in outside.get("/api/tasks", due="overdue").json()["items"]}
    assert outside.get(f"/api/tasks/{late.pk}").status_code == 404
    response = reviewer.client.get("/api/tasks", due="late")
    assert response.status_code == 422 and "due" in response.content.decode()


@pytest.mark.django_db
def test_the_inbox_filters_by_due_and_shows_human_badges(personas):
    case = f"D-{uuid.uuid4().hex[:6]}"
    late = task_make(graph=GRAPH, node="compliance_review", metadata={"case": case},
                     due_at=timezone.now() - timedelta(minutes=20, seconds=5))  # fmt: skip
    later = task_make(graph=GRAPH, node="compliance_review", metadata={"case": case},
                      due_at=timezone.now() + timedelta(hours=3, seconds=30))  # fmt: skip
    client = console_client(personas["reviewer"])
    page = client.get("/", {"q": case}).content.decode()
    assert "overdue 20 min" in page and "due in 3 h" in page and "86400" not in page
    overdue = client.get("/", {"q": case, "due": "overdue"}).content.decode()
    assert str(late.pk) in overdue and str(later.pk) not in overdue
    _reviewer_with_mail(group=Group.objects.get_or_create(name=LEADS)[0])  # a lead who may decide it
    task_escalate(task_id=late.pk, now=timezone.now())
    escalated = client.get("/", {"q": case, "due": "escalated"}).content.decode()
    assert str(late.pk) in escalated and "escalated → deadline-leads" in escalated and str(later.pk) not in escalated
    task_page = client.get(f"/tasks/{late.pk}/").content.decode()
    assert "Escalated since" in task_page and "reassigned to deadline-leads" in task_page
    later_page = client.get(f"/tasks/{later.pk}/").content.decode()
    # The due time in force, as a human duration; not the payload's own sla_seconds=3600 beside it.
    assert "due in 3 h" in later_page and "Due within" not in later_page and "3600" not in later_page
    assert client.get("/", {"due": "late"}).status_code == 200  # a bad filter is a message, not a 500


# --- exactly once under a controlled race (committed rows, two connections) ----------------------


@pytest.mark.parametrize("step", ["remind", "escalate"])
@pytest.mark.usefixtures("live_db")
def test_two_sweepers_take_a_step_exactly_once(personas, monkeypatch, step):
    """Sweeper A takes the step and stops inside its transaction (holding the row); sweeper B, started
    then, skips the row at once instead of waiting or doubling it; after A commits, a sweeper working
    from a stale candidate list finds the step done."""
    # The session's worker runs the beat sweeper on the real clock: the step falls due only at the
    # sweepers' own clock, two hours ahead, so no other sweeper can take it before A does.
    now = timezone.now()
    when = now + timedelta(hours=2)
    due = now + timedelta(days=1) if step == "remind" else now + timedelta(hours=1)
    task = task_make(graph=GRAPH, node="compliance_review", due_at=due)
    ApprovalTask.objects.filter(pk=task.pk).update(remind_at=now + timedelta(hours=1))
    run = (lambda: task_remind(task_id=task.pk, now=when)) if step == "remind" else (
        lambda: task_escalate(task_id=task.pk, now=when)[0]
    )  # fmt: skip
    inside, release = threading.Event(), threading.Event()
    original = deadlines._recipients

    def held(t):  # A's step has claimed the row and waits here, inside its transaction
        if threading.current_thread().name == "sweeper-a":
            inside.set()
            assert release.wait(scaled(20))
        return original(t)

    monkeypatch.setattr(deadlines, "_recipients", held)
    results: dict[str, object] = {}

    def sweeper_a():
        # task_make's run is dispatched on commit; the session's worker, finding it finished, still
        # locks its thread for a moment, and a sweeper skips a locked thread (the next sweep takes the
        # step). A retries until it holds the row, so the race under test is the only one left.
        deadline = time.monotonic() + scaled(20)
        try:
            while not (result := run()) and not inside.is_set() and time.monotonic() < deadline:
                time.sleep(0.01)
            results["a"] = result
        finally:
            connection.close()

    a = threading.Thread(target=sweeper_a, name="sweeper-a")
    a.start()
    try:
        assert inside.wait(scaled(20)), "sweeper A never reached its step"
        started = time.monotonic()
        results["b"] = run()  # B: another connection, while A holds the row
        assert time.monotonic() - started < scaled(5), "sweeper B waited for A's lock instead of skipping"
    finally:
        release.set()
        a.join(scaled(20))
    assert results == {"a": 1, "b": 0} or results == {"a": True, "b": False}
    assert not run()  # a stale candidate list after A's commit: the step is done
    action = AuditAction.DEADLINE_REMINDED if step == "remind" else AuditAction.DEADLINE_ESCALATED
    assert len(_events(task, action)) == 1


# --- the timeout outcome resumes the thread (real worker) ----------------------------------------


@pytest.mark.integration
@pytest.mark.usefixtures("live_db", "live_worker")
def test_a_timed_out_gate_is_rejected_by_the_system_and_the_thread_resumes(personas):
    Group.objects.get_or_create(name=LEADS)
    thread = thread_start(personas["operator"], GRAPH, loan_input(amount=20000))
    [summary] = pending_tasks(personas["reviewer"], thread["id"])
    task = ApprovalTask.objects.get(pk=summary["id"])
    # langgraph.json's 1 h wins over the payload's 24 h SLA; the reminder is 10 min before.
    assert abs((task.due_at - task.created_at).total_seconds() - 3600) < scaled(30)
    assert task.due_at - task.remind_at == timedelta(minutes=10)

    result = deadlines_sweep(now=task.due_at + timedelta(seconds=1), graphs=[GRAPH])
    assert result.escalated >= 1 and result.timed_out >= 1
    task.refresh_from_db()
    assert task.status == "decided" and task.escalated_at is not None
    [decision] = Decision.objects.filter(task=task)
    assert decision.actor.username == "system:deadlines" and decision.outcome == "reject"
    assert decision.reason == "[system: deadline passed] No decision within the deadline"
    assert decision.meaning == "rejected" and decision.run_id is not None
    [timed_out] = _events(task, AuditAction.DEADLINE_TIMED_OUT)
    assert timed_out.details["decision"] == str(decision.pk) and timed_out.actor_label == "system:deadlines"

    done = thread_settled(personas["reviewer"], thread["id"])
    assert done["status"] == "completed" and done["values"]["status"] == "declined"
    assert done["values"]["review"]["decision"] == "reject"
    # Once: another sweep finds nothing to do for this task.
    deadlines_sweep(now=task.due_at + timedelta(seconds=2), graphs=[GRAPH])
    assert len(_events(task, AuditAction.DEADLINE_ESCALATED)) == 1
    assert Decision.objects.filter(task=task).count() == 1
    # Its signature page does not say the system "signed within the session's window": it has no session.
    detail = console_client(personas["auditor"]).get(f"/decisions/{decision.pk}/").content.decode()
    assert "not applicable: no person signs in as system:deadlines" in detail
    assert "signed within the session" not in detail


def test_beat_runs_the_sweep():
    from django.conf import settings

    from approvals.tasks import sweep_deadlines

    assert settings.CELERY_BEAT_SCHEDULE["sweep-deadlines"]["task"] == sweep_deadlines.name


@pytest.mark.slow
def test_embedded_mode_writes_deadline_mail_to_var_mail(tmp_path):
    """No servers: the file backend puts each e-mail under var/mail/ (a subprocess: settings load once)."""
    import os
    import subprocess
    import sys

    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env.update(GATEHOUSE_VAR_DIR=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="console.settings")
    code = (
        "from approvals.deadlines import _mail_send; "
        "_mail_send('[Gatehouse] overdue 20 min: Loan', 'body', ['lead@example.com'])"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=scaled(120),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    [mail] = list((tmp_path / "var" / "mail").iterdir())
    assert "Subject: [Gatehouse] overdue 20 min: Loan" in mail.read_text()  # Bcc: no address in the headers


@pytest.mark.django_db
def test_tasks_escalated_before_the_group_was_kept_take_it_from_their_audit_event(personas, mailoutbox):
    """Migration 0036's backfill: the group comes from the task's ``deadline.escalated`` event, which has
    named it since escalation began; a refused escalation's event names none, and that task stays empty."""
    import importlib

    from django.apps import apps

    backfill = importlib.import_module("approvals.migrations.0036_task_escalated_to").escalated_to_backfill
    leads, _ = Group.objects.get_or_create(name=LEADS)
    _reviewer_with_mail(group=leads)
    moved = task_make(graph=GRAPH, node="compliance_review", due_at=timezone.now() - timedelta(minutes=5))
    kept, _ = _quorum_half_approved(due_at=timezone.now() - timedelta(minutes=5))
    for task in (moved, kept):
        assert task_escalate(task_id=task.pk, now=timezone.now()) == (1, 0)
    ApprovalTask.objects.filter(pk__in=[moved.pk, kept.pk]).update(escalated_to="")  # as before the migration
    backfill(apps, None)
    escalated_to = dict(ApprovalTask.objects.filter(pk__in=[moved.pk, kept.pk]).values_list("pk", "escalated_to"))
    assert escalated_to == {moved.pk: LEADS, kept.pk: ""}


def test_the_gate_payload_builder_takes_every_deadline_key_the_docs_name():
    """An outside tester's ``request_review(..., remind_before="10m")`` raised TypeError: docs/deadlines.md says a
    payload may carry it, and the builder took ``due`` only."""
    from runtime.gatekeeper import gate_payload

    timeout = {"outcome": "reject", "reason": "No decision in time"}
    payload = gate_payload(title="Pay", due="1h", remind_before="10m", escalate_to=LEADS, on_timeout=timeout)
    policy = gate_deadline(graph="loan_approval", node="human_review", payload=payload)
    assert (policy.due_seconds, policy.remind_before_seconds, policy.escalate_to) == (3600, 600, LEADS)
    assert policy.on_timeout is not None and policy.on_timeout.outcome == "reject"
    assert "remind_before" not in gate_payload(title="Pay")  # written only when given


@pytest.mark.django_db
def test_a_gates_escalate_to_naming_no_group_is_said_as_the_registry_loads():
    """An outside tester's misspelt ``escalate_to: "finance-leads"`` passed graphs_check and start-up; it showed
    first when a task was overdue ("group … does not exist: not reassigned")."""
    from approvals.deadlines import escalation_group_warnings
    from runtime.registry import graph_get, registry_warnings_read

    entries = {GRAPH: graph_get(GRAPH)}
    Group.objects.filter(name=LEADS).delete()
    said = escalation_group_warnings(entries)
    assert said == [
        f"graph {GRAPH!r}, gate {gate!r}: escalate_to {LEADS!r} names no group, so its overdue tasks would not be "
        "reassigned (create the group, or correct langgraph.json; docs/deadlines.md)"
        for gate in ("compliance_review", "human_review")
    ]
    assert set(said) <= set(registry_warnings_read(entries))  # graphs_check and a worker's start say it
    Group.objects.create(name=LEADS)
    assert escalation_group_warnings(entries) == []
