"""Out-of-office: new assignments naming an away reviewer go to their delegate; chains resolve
safely (no loops, a cap, a fallback to the group); settable through the API and the console."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals import assignment, claims
from approvals.errors import Forbidden, InvalidInput
from approvals.models import ApprovalTask, AuditEvent, Away
from tests.approvals.handoffs import api, person, put, team
from tests.conftest import Persona
from tests.console.conftest import console_client
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _reassigned(task: ApprovalTask) -> tuple[ApprovalTask, dict]:
    event = AuditEvent.objects.filter(subject_id=str(task.pk), action="task.reassigned").latest("id")
    return ApprovalTask.objects.get(pk=task.pk), event.details


def test_a_task_reassigned_to_someone_away_goes_to_their_delegate_recorded():
    away, cover = person(), person()
    assignment.away_set(actor=away, delegate=cover, note="holiday")
    task = task_make()
    assignment.task_reassign(actor=person("lead"), task=task, to_user=away, note="")
    task, details = _reassigned(task)
    assert task.assigned_user == cover
    assert details["requested"]["user"] == away.username
    assert details["to"] == {"user": cover.username, "group": None, "away": [away.username]}
    assert AuditEvent.objects.filter(subject_id=str(away.pk), action="user.away_set").exists()


def test_a_delegation_to_someone_away_lands_on_their_delegate_with_the_claim():
    holder, away, cover = person(), person(), person()
    assignment.away_set(actor=away, delegate=cover)
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    assignment.task_delegate(actor=holder, task=task, to_user=away, note="for you")
    task.refresh_from_db()
    assert task.assigned_user == cover and claims.claim_for(task).user == cover


def test_a_delegation_that_would_come_back_to_its_sender_through_an_away_is_refused():
    """Delegating to a colleague whose out-of-office names you handed the task back to yourself, recorded as
    "meant for them, sent on to their delegate"; delegating to yourself directly was refused."""
    holder, away = person(), person()
    assignment.away_set(actor=away, delegate=holder)
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    with pytest.raises(InvalidInput, match="is away and their tasks come to you") as refused:
        assignment.task_delegate(actor=holder, task=task, to_user=away, note="for you")
    assert refused.value.field == "to_user"
    task.refresh_from_db()
    assert task.assigned_user is None and claims.claim_for(task).user == holder
    assert not AuditEvent.objects.filter(subject_id=str(task.pk), action="task.delegated").exists()


@pytest.mark.parametrize("note", ["a\x02b", "tab\tok\x7f", "x" * 301])
def test_an_out_of_office_note_with_control_characters_or_too_long_is_refused(note):
    """It was saved with control characters (comments and names refuse them) and cut to 300 characters unsaid."""
    me = person()
    with pytest.raises(InvalidInput) as refused:
        assignment.away_set(actor=me, delegate=person(), note=note)
    assert refused.value.field == "note"
    assert not Away.objects.filter(user=me).exists()
    assignment.away_set(actor=me, delegate=person(), note="back Monday\r\n\tcall me")
    assert Away.objects.get(user=me).note == "back Monday\n\tcall me"


def test_a_chain_of_delegates_is_followed():
    a, b, c = person(), person(), person()
    assignment.away_set(actor=a, delegate=b)
    assignment.away_set(actor=b, delegate=c)
    task = task_make()
    assignment.task_reassign(actor=person("lead"), task=task, to_user=a, note="")
    task, details = _reassigned(task)
    assert task.assigned_user == c and details["to"]["away"] == [a.username, b.username]


def test_two_reviewers_away_to_each_other_do_not_loop_and_the_task_falls_back_to_the_group():
    a, b = person(), person()
    group = team(a, b)
    assignment.away_set(actor=a, delegate=b)
    assignment.away_set(actor=b, delegate=a)
    task = task_make()
    assignment.task_reassign(actor=person("lead"), task=task, to_user=a, to_group=group, note="")
    task, details = _reassigned(task)
    assert task.assigned_user is None and task.assigned_group == group
    assert "loop" in details["to"]["fallback"]


def test_a_chain_longer_than_the_cap_falls_back():
    chain = [person() for _ in range(assignment.MAX_AWAY_HOPS + 2)]
    for here, there in itertools.pairwise(chain):
        assignment.away_set(actor=here, delegate=there)
    task = task_make()
    assignment.task_reassign(actor=person("lead"), task=task, to_user=chain[0], note="")
    task, details = _reassigned(task)
    assert task.assigned_user is None
    assert "more than" in details["to"]["fallback"]


def test_a_delegate_who_may_not_decide_the_gate_is_skipped_for_the_group():
    away, loan_only, member = person(), person(graphs=("loan_approval",)), person()
    group = team(member)
    assignment.away_set(actor=away, delegate=loan_only)
    task = task_make(graph="kyc_onboarding", node="compliance_review")
    assignment.task_reassign(actor=person("lead"), task=task, to_user=away, to_group=group, note="")
    task, details = _reassigned(task)
    assert task.assigned_user is None and task.assigned_group == group
    assert "may not decide" in details["to"]["fallback"]


@pytest.mark.parametrize(
    "starts,ends,redirected",
    [(None, None, True), (-1, 1, True), (1, 2, False), (None, 1, True)],
)
def test_only_an_away_that_covers_now_redirects(starts, ends, redirected):
    now = timezone.now()
    away, cover = person(), person()
    Away.objects.create(
        user=away,
        delegate=cover,
        starts_at=now + timedelta(hours=starts) if starts is not None else None,
        ends_at=now + timedelta(hours=ends) if ends is not None else None,
    )
    task = task_make()
    assignment.task_reassign(actor=person("lead"), task=task, to_user=away, note="")
    assert ApprovalTask.objects.get(pk=task.pk).assigned_user == (cover if redirected else away)


def test_an_ended_away_no_longer_redirects():
    away, cover = person(), person()
    Away.objects.create(user=away, delegate=cover, ends_at=timezone.now() - timedelta(minutes=1))
    task = task_make()
    assignment.task_reassign(actor=person("lead"), task=task, to_user=away, note="")
    assert ApprovalTask.objects.get(pk=task.pk).assigned_user == away


def test_tasks_already_assigned_stay_put_when_someone_goes_away():
    a, cover = person(), person()
    task = task_make()
    assignment.task_reassign(actor=person("lead"), task=task, to_user=a, note="")
    assignment.away_set(actor=a, delegate=cover)
    assert ApprovalTask.objects.get(pk=task.pk).assigned_user == a


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"delegate": "self"}, "delegate"),
        ({"delegate": "auditor"}, "delegate"),
        ({"starts_at": 2, "ends_at": 1}, "ends_at"),
        ({"ends_at": -1}, "ends_at"),
    ],
)
def test_a_bad_out_of_office_is_refused_naming_the_field(kwargs, field):
    me = person()
    delegate = {"self": me, "auditor": person("auditor")}.get(kwargs.pop("delegate", ""), person())
    now = timezone.now()
    times = {k: now + timedelta(hours=v) for k, v in kwargs.items()}
    with pytest.raises(InvalidInput) as refused:
        assignment.away_set(actor=me, delegate=delegate, **times)
    assert refused.value.field == field
    assert not Away.objects.filter(user=me).exists()


def test_someone_who_reviews_nothing_cannot_be_away():
    with pytest.raises(Forbidden):
        assignment.away_set(actor=person("auditor"), delegate=person())


def test_clearing_is_audited_and_ends_the_redirect():
    me, cover = person(), person()
    assignment.away_set(actor=me, delegate=cover)
    assignment.away_clear(actor=me)
    assert not Away.objects.filter(user=me).exists()
    assert AuditEvent.objects.filter(subject_id=str(me.pk), action="user.away_cleared").exists()


# --- API and console --------------------------------------------------------------------------


def test_the_api_sets_shows_and_clears_ones_own_out_of_office():
    me, cover = person(), person()
    client = api(me)
    assert client.get("/api/me/away").json() == {
        "away": False,
        "active": False,
        "delegate": None,
        "starts_at": None,
        "ends_at": None,
        "note": "",
    }
    until = (timezone.now() + timedelta(days=3)).isoformat()
    set_ = put(client, "/api/me/away", {"delegate": cover.username, "ends_at": until, "note": "conference"})
    assert set_.status_code == 200, set_.content
    body = client.get("/api/me/away").json()
    assert body["active"] is True and body["delegate"] == cover.username and body["note"] == "conference"
    cleared = put(client, "/api/me/away", {"delegate": None})
    assert cleared.status_code == 200 and cleared.json()["away"] is False


@pytest.mark.parametrize(
    "body,field",
    [({"delegate": "no-such-user-anywhere"}, "delegate"), ({"delegate": "x", "ends_at": "soon"}, "ends_at")],
)
def test_the_api_names_the_bad_field_of_an_out_of_office(body, field):
    me = person()
    response = put(api(me), "/api/me/away", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"].endswith(field)
    assert not Away.objects.filter(user=me).exists()


@pytest.mark.parametrize(
    "times,field",
    [
        ({"ends_at": "2099-01-01T09:00:00"}, "ends_at"),
        ({"starts_at": "2099-01-01T09:00:00"}, "starts_at"),
        ({"starts_at": "2099-01-01T09:00:00", "ends_at": "2099-01-02T09:00:00Z"}, "starts_at"),
    ],
)
def test_an_out_of_office_time_without_a_zone_is_refused_naming_it(times, field):
    """A time without an offset names no instant; comparing it with the clock was a 500."""
    me, cover = person(), person()
    response = put(api(me), "/api/me/away", {"delegate": cover.username, **times})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field
    assert "time zone" in response.json()["error"]["message"]
    assert not Away.objects.filter(user=me).exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"starts_at": "2099-01-01T09:00:00Z"}, "starts_at"),
        ({"ends_at": "2099-01-02T09:00:00Z"}, "ends_at"),
        ({"note": "x"}, "note"),
        ({"delegate": None, "note": "back on Monday"}, "note"),
        ({"delegate": None, "ends_at": "2099-01-02T09:00:00Z", "note": "x"}, "ends_at"),
        ({}, "delegate"),
    ],
)
def test_out_of_office_fields_without_a_delegate_are_refused_and_clear_nothing(body, field):
    """``{"note": "x"}`` answered 200 ``{"away": false}``: it cleared the out-of-office it meant to describe and
    dropped the note. Only ``{"delegate": null}`` clears."""
    me, cover = person(), person()
    until = timezone.now() + timedelta(days=3)
    assignment.away_set(actor=me, delegate=cover, ends_at=until, note="conference")

    response = put(api(me), "/api/me/away", body)

    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field
    away = Away.objects.get(user=me)
    assert (away.delegate, away.ends_at, away.note) == (cover, until, "conference")
    assert not AuditEvent.objects.filter(subject_id=str(me.pk), action="user.away_cleared").exists()


@pytest.mark.parametrize(
    "body", [{"delegate": None}, {"delegate": None, "starts_at": None, "ends_at": None, "note": ""}]
)
def test_delegate_null_clears_with_or_without_the_empty_fields(body):
    me, cover = person(), person()
    assignment.away_set(actor=me, delegate=cover)
    response = put(api(me), "/api/me/away", body)
    assert response.status_code == 200 and response.json()["away"] is False, response.content
    assert not Away.objects.filter(user=me).exists()


@pytest.mark.parametrize("field", ["starts_at", "ends_at"])
@pytest.mark.parametrize("value", [1, 4102444800, 4102444800.5, "4102444800", True])
def test_an_out_of_office_time_must_be_an_iso_string(field, value):
    """A number was read as Unix time: ``"starts_at": 1`` was 1970-01-01T00:00:01Z."""
    me, cover = person(), person()
    response = put(api(me), "/api/me/away", {"delegate": cover.username, field: value})
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["field"] == field and "ISO 8601" in error["message"], error
    assert not Away.objects.filter(user=me).exists()


def test_the_console_settings_page_sets_it_and_the_inbox_header_shows_it():
    me, cover = person(), person()
    client = console_client(Persona(me.username, "reviewer", "", me))
    assert client.get("/settings/away").status_code == 200
    saved = client.post("/settings/away", {"delegate": cover.username, "ends_at": "2099-01-01T09:00", "note": ""})
    assert saved.status_code == 302
    away = Away.objects.get(user=me)
    assert away.delegate == cover and away.ends_at.year == 2099
    inbox = client.get("/").content.decode()
    assert 'id="away-banner"' in inbox and cover.username in inbox
    refused = client.post("/settings/away", {"delegate": me.username})
    assert refused.status_code == 422 and "yourself" in refused.content.decode()
    client.post("/settings/away", {"clear": "1"})
    assert not Away.objects.filter(user=me).exists()


def test_the_receivers_page_shows_the_hand_off_note_and_whom_it_was_meant_for():
    """The note a lead or a delegating reviewer wrote was recorded but shown nowhere; and when an
    out-of-office sent the task on, nobody was told whom it had been meant for."""
    away, cover, lead = person(), person(), person("lead")
    assignment.away_set(actor=away, delegate=cover, note="holiday")
    task = task_make()
    assignment.task_reassign(actor=lead, task=task, to_user=away, note="Please check the payslip dates")
    page = console_client(Persona(cover.username, "reviewer", "", cover)).get(f"/tasks/{task.pk}/")
    html = page.content.decode()
    handoff = html.split('id="last-handoff"', 1)[1].split("</div>", 1)[0]
    assert "Please check the payslip dates" in handoff
    assert f"meant for <strong>{away.username}</strong>, who is away" in handoff


def test_a_hand_off_note_quoting_a_hidden_value_is_masked_for_who_may_not_see_it():
    values = {"applicant": {"name": "Grace", "country": "US", "date_of_birth": "1906-12-09"}}
    task = task_make(graph="kyc_onboarding", node="compliance_review", payload={"title": "KYC"}, values=values)
    reviewer, admin = person(), person("admin")
    assignment.task_reassign(actor=admin, task=task, to_user=reviewer, note="born 1906-12-09, checked")
    html = console_client(Persona(reviewer.username, "reviewer", "", reviewer)).get(f"/tasks/{task.pk}/")
    note = html.content.decode().split('id="handoff-note"', 1)[1].split("</blockquote>", 1)[0]
    assert "1906-12-09" not in note and "checked" in note
