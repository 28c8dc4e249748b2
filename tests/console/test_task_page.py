"""The task page and its decision form, server side: an outside tester's findings (a submit after the session
ended, the reason's length, the final approver's rule, the reason label, "was due", prefilled edits, field
messages, a refused submit without JavaScript). The browser halves are in test_task_page_browser.py."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from html import unescape
from urllib.parse import urlencode

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from approvals.models import ApprovalTask, Decision, TaskStatus
from approvals.payloads import REASON_MAX_CHARS
from approvals.tokens import token_issue
from console.decision_panel import decision_panel_for
from demo.graphs.loan_approval import LoanState
from runtime import runs
from runtime.checkpointer import checkpointer_get
from runtime.executor import run_execute
from runtime.models import Effect, EffectStatus, Run, RunKind, RunStatus
from runtime.runs import PendingInterrupt, RunOutcome
from runtime.state_schema import json_schema_for
from tests.approvals.guards import user_make
from tests.conftest import ApiClient, runs_settle
from tests.console.conftest import console_client, console_decide
from tests.factories import decision_make, loan_gate, task_decided, task_make, thread_make

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def loan_task():
    return task_make(metadata={"case": f"T-{uuid.uuid4().hex[:6]}"})


def _page(persona, task) -> str:
    return unescape(console_client(persona).get(f"/tasks/{task.pk}/").content.decode())


def _field_error(html: str, input_id: str) -> str:
    """The error shown next to an input (its aria-describedby paragraph, or the field's own error line)."""
    field = html.split(f'id="{input_id}"', 1)[1].split("</div>", 1)[0]
    found = re.search(r'class="field-error"[^>]*>([^<]*)<', field)
    return found.group(1) if found else ""


# --- 1: a submit after the session ended ---------------------------------------------------------------


def test_an_htmx_post_after_sign_out_is_answered_in_place_and_records_nothing(loan_task):
    """It answered with HX-Redirect to the sign-in page: the whole page went, with what was typed."""
    response = Client().post(
        f"/tasks/{loan_task.pk}/decide",
        {"decision": "reject", "reason": "a long reason"},
        headers={"HX-Request": "true", "HX-Current-URL": f"http://testserver/tasks/{loan_task.pk}/"},
    )
    assert response.status_code == 401
    assert "HX-Redirect" not in response and "HX-Location" not in response
    assert response["HX-Retarget"] == "#session-notice" and response["HX-Reswap"] == "innerHTML"
    html = unescape(response.content.decode())
    assert "signed out" in html and "nothing was recorded" in html.lower()
    link = re.search(r'<a [^>]*href="(/accounts/login/[^"]*)"[^>]*>', html)
    assert link and 'target="_blank"' in link.group(0) and 'rel="noopener"' in link.group(0)
    assert link.group(1) == "/accounts/login/?" + urlencode({"next": f"/tasks/{loan_task.pk}/"})
    assert not Decision.objects.filter(task=loan_task).exists()


def test_a_plain_post_after_sign_out_signs_in_saying_nothing_was_recorded_and_returns_to_the_task(personas, loan_task):
    """Without JavaScript the sign-in page said nothing, and signing in went to a GET of .../decide."""
    client = Client()
    response = client.post(f"/tasks/{loan_task.pk}/decide", {"decision": "reject", "reason": "a long reason"})
    assert response.status_code == 302
    page = f"/tasks/{loan_task.pk}/"
    assert response["Location"] == "/accounts/login/?" + urlencode({"next": page, "unrecorded": "decision"})
    sign_in = unescape(client.get(response["Location"]).content.decode())
    said = re.search(r'<p [^>]*id="unrecorded"[^>]*>(.*?)</p>', sign_in, re.S)
    assert said and "your decision was NOT recorded" in re.sub(r"<[^>]+>", "", said.group(1))
    assert f'name="next" value="{page}"' in sign_in
    signed_in = client.post(
        "/accounts/login/", {"username": personas["reviewer"].username, "password": "gatehouse", "next": page}
    )
    assert signed_in.status_code == 302 and signed_in["Location"] == page
    assert client.get(page).status_code == 200
    assert not Decision.objects.filter(task=loan_task).exists()


def test_a_plain_post_after_sign_out_returns_to_the_page_the_form_was_on(loan_task):
    on = f"/tasks/{loan_task.pk}/?tab=state"
    response = Client().post(
        f"/tasks/{loan_task.pk}/decide", {"decision": "approve"}, headers={"Referer": f"http://testserver{on}"}
    )
    assert response["Location"] == "/accounts/login/?" + urlencode({"next": on, "unrecorded": "decision"})
    elsewhere = Client().post(
        f"/tasks/{loan_task.pk}/decide", {"decision": "approve"}, headers={"Referer": "https://evil.example/x"}
    )
    assert urlencode({"next": f"/tasks/{loan_task.pk}/"}) in elsewhere["Location"]


def test_the_page_has_the_place_a_signed_out_answer_goes(personas, loan_task):
    assert 'id="session-notice"' in _page(personas["reviewer"], loan_task)


def test_an_htmx_get_after_sign_out_still_reloads_to_sign_in():
    response = Client().get("/", headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/?graph=x"})
    assert response["HX-Redirect"] == "/accounts/login/?next=%2F%3Fgraph%3Dx"


# --- 3: the reason's length ------------------------------------------------------------------------------


def test_the_reason_input_stops_where_every_surface_does(personas, loan_task):
    html = _page(personas["reviewer"], loan_task)
    reason = html.split('id="f-reason"', 1)[1].split(">", 1)[0]
    assert f'maxlength="{REASON_MAX_CHARS}"' in reason
    assert REASON_MAX_CHARS == 4000  # as comments and replay, fork and cancel reasons


def test_a_reason_over_the_limit_is_refused_naming_reason_and_kept(personas, loan_task):
    """A 5,000-character reason was accepted from the console (the API stopped at 4,000)."""
    long = "x" * (REASON_MAX_CHARS + 1)
    response = console_decide(console_client(personas["reviewer"]), loan_task, decision="reject", reason=long)
    assert response.status_code == 422
    html = unescape(response.content.decode())
    assert "at most 4000 characters" in _field_error(html, "f-reason")
    assert long in html  # what was typed stays in the input
    assert not Decision.objects.filter(task=loan_task).exists()
    at_limit = console_decide(console_client(personas["reviewer"]), loan_task, decision="reject", reason="x" * 4000)
    assert at_limit.status_code == 201


def test_the_api_refuses_a_reason_over_the_limit_naming_reason(personas, loan_task):
    api = personas["reviewer"].client
    body = {"decision": "reject", "reason": "x" * (REASON_MAX_CHARS + 1), "checkpoint_id": loan_task.checkpoint_id}
    response = api.post(f"/api/tasks/{loan_task.pk}/decision", body)
    assert response.status_code == 422
    assert "reason" in response.content.decode()
    assert not Decision.objects.filter(task=loan_task).exists()


# --- 7: the final approval of a multi-approver task ------------------------------------------------------


def test_a_reviewer_is_told_the_last_approval_needs_the_approver_role_and_is_not_offered_approve(personas):
    """The page said "waiting for 1 more from other approvers" and offered Approve; the submit was refused."""
    task = task_make(payload=loan_gate(required_approvals=2))
    decision_make(task, personas["reviewer"].user, "approve")
    html = _page(personas["reviewer2"], task)
    assert "the last approval needs the approver role" in html
    assert "waiting for 1 more from other approvers" not in html
    assert 'name="decision" value="approve"' not in html
    assert 'name="decision" value="reject"' in html  # a rejection is still theirs to give
    # A submit of Approve anyway (a stale form) is refused at the outcome, saying why, and records nothing.
    response = console_decide(console_client(personas["reviewer2"]), task, decision="approve")
    assert response.status_code == 422
    assert "approver role" in unescape(response.content.decode())
    assert Decision.objects.filter(task=task).count() == 1


def test_an_approver_is_offered_the_last_approval(personas):
    task = task_make(payload=loan_gate(required_approvals=2))
    decision_make(task, personas["reviewer"].user, "approve")
    html = _page(personas["approver"], task)
    assert 'name="decision" value="approve"' in html
    assert "waiting for 1 more from other approvers" in html
    assert "needs the approver role" not in html


def test_a_reviewer_may_give_an_earlier_approval(personas):
    html = _page(personas["reviewer"], task_make(payload=loan_gate(required_approvals=2)))
    assert 'name="decision" value="approve"' in html and "needs the approver role" not in html


def test_the_threads_starter_is_told_separation_of_duties_keeps_the_approval_from_them(personas):
    """The page offered Approve to the person who started the thread, and the submit was refused (403)."""
    starter = personas["approver"]
    task = task_make(payload={**loan_gate(), "separation_of_duties": True}, created_by=starter.user)
    html = _page(starter, task)
    assert 'name="decision" value="approve"' not in html
    assert "Approve is not offered: you started this thread, so you cannot give its final approval" in html
    assert 'name="decision" value="reject"' in html
    # Anyone else who may decide it is offered Approve.
    assert 'name="decision" value="approve"' in _page(personas["reviewer"], task)
    response = console_decide(console_client(starter), task, decision="approve")
    assert response.status_code == 422 and "you started this thread" in unescape(response.content.decode())
    assert not Decision.objects.filter(task=task).exists()


def test_the_api_task_view_says_what_keeps_an_approval_from_the_caller(personas):
    """The console said it beforehand; the API's task view did not, so a client learnt it from a 403."""
    task = task_make(payload=loan_gate(required_approvals=2))
    decision_make(task, personas["reviewer"].user, "approve")
    refused = personas["reviewer2"].client.get(f"/api/tasks/{task.pk}").json()
    assert refused["can_decide"] is True and refused["approvals_remaining"] == 1
    assert refused["approve_refused"] == {
        "rule": "quorum.final_approver",
        "message": "the final approval of a multi-approver task needs the approver role",
    }
    assert personas["approver"].client.get(f"/api/tasks/{task.pk}").json()["approve_refused"] is None
    # The one who signed already may not decide again: nothing to refuse, nothing offered.
    signed = personas["reviewer"].client.get(f"/api/tasks/{task.pk}").json()
    assert signed["can_decide"] is False and signed["approve_refused"] is None
    # The starter of a separation-of-duties gate, by the service's rule and words.
    starter = personas["approver"]
    sod = task_make(payload={**loan_gate(), "separation_of_duties": True}, created_by=starter.user)
    view = starter.client.get(f"/api/tasks/{sod.pk}").json()
    assert view["approve_refused"]["rule"] == "separation_of_duties.starter"
    answer = starter.client.post(
        f"/api/tasks/{sod.pk}/decision", {"decision": "approve", "checkpoint_id": sod.checkpoint_id}
    )
    assert answer.status_code == 403 and view["approve_refused"]["message"] in answer.content.decode()


# --- 11: the reason label follows the task's decisions -----------------------------------------------------


def test_the_reason_label_names_only_decisions_the_task_offers(personas):
    """An approve/reject task read "Reason (recorded in the audit trail; required to reject or edit)"."""
    task = task_make(payload=loan_gate(decisions=["approve", "reject"]))
    label = _page(personas["reviewer"], task).split('for="f-reason"', 1)[1].split("</label>", 1)[0]
    assert "required to reject" in label and "edit" not in label


# --- 15: "was due" only for a task decided after its due time ---------------------------------------------


def test_a_task_decided_before_its_due_time_does_not_say_was_due(personas):
    due = timezone.now() + timedelta(days=2)
    task = task_decided(by=personas["reviewer"].user, due_at=due)
    head = _page(personas["reviewer"], task).split('id="task-head"', 1)[1].split("</p>", 1)[0]
    assert "was due" not in head
    assert f"decided before its due time ({due:%Y-%m-%d %H:%M} UTC)" in head


def test_a_task_decided_after_its_due_time_says_was_due(personas):
    due = timezone.now() - timedelta(hours=3)
    task = task_decided(by=personas["reviewer"].user, due_at=due)
    head = _page(personas["reviewer"], task).split('id="task-head"', 1)[1].split("</p>", 1)[0]
    assert f"was due {due:%Y-%m-%d %H:%M} UTC" in head


# --- 16: every editable field is prefilled ------------------------------------------------------------------


def test_an_editable_value_the_state_does_not_hold_is_prefilled_from_the_proposed_action(loan_task):
    """The action proposed term_months 24 (the graph's default, not in the state): the input was empty."""
    form = decision_panel_for(loan_task, {"amount": 20000}, json_schema_for(LoanState))
    shown = {f.name: f.shown for f in form.state_fields}
    assert shown == {"edits.amount": "20000", "edits.term_months": "24"}


def test_an_untouched_prefilled_value_is_not_an_edit(personas, loan_task):
    page = _page(personas["reviewer"], loan_task)
    sent = {name: re.search(rf'name="{re.escape(name)}"[^>]*value="([^"]*)"', page).group(1) for name in EDITS}
    assert sent == {"edits.amount": "20000", "edits.term_months": "24"}  # as the browser sends them back
    response = console_decide(console_client(personas["reviewer"]), loan_task, decision="approve", **sent)
    assert response.status_code == 201, response.content.decode()[:2000]
    assert Decision.objects.get(task=loan_task).outcome == "approve"  # not "edit": nothing was changed


EDITS = ("edits.amount", "edits.term_months")


# --- 17: a field's message in words -------------------------------------------------------------------------


def test_a_state_value_out_of_range_is_named_in_words_at_its_field(personas, loan_task):
    """-5 as the amount gave Pydantic's "Input should be greater than or equal to 1"."""
    response = console_decide(
        console_client(personas["reviewer"]), loan_task, decision="edit", reason="lower", **{"edits.amount": "-5"}
    )
    assert response.status_code == 422
    assert _field_error(unescape(response.content.decode()), "f-edits-amount") == "Amount must be at least 1"


# --- 18: a refused submit without JavaScript ---------------------------------------------------------------------


def test_a_refused_plain_submit_goes_back_to_the_task_page_saying_so_and_keeping_the_reason(personas, loan_task):
    """It rendered a 409 at .../decide ("This task is decided; it can no longer be decided."): the reason was
    lost, it did not say *your* submission was refused, and a reload posted again."""
    decision_make(loan_task, personas["reviewer2"].user, "approve")
    client = console_client(personas["reviewer"])
    response = console_decide(client, loan_task, htmx=False, decision="reject", reason="too risky: income unverified")
    assert response.status_code == 303
    assert response["Location"] == f"/tasks/{loan_task.pk}/#decision-panel"  # a GET, at the panel that says why
    page = f"/tasks/{loan_task.pk}/"
    html = unescape(client.get(page).content.decode())
    assert "Your decision was not recorded: this task is decided" in html
    assert "too risky: income unverified" in html
    assert Decision.objects.filter(task=loan_task).count() == 1
    # Once shown, it is gone: a reload of the task page is the plain page.
    again = unescape(client.get(page).content.decode())
    assert "Your decision was not recorded" not in again and "too risky" not in again


def test_a_plain_submit_with_a_field_error_goes_back_with_the_error_and_what_was_typed(personas, loan_task):
    client = console_client(personas["reviewer"])
    response = console_decide(client, loan_task, htmx=False, decision="reject", reason="", password="secret-pw")
    assert response.status_code == 303
    html = unescape(client.get(response["Location"]).content.decode())
    assert "Your decision was not recorded" in html
    assert "a reason is required to reject" in _field_error(html, "f-reason")
    assert 'value="reject" checked' in html
    assert "secret-pw" not in html  # a password is never written back into the page
    assert loan_task.decisions.count() == 0
    loan_task.refresh_from_db()
    assert loan_task.status == TaskStatus.PENDING


def test_a_refused_plain_submit_on_a_stale_view_keeps_the_words_not_the_values(personas, loan_task):
    from approvals.models import ApprovalTask
    from runtime.models import Thread

    newer = uuid.uuid4().hex
    ApprovalTask.objects.filter(pk=loan_task.pk).update(checkpoint_id=newer)
    Thread.objects.filter(pk=loan_task.thread_id).update(checkpoint_id=newer)
    client = console_client(personas["reviewer"])
    fields = {"decision": "edit", "reason": "lower it", "edits.amount": "777"}
    response = console_decide(client, loan_task, htmx=False, **fields)
    assert response.status_code == 303
    html = unescape(client.get(f"/tasks/{loan_task.pk}/").content.decode())
    assert 'id="stale-notice"' in html and "This page now shows the task as it is" in html
    assert ">lower it</textarea>" in html
    assert 'value="777"' not in html  # typed for a state that has moved on


def test_an_htmx_submit_on_a_task_decided_meanwhile_keeps_the_reason_to_copy(personas, loan_task):
    decision_make(loan_task, personas["reviewer2"].user, "approve")
    response = console_decide(console_client(personas["reviewer"]), loan_task, decision="reject", reason="my reason")
    assert response.status_code == 409
    html = unescape(response.content.decode())
    assert "Your decision was not recorded: this task is decided" in html
    assert 'id="kept-reason"' in html and ">my reason</textarea>" in html


def test_the_api_task_view_says_someone_elses_claim_holds_the_decision(personas):
    """The task view said can_decide: true while another reviewer held the claim; the decision was then a 409."""
    task = task_make()
    holder, other = personas["reviewer"], personas["approver"]
    assert holder.client.post(f"/api/tasks/{task.pk}/claim").status_code in (200, 201)
    seen = other.client.get(f"/api/tasks/{task.pk}").json()
    assert seen["can_decide"] is False and seen["claimed_by"] == holder.username
    answer = other.client.post(
        f"/api/tasks/{task.pk}/decision", {"decision": "approve", "checkpoint_id": task.checkpoint_id}
    )
    assert answer.status_code == 409 and answer.json()["error"]["field"] == "claim"
    own = holder.client.get(f"/api/tasks/{task.pk}").json()
    assert own["can_decide"] is True and own["claimed_by"] is None


def test_the_api_lists_a_threads_effects_with_an_unknown_outcome_apart_from_a_failed_one(personas):
    """An API client could tell an action that may have happened ("unknown") from one that did not ("failed")
    only by parsing a run's error text; GET /api/threads/{id}/effects lists the ledger's rows."""
    task = task_make()
    common = {"thread_id": task.thread_id, "name": "disburse", "args": {"amount": 20000}, "calls": 1}
    Effect.objects.create(key=f"k-{task.pk}-1", status=EffectStatus.UNKNOWN, error="BankNoAnswer()", **common)
    Effect.objects.create(key=f"k-{task.pk}-2", status=EffectStatus.DONE, result={"status": "paid"}, **common)
    listed = personas["operator"].client.get(f"/api/threads/{task.thread_id}/effects")
    assert listed.status_code == 200
    rows = listed.json()
    assert [(r["key"], r["status"], r["result"]) for r in rows] == [
        (f"k-{task.pk}-1", "unknown", None),
        (f"k-{task.pk}-2", "done", {"status": "paid"}),
    ]
    assert all("args" not in r for r in rows)  # what the call was given is not shown here, masked or not
    # Scoped as the thread is: a reviewer of another graph learns nothing.
    kyc_only = ApiClient(token_issue(user=user_make("reviewer", "kyc_onboarding")))
    assert kyc_only.get(f"/api/threads/{task.thread_id}/effects").status_code == 404


def test_the_api_masks_an_effects_result_as_the_threads_state_for_a_role_without_reveal_rights(personas):
    kyc = task_make(graph="kyc_onboarding", node="identity_review")
    born = {"applicant": {"date_of_birth": "1990-01-01", "name": "Ada"}}
    Effect.objects.create(key=f"k-{kyc.pk}", thread_id=kyc.thread_id, name="open_account", result=born, calls=1)
    path = f"/api/threads/{kyc.thread_id}/effects"
    [blind] = personas["reviewer"].client.get(path).json()
    assert blind["result"] == {"applicant": {"date_of_birth": "•••• redacted", "name": "Ada"}}
    assert "1990-01-01" not in personas["reviewer"].client.get(path).content.decode()
    [seeing] = personas["auditor"].client.get(path).json()
    assert seeing["result"] == born


@pytest.mark.parametrize(
    "run_status,uncertain",
    [
        (RunStatus.CANCELLED, True),  # an operator cancelled the run mid-payment
        (RunStatus.FAILED, True),  # its worker died once too often
        (RunStatus.RUNNING, False),  # still in flight: a worker may yet record it
        (RunStatus.QUEUED, False),  # lapsed and re-queued: the next attempt calls again under the key
    ],
)
def test_a_call_whose_run_ended_mid_call_reads_as_an_unknown_outcome(personas, run_status, uncertain):
    """An action whose process died mid-call stayed "started, no result yet" for ever: as uncertain as an
    ``unknown`` outcome (the bank may have paid), and now said so, in the console and the API."""
    task = task_make()
    run = Run.objects.create(thread_id=task.thread_id, kind=RunKind.RESUME, status=run_status)
    try:
        Effect.objects.create(
            key=f"k-{task.pk}", thread_id=task.thread_id, run=run, name="disburse", args={"amount": 1}, calls=1
        )
        [row] = personas["operator"].client.get(f"/api/threads/{task.thread_id}/effects").json()
        html = unescape(console_client(personas["operator"]).get(f"/threads/{task.thread_id}/").content.decode())
    finally:
        # A running run without a lease no sweeper ever ends, and a queued one the live worker would run:
        # later tests in this process that wait for runs to settle (test_live_lists) waited on it and failed.
        runs_settle([run.pk])
    assert (row["status"], row["uncertain"]) == ("started", uncertain)
    assert ("outcome unknown: its run stopped mid-call" in html) is uncertain
    assert ("started, no result yet" in html) is not uncertain
    assert ('class="status status-unknown"' in html) is uncertain


def test_an_effect_with_an_unknown_outcome_is_uncertain_and_a_done_one_is_not(personas):
    task = task_make()
    common = {"thread_id": task.thread_id, "name": "disburse", "args": {"amount": 1}, "calls": 1}
    Effect.objects.create(key=f"k-{task.pk}-1", status=EffectStatus.UNKNOWN, **common)
    Effect.objects.create(key=f"k-{task.pk}-2", status=EffectStatus.DONE, result={"paid": 1}, **common)
    Effect.objects.create(key=f"k-{task.pk}-3", status=EffectStatus.FAILED, **common)
    rows = personas["operator"].client.get(f"/api/threads/{task.thread_id}/effects").json()
    assert [(r["status"], r["uncertain"]) for r in rows] == [("unknown", True), ("done", False), ("failed", False)]


# --- a task paused at a state the graph cannot load ---------------------------------------------------------


def test_a_task_at_a_state_the_graph_cannot_load_says_why_as_the_thread_page_does(personas, monkeypatch):
    """The thread page said why (commit db304df); the task page showed the stored values without a word."""
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: None)  # the run is executed here, in-process
    thread = thread_make(graph="budget_review")
    with transaction.atomic():
        start = runs.run_enqueue(thread=thread, kind=RunKind.START, input={"subject": "unloadable", "amount": 5})
    run_execute(run_id=str(start.id))  # the graph's state model refuses the subject: no node ran
    config = {"configurable": {"thread_id": str(thread.id), "checkpoint_ns": ""}}
    checkpoint = checkpointer_get().get_tuple(config).config["configurable"]["checkpoint_id"]
    # Paused at that checkpoint, as a thread paused before its graph's model changed is.
    interrupt = PendingInterrupt(
        interrupt_id=uuid.uuid4().hex, value=loan_gate(), node="review", checkpoint_id=checkpoint
    )
    outcome = RunOutcome(status=RunStatus.INTERRUPTED, checkpoint_id=checkpoint, values={}, interrupts=[interrupt])
    with transaction.atomic():
        retry = runs.run_enqueue(thread=thread, kind=RunKind.RETRY)
        runs.run_finish(run=runs.run_claim(run_id=str(retry.id), worker="tests"), outcome=outcome)
    task = ApprovalTask.objects.get(thread=thread, interrupt_id=interrupt.interrupt_id)
    task_page = _page(personas["operator"], task)
    thread_page = unescape(console_client(personas["operator"]).get(f"/threads/{thread.id}/").content.decode())
    said = re.search(r'<p [^>]*id="state-unreadable"[^>]*>([^<]*)</p>', task_page)
    assert said, "the task page does not say why its state is shown as stored"
    assert said.group(1).startswith("The graph cannot load this state: subject: this subject cannot be loaded")
    assert said.group(0) in thread_page  # the same words as the thread page's
