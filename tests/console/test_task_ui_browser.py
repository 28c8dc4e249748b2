"""Confirmations, claims and focus on the task and thread pages, in Chromium (an outside review's findings)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from approvals import claims
from approvals.models import ApprovalTask, TaskClaim
from runtime.models import Branch, Run
from tests.conftest import loan_input, pending_tasks, scaled, thread_start, wait_for
from tests.console.test_browser import WAIT_MS, _live, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import decision_make, loan_gate, task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _answer(page: Any, accept: bool, asked: list[str]) -> None:
    def on_dialog(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", on_dialog)


def test_replay_asks_first_and_a_dismissed_question_starts_no_run(browser, server, personas):  # noqa: F811
    """ "Replay from here" re-ran the payment at once: a second real payment, nothing asked."""
    operator = personas["operator"]
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000), case=f"R-{uuid.uuid4().hex[:6]}")
    pending_tasks(operator, thread["id"])
    runs_before = Run.objects.filter(thread_id=thread["id"]).count()
    page = _sign_in(browser, server, operator, f"/threads/{thread['id']}/")
    _live(page)
    page.locator("#replay-reason").fill("try again")
    asked: list[str] = []
    _answer(page, False, asked)
    page.get_by_role("button", name="Replay from here").click()
    wait_for(lambda: asked, timeout=10, what="the confirmation")
    assert asked[0].startswith("Replay from this checkpoint?")
    page.wait_for_timeout(500)
    assert not Branch.objects.filter(thread_id=thread["id"]).exists()
    assert Run.objects.filter(thread_id=thread["id"]).count() == runs_before
    expect(page.locator("#replay-reason")).to_have_value("try again")
    page.context.close()


def test_c_never_releases_anothers_claim_and_the_button_asks_first(browser, server, personas):  # noqa: F811
    """An admin's "c" released a reviewer's claim, and the reviewer's page only said "Nobody is working"."""
    task = task_make(metadata={"case": f"C-{uuid.uuid4().hex[:6]}"})
    claims.task_claim(actor=personas["reviewer"].user, task_id=task.pk)
    holder = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    _live(holder)
    admin = _sign_in(browser, server, personas["admin"], f"/tasks/{task.pk}/")
    _live(admin)
    admin.locator("body").press("c")
    admin.wait_for_timeout(500)
    assert TaskClaim.objects.filter(task=task).exists()
    asked: list[str] = []
    _answer(admin, False, asked)
    admin.get_by_role("button", name="Release their claim").click()
    wait_for(lambda: asked, timeout=10, what="the confirmation")
    assert asked[0].startswith(f"Release {personas['reviewer'].username}'s claim?")
    admin.wait_for_timeout(500)
    assert TaskClaim.objects.filter(task=task).exists()

    _answer(admin, True, asked)
    admin.get_by_role("button", name="Release their claim").click()
    expect(holder.locator("#claim-released-note")).to_have_text(f"{personas['admin'].username} released your claim.")
    expect(holder.locator("#claim-box")).to_contain_text("Nobody is working on this task.")
    admin.context.close()
    holder.context.close()


