"""Reassign (leads) and delegate (the claim holder): gate assignments, separation of duties, audit,
the inbox's "assigned to me / my groups" filter, and the API."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from approvals import assignment, claims
from approvals.errors import Conflict, Forbidden, InvalidInput, NotFound
from approvals.inbox_filter import InboxFilter
from approvals.models import ApprovalTask, AuditEvent, TaskClaim
from console.selectors import inbox_list
from runtime.gatekeeper import gate_payload
from runtime.models import Thread
from tests.approvals.handoffs import api, person, sign, team
from tests.conftest import Persona
from tests.console.conftest import console_client
from tests.factories import task_decided, task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _unchanged(task: ApprovalTask) -> None:
    fresh = ApprovalTask.objects.get(pk=task.pk)
    assert (fresh.assigned_user_id, fresh.assigned_group_id, fresh.assigned_at) == (None, None, None)
    assert not AuditEvent.objects.filter(subject_id=str(task.pk), action__in=["task.reassigned", "task.delegated"])


def _mine(user, task) -> bool:
    return task.pk in {t.pk for t in inbox_list(user=user, filter=InboxFilter(assigned="me", q=str(task.pk))).items}


# --- reassign -----------------------------------------------------------------------------------


def test_a_lead_reassigns_a_task_to_a_reviewer_audited_and_in_their_inbox():
    lead, target, bystander = person("lead"), person(), person()
    task = task_make()
    assignment.task_reassign(actor=lead, task=task, to_user=target, note="you know this applicant")
    task.refresh_from_db()
    assert task.assigned_user == target and task.assigned_at is not None
    event = AuditEvent.objects.get(subject_id=str(task.pk), action="task.reassigned")
    assert event.actor == lead and event.graph == task.graph and event.thread_id == task.thread_id
    assert event.details["to"]["user"] == target.username and event.details["note"] == "you know this applicant"
    assert _mine(target, task) and not _mine(bystander, task)


def test_a_task_reassigned_to_a_group_is_in_every_members_inbox_until_a_person_is_named():
    lead, a, b = person("lead"), person(), person()
    group = team(a, b)
    task = task_make()
    assignment.task_reassign(actor=lead, task=task, to_group=group, note="")
    assert _mine(a, task) and _mine(b, task)
    assignment.task_reassign(actor=lead, task=task, to_user=b, to_group=group, note="")
    assert _mine(b, task) and not _mine(a, task)
    assert assignment.task_assignees(ApprovalTask.objects.get(pk=task.pk)).user == b


@pytest.mark.parametrize("role", ["reviewer", "auditor", "operator"])
def test_only_leads_and_admins_reassign(role):
    task = task_make()
    with pytest.raises(Forbidden):
        assignment.task_reassign(actor=person(role), task=task, to_user=person(), note="")
    _unchanged(task)


def test_a_lead_cannot_reassign_a_task_of_a_graph_they_do_not_see():
    task = task_make(graph="kyc_onboarding", node="compliance_review")
    with pytest.raises(NotFound):
        assignment.task_reassign(actor=person("lead", graphs=("loan_approval",)), task=task, to_user=person(), note="")
    _unchanged(task)


def test_a_reviewer_not_assigned_to_the_gate_cannot_be_made_assignee():
    task = task_make(graph="kyc_onboarding", node="compliance_review")
    other_gate = person(graphs=("kyc_onboarding",), gate="identity_check")
    with pytest.raises(Forbidden) as refused:
        assignment.task_reassign(actor=person("lead"), task=task, to_user=other_gate, note="")
    assert refused.value.field == "to_user" and "compliance_review" in refused.value.message
    _unchanged(task)


@pytest.mark.parametrize("target_role,graphs", [("auditor", ("*",)), ("reviewer", ("loan_approval",)), (None, ("*",))])
def test_someone_who_may_not_decide_the_graph_cannot_be_made_assignee(target_role, graphs):
    task = task_make(graph="kyc_onboarding", node="compliance_review")
    with pytest.raises(Forbidden):
        assignment.task_reassign(actor=person("admin"), task=task, to_user=person(target_role, graphs), note="")
    _unchanged(task)


def test_a_group_none_of_whose_members_may_decide_is_refused():
    task = task_make()
    with pytest.raises(Forbidden) as refused:
        assignment.task_reassign(actor=person("lead"), task=task, to_group=team(person("auditor")), note="")
    assert refused.value.field == "to_group"
    _unchanged(task)


def test_the_reassign_picker_offers_only_groups_the_service_would_accept():
    """It offered every role, e.g. "auditor", which the reassign then refused with a 403."""
    lead, task = person("lead"), task_make()
    deciders, readers = team(person()), team(person("auditor"))
    offered = assignment.groups_for_reassign(task)
    assert deciders in offered and readers not in offered
    assert "auditor" not in {g.name for g in offered}
    for group in offered:  # each one is accepted by the service the form posts to
        assignment.task_reassign(actor=lead, task=task, to_group=group, note="")


def test_the_reassign_picker_does_not_read_each_member_of_a_group_nobody_in_which_may_decide():
    """Every member of every group was tried in turn (their permissions read, up to 200 per group) on
    every render of a task page for a lead: a large auditors' group cost hundreds of queries."""
    task = task_make()
    readers = Group.objects.create(name=f"0-readers-{uuid.uuid4().hex[:8]}")  # first by name: always listed
    readers.user_set.add(person("auditor"))
    with CaptureQueriesContext(connection) as one:
        assert readers not in assignment.groups_for_reassign(task)
    readers.user_set.add(*[person("auditor") for _ in range(12)])
    with CaptureQueriesContext(connection) as thirteen:
        assert readers not in assignment.groups_for_reassign(task)
    assert len(thirteen.captured_queries) == len(one.captured_queries)