def test_the_decision_form_waits_while_another_holds_the_claim_and_keeps_what_was_typed(
    browser,  # noqa: F811
    server,  # noqa: F811
    personas,
):
    """The form stayed enabled under someone else's claim and refused the filled-in decision (409)."""
    task = task_make(metadata={"case": f"W-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    _live(page)
    reason = page.get_by_label("Reason")
    reason.fill("half a thought")
    claims.task_claim(actor=personas["reviewer2"].user, task_id=task.pk)
    expect(reason).to_be_disabled()
    expect(page.get_by_role("button", name="Submit decision")).to_be_disabled()
    expect(page.locator("#claim-held-note")).to_contain_text(f"{personas['reviewer2'].username} has claimed this task")

    claims.task_release(actor=personas["reviewer2"].user, task_id=task.pk)
    expect(reason).to_be_enabled()
    expect(page.locator("#claim-held-note")).to_be_hidden()
    expect(reason).to_have_value("half a thought")
    page.context.close()


def test_the_decision_form_opens_when_another_reviewers_claim_lapses(browser, server, personas):  # noqa: F811
    """An outside QA's find: half a minute after a colleague's claim lapsed the page still said they held it and
    the form stayed locked until a reload; a lapsed claim refuses no one (docs/hand-offs.md), and no event says
    it lapsed."""
    task = task_make(metadata={"case": f"L-{uuid.uuid4().hex[:6]}"})
    claims.task_claim(actor=personas["reviewer2"].user, task_id=task.pk)
    TaskClaim.objects.filter(task_id=task.pk).update(expires_at=timezone.now() + timedelta(seconds=scaled(4)))
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    _live(page)
    reason = page.get_by_label("Reason")
    expect(reason).to_be_disabled()
    expect(page.locator("#claim-held-note")).to_contain_text(
        "the form opens again when the claim is released or lapses"
    )
    expect(reason).to_be_enabled(timeout=WAIT_MS)
    expect(page.locator("#claim-held-note")).to_be_hidden()
    expect(page.locator("#claim-box [data-claim-until]")).to_contain_text("lapsed at")
    reason.fill("the claim lapsed")
    page.get_by_role("radio", name="Approve", exact=True).check()
    page.get_by_role("button", name="Submit decision").click()
    wait_for(lambda: ApprovalTask.objects.get(pk=task.pk).status != "pending", what="the decision after the lapse")
    page.context.close()


def test_approve_is_withdrawn_live_once_another_approval_makes_the_readers_the_last(browser, server, personas):  # noqa: F811
    """An outside QA's find: after an approver gave a four-eyes task's first approval, the reviewer's Now panel
    said the last approval needs the approver role, yet the form still offered Approve, and submitting it was
    refused (422) with the reason typed."""
    task = task_make(payload=loan_gate(required_approvals=2), metadata={"case": f"Q-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    _live(page)
    approve = page.get_by_role("radio", name="Approve", exact=True)
    expect(approve).to_be_enabled()
    page.get_by_label("Reason").fill("looked fine to me")
    decision_make(task, personas["approver"].user)
    expect(page.locator("#quorum-waiting")).to_contain_text("the last approval needs the approver role")
    expect(approve).to_be_disabled()
    expect(page.locator("#approve-withheld")).to_contain_text("Approve is no longer offered")
    expect(page.get_by_label("Reason")).to_have_value("looked fine to me")
    expect(page.get_by_role("radio", name="Reject", exact=True)).to_be_enabled()
    page.context.close()


def test_a_refused_decision_puts_focus_on_the_first_invalid_field(browser, server, personas):  # noqa: F811
    """The 422's error showed with aria-invalid and role=alert, but focus was left on <body>."""
    reviewer = personas["reviewer"]
    thread = thread_start(personas["operator"], "loan_approval", loan_input(), case=f"F-{uuid.uuid4().hex[:6]}")
    [task] = pending_tasks(reviewer, thread["id"])
    page = _sign_in(browser, server, reviewer, f"/tasks/{task['id']}/")
    _live(page)
    page.locator("#f-edits-amount").fill("abc")
    page.get_by_label("Edit and approve", exact=True).check()
    page.get_by_label("Reason").fill("a typo")
    page.get_by_role("button", name="Submit decision").click()
    amount = page.locator("#f-edits-amount")
    expect(amount).to_have_attribute("aria-invalid", "true")
    expect(amount).to_be_focused()
    page.context.close()


def test_bulk_reject_asks_for_the_required_reason_before_the_confirmation(browser, server, personas):  # noqa: F811
    """ "Reject 2 tasks at once?" was asked first; the yes then failed with a 422 for the missing reason."""
    case = f"J-{uuid.uuid4().hex[:6]}"
    tasks = [task_make(metadata={"case": case}), task_make(metadata={"case": case})]
    page = _sign_in(browser, server, personas["approver"], f"/?q={case}")
    _live(page)
    for task in tasks:
        page.locator(f'#inbox-results input[name="task_ids"][value="{task.pk}"]').check()
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_role("button", name="Reject selected").click()
    reason = page.locator("#bulk-reason")
    expect(page.locator("#bulk-error [role=alert]")).to_have_text(
        "reason: a reason is required to reject the selected tasks"
    )
    expect(reason).to_have_attribute("aria-invalid", "true")
    expect(reason).to_be_focused()
    page.wait_for_timeout(300)
    assert asked == []

    reason.fill("duplicates")
    page.get_by_role("button", name="Reject selected").click()
    wait_for(lambda: asked, timeout=10, what="the confirmation")
    assert asked[0].startswith("Reject 2 tasks at once?")
    expect(reason).not_to_have_attribute("aria-invalid", "true")
    page.context.close()