def test_the_task_pages_reassign_form_offers_only_groups_that_may_decide(personas: dict[str, Persona]):
    task, readers = task_make(), team(person("auditor"))
    html = console_client(personas["admin"]).get(f"/tasks/{task.pk}/").content.decode()
    picker = html.split('id="reassign-group"', 1)[1].split("</select>", 1)[0]
    assert f'value="{readers.name}"' not in picker and 'value="auditor"' not in picker
    assert 'value="reviewer"' in picker


def test_separation_of_duties_keeps_a_task_from_someone_who_already_signed_it():
    approver, lead = person("approver"), person("lead")
    task = task_make(payload=gate_payload(title="Quorum", required_approvals=2))
    ApprovalTask.objects.filter(pk=task.pk).update(required_approvals=2)
    sign(approver, task)
    with pytest.raises(Forbidden) as refused:
        assignment.task_reassign(actor=lead, task=task, to_user=approver, note="")
    assert "already signed" in refused.value.message
    _unchanged(task)


def test_a_quorums_last_approval_is_not_handed_to_someone_without_the_approver_role():
    """An outside tester's find: a four-eyes task with one approval was delegated to a reviewer, whose task view
    then said the last approval needs the approver role: handed over, it could only be rejected or proposed."""
    reviewer, approver, lead = person(), person("approver"), person("lead")
    task = task_make(payload=gate_payload(title="Quorum", required_approvals=2))
    assignment.task_reassign(actor=lead, task=task, to_user=reviewer, note="")  # the first approval is anyone's
    sign(person("approver"), task)
    with pytest.raises(Forbidden) as refused:
        assignment.task_reassign(actor=lead, task=task, to_user=person(), note="")
    assert "cannot give this task's last approval" in refused.value.message and refused.value.field == "to_user"
    assignment.task_reassign(actor=lead, task=task, to_user=approver, note="")
    assert ApprovalTask.objects.get(pk=task.pk).assigned_user == approver


def test_separation_of_duties_keeps_a_task_from_the_threads_starter():
    starter = person()
    payload = {**gate_payload(title="SoD"), "separation_of_duties": True}
    task = task_make(payload=payload)
    Thread.objects.filter(pk=task.thread_id).update(created_by=starter)
    with pytest.raises(Forbidden) as refused:
        assignment.task_reassign(actor=person("lead"), task=task, to_user=starter, note="")
    assert "started this thread" in refused.value.message
    _unchanged(task)


@override_settings(GATEHOUSE_SEPARATION_OF_DUTIES=False)
def test_without_separation_of_duties_the_starter_may_be_assignee():
    starter = person()
    task = task_make()
    Thread.objects.filter(pk=task.thread_id).update(created_by=starter)
    assignment.task_reassign(actor=person("lead"), task=task, to_user=starter, note="")
    assert ApprovalTask.objects.get(pk=task.pk).assigned_user == starter


def test_reassigning_releases_a_claim_held_by_someone_else():
    holder, target = person(), person()
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    assignment.task_reassign(actor=person("lead"), task=task, to_user=target, note="")
    assert not TaskClaim.objects.filter(task=task).exists()
    event = AuditEvent.objects.get(subject_id=str(task.pk), action="task.reassigned")
    assert event.details["claim_released"] == holder.username


def test_a_decided_task_is_not_handed_off():
    task = task_decided(by=person())
    with pytest.raises(Conflict):
        assignment.task_reassign(actor=person("lead"), task=task, to_user=person(), note="")


def test_a_reassign_names_someone():
    task = task_make()
    with pytest.raises(InvalidInput) as refused:
        assignment.task_reassign(actor=person("lead"), task=task, note="")
    assert refused.value.field == "to_user"


# --- delegate -----------------------------------------------------------------------------------


def test_the_claim_holder_delegates_with_a_note_and_the_claim_goes_along():
    holder, colleague = person(), person()
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    assignment.task_delegate(actor=holder, task=task, to_user=colleague, note="please check the income proof")
    task.refresh_from_db()
    assert task.assigned_user == colleague
    assert TaskClaim.objects.get(task=task).user == colleague
    event = AuditEvent.objects.get(subject_id=str(task.pk), action="task.delegated")
    assert event.actor == holder and event.details["note"] == "please check the income proof"
    assert _mine(colleague, task)
    sign(colleague, task)  # the colleague holds the claim now, so may decide


def test_an_unclaimed_task_cannot_be_delegated():
    task = task_make()
    with pytest.raises(Conflict) as refused:
        assignment.task_delegate(actor=person(), task=task, to_user=person(), note="here")
    assert refused.value.field == "claim"
    _unchanged(task)


def test_someone_elses_claimed_task_cannot_be_delegated():
    holder, attacker, accomplice = person(), person(), person()
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    with pytest.raises(Forbidden) as refused:
        assignment.task_delegate(actor=attacker, task=task, to_user=accomplice, note="mine now")
    assert refused.value.field == "claim"
    assert TaskClaim.objects.get(task=task).user == holder
    _unchanged(task)


def test_delegating_to_someone_not_assigned_to_the_gate_is_refused():
    holder = person()
    task = task_make(graph="kyc_onboarding", node="compliance_review")
    claims.task_claim(actor=holder, task_id=task.pk)
    with pytest.raises(Forbidden):
        assignment.task_delegate(
            actor=holder, task=task, to_user=person(graphs=("kyc_onboarding",), gate="identity_check"), note="x"
        )
    assert TaskClaim.objects.get(task=task).user == holder
    _unchanged(task)


@pytest.mark.parametrize("note,field", [("", "note"), ("   ", "note"), ("x" * 1001, "note"), ("a\x00b", "note")])
def test_a_delegation_needs_a_usable_note(note, field):
    holder = person()
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    with pytest.raises(InvalidInput) as refused:
        assignment.task_delegate(actor=holder, task=task, to_user=person(), note=note)
    assert refused.value.field == field
    _unchanged(task)


def test_one_cannot_delegate_to_oneself():
    holder = person()
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    with pytest.raises(InvalidInput):
        assignment.task_delegate(actor=holder, task=task, to_user=holder, note="me")


# --- the API ------------------------------------------------------------------------------------


def test_the_api_reassigns_and_delegates():
    lead, a, b = person("lead"), person(), person()
    task = task_make()
    moved = api(lead).post(f"/api/tasks/{task.pk}/reassign", {"to_user": a.username, "note": "over to you"})
    assert moved.status_code == 200, moved.content
    assert moved.json()["assigned_user"] == a.username

    api(a).post(f"/api/tasks/{task.pk}/claim")
    handed = api(a).post(f"/api/tasks/{task.pk}/delegate", {"to_user": b.username, "note": "need a second look"})
    assert handed.status_code == 200, handed.content
    body = handed.json()
    assert body["assigned_user"] == b.username and body["claim"]["user"] == b.username


@pytest.mark.parametrize(
    "body,field",
    [
        ({"note": "nobody named"}, "to_user"),
        ({"to_user": "no-such-user-anywhere"}, "to_user"),
        ({"to_group": "no-such-group-anywhere"}, "to_group"),
        ({"to_user": ""}, "to_user"),
    ],
)
def test_the_api_names_the_bad_field_of_a_reassign(body, field):
    task = task_make()
    response = api(person("lead")).post(f"/api/tasks/{task.pk}/reassign", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"].endswith(field)
    _unchanged(task)


def test_a_reviewer_learns_nothing_about_users_from_a_refused_reassign():
    task = task_make()
    response = api(person()).post(f"/api/tasks/{task.pk}/reassign", {"to_user": "no-such-user-anywhere"})
    assert response.status_code == 403
    _unchanged(task)


def test_the_inbox_filter_and_column_show_assignments(personas: dict[str, Persona]):
    target = person()
    task = task_make(title="Handoff inbox marker")
    assignment.task_reassign(actor=person("lead"), task=task, to_user=target, note="")
    client = console_client(Persona(target.username, "reviewer", "", target))
    page = client.get("/", {"assigned": "me", "q": str(task.pk)}).content.decode()
    assert f'data-task-id="{task.pk}"' in page
    other = console_client(personas["reviewer2"]).get("/", {"assigned": "me", "q": str(task.pk)}).content.decode()
    assert f'data-task-id="{task.pk}"' not in other
    unfiltered = console_client(personas["reviewer2"]).get("/", {"q": str(task.pk)}).content.decode()
    assert target.username in unfiltered  # the "Assigned to" column


def test_a_webhooks_service_principal_is_never_handed_a_task():
    from approvals.inbound.webhooks import webhook_endpoint_create

    endpoint = webhook_endpoint_create(
        actor=None, name=f"ho-{uuid.uuid4().hex[:8]}", graph="loan_approval", gates=["human_review"]
    )
    task = task_make()
    with pytest.raises(Forbidden) as refused:
        assignment.task_reassign(actor=person("lead"), task=task, to_user=endpoint.principal, note="")
    assert "service principal" in refused.value.message
    _unchanged(task)
