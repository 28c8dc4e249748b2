"""What a reviewer's page shows as the task changes under it, and keyboard use of the inbox, in Chromium."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import expect

from approvals import claims
from approvals.audit import audit_record
from approvals.models import ApprovalTask, AuditAction, BulkAction
from runtime.models import Run, RunKind, RunStatus
from tests.conftest import loan_input, pending_tasks, thread_start, wait_for
from tests.console.test_browser import WAIT_MS, _live, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import decision_make, task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_a_stale_claim_refusal_goes_once_the_claimer_decides(browser, server, personas):  # noqa: F811
    """ "reviewer2 has claimed this task until 11:48 UTC; ask them…" stayed above "no longer pending"."""
    task = task_make(metadata={"case": f"C-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    _live(page)
    page.get_by_label("Approve", exact=True).check()
    page.get_by_label("Reason").fill("looks fine")
    # Claimed meanwhile, before its live push arrives (a claim the panel has not heard of: written without
    # its event). One the page knows of disables the form instead (test_task_ui_browser).
    claims.claim_put(task=task, user=personas["reviewer2"].user)
    page.get_by_role("button", name="Submit decision").click()
    expect(page.locator("#claim-error")).to_contain_text(f"{personas['reviewer2'].username} has claimed this task")

    decision_make(task, personas["reviewer2"].user)  # the claimer decides; the page hears it live
    expect(page.locator("#task-head-status")).not_to_have_text("Pending")
    expect(page.locator("#decision-panel .closed-live-note")).to_be_visible()
    expect(page.locator("#claim-error")).to_be_hidden()
    page.context.close()


def test_escape_in_the_inbox_search_leaves_the_box_and_keeps_the_filter(browser, server, personas):  # noqa: F811
    """Escape cleared the search and reloaded the whole inbox under a keyboard user's next Enter."""
    case = f"E-{uuid.uuid4().hex[:6]}"
    task = task_make(metadata={"case": case})
    task_make()  # a task the search does not match
    page = _sign_in(browser, server, personas["reviewer"], f"/?q={case}")
    _live(page)
    rows = page.locator("#inbox-results tr[data-task-id]")
    expect(rows).to_have_count(1)
    search = page.locator("#f-q")
    search.focus()
    page.keyboard.press("Escape")
    expect(search).not_to_be_focused()
    expect(search).to_have_value(case)
    # The keyboard goes on with the filtered list: the first row is the one searched for.
    page.keyboard.press("j")
    expect(rows).to_have_count(1)
    expect(page.locator("#inbox-results tr.is-selected")).to_have_attribute("data-task-id", str(task.pk))
    page.context.close()


def test_bulk_approve_asks_first_naming_the_count_and_whose_tasks(browser, server, personas):  # noqa: F811
    """One click on "Approve selected" decided every selected task (each could pay a loan) with no question."""
    case = f"K-{uuid.uuid4().hex[:6]}"
    mine, theirs = task_make(metadata={"case": case}), task_make(metadata={"case": case})
    ApprovalTask.objects.filter(pk=theirs.pk).update(
        assigned_user=personas["reviewer2"].user, assigned_at=timezone.now()
    )
    page = _sign_in(browser, server, personas["approver"], f"/?q={case}")
    _live(page)
    for task in (mine, theirs):
        page.locator(f'#inbox-results input[name="task_ids"][value="{task.pk}"]').check()
    asked: list[str] = []

    def answer(accept: bool) -> None:
        def on_dialog(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        page.once("dialog", on_dialog)

    answer(False)
    page.get_by_role("button", name="Approve selected").click()
    wait_for(lambda: asked, timeout=10, what="the confirmation")
    assert "Approve 2 tasks at once?" in asked[0]
    assert f"1 of them is assigned to someone else: {personas['reviewer2'].username} (1)" in asked[0]
    expect(page.locator("#bulk-selected")).to_have_text("2 tasks selected")
    assert not BulkAction.objects.filter(task_ids__contains=[str(mine.pk)]).exists()  # declined: nothing decided

    answer(True)
    page.get_by_role("button", name="Approve selected").click()
    page.wait_for_url("**/bulk/*/")
    assert len(asked) == 2
    page.context.close()


def test_the_time_travel_buttons_follow_the_run_in_progress_live(browser, server, personas):  # noqa: F811
    """They stayed disabled under "A run is in progress… (reload this page)" after the run had finished."""
    operator = personas["operator"]
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000), case=f"T-{uuid.uuid4().hex[:6]}")
    pending_tasks(operator, thread["id"])  # paused at its gate: no run in progress
    page = _sign_in(browser, server, operator, f"/threads/{thread['id']}/")
    _live(page)
    replay = page.get_by_role("button", name="Replay from here")
    expect(replay).to_be_enabled()

    # A run the worker holds (leased well past the test), then its end: each is published as the worker does.
    run = Run.objects.create(
        thread_id=thread["id"],
        kind=RunKind.RESUME,
        status=RunStatus.RUNNING,
        lease_owner="test",
        lease_expires_at=timezone.now() + timedelta(hours=1),
    )
    _published(thread["id"], AuditAction.RUN_CLAIMED)
    expect(page.locator("#time-travel-busy")).to_be_visible()
    expect(replay).to_be_disabled()
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED, finished_at=timezone.now())
    _published(thread["id"], AuditAction.RUN_CANCELLED)
    expect(page.locator("#time-travel-busy")).to_have_count(0)
    expect(replay).to_be_enabled()
    expect(page.get_by_role("button", name="Fork from here")).to_be_enabled()
    page.context.close()


def _published(thread_id: Any, action: str) -> None:
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label="test",
            action=action,
            subject_type="thread",
            subject_id=thread_id,
            thread_id=thread_id,
            graph="loan_approval",
        )


def test_a_page_signed_out_in_another_tab_says_so_at_once_and_goes_live_again(browser, server, personas):  # noqa: F811
    """A sign-out in another tab closed this page's socket and its indicator said "reconnecting…" for ever;
    the reader learnt of it only when a submit was refused."""
    task = task_make()
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    _live(page)
    other = page.context.new_page()
    other.goto(f"{server}/")
    other.get_by_role("button", name="Sign out").click()
    expect(page.locator("#live-indicator")).to_have_text("signed out")
    notice = page.locator("#session-notice #signed-out-live")
    expect(notice).to_contain_text("You were signed out")
    expect(notice.get_by_role("link", name="Sign in again in a new tab")).to_have_attribute(
        "href", f"/accounts/login/?next=%2Ftasks%2F{task.pk}%2F"
    )
    # Signed in again in the other tab: back on this one, the page goes live and the notice goes.
    other.goto(f"{server}/accounts/login/")
    other.get_by_label("Username").fill(personas["reviewer"].username)
    other.get_by_label("Password").fill("gatehouse")
    other.get_by_role("button", name="Sign in").click()
    expect(other.locator("header .who")).to_contain_text(personas["reviewer"].username)
    page.evaluate("window.dispatchEvent(new Event('focus'))")  # the reader comes back to this tab
    _live(page)
    expect(notice).to_have_count(0)
    page.context.close()


def test_a_filter_changed_after_sign_out_keeps_a_typed_bulk_reason_on_the_page(browser, server, personas):  # noqa: F811
    """An outside tester typed a bulk reason, was signed out in another tab, changed a filter: the inbox went to
    the sign-in page and the reason was gone. The read is refused in place, the reason stays, and once signed in
    again the same filter applies. With nothing typed, a signed-out filter change still goes to sign in."""
    case = f"S-{uuid.uuid4().hex[:6]}"
    task = task_make(metadata={"case": case})
    page = _sign_in(browser, server, personas["reviewer"], f"/?q={case}")
    _live(page)
    page.locator("#bulk-reason").fill("checked against the ledger")
    other = page.context.new_page()
    other.goto(f"{server}/")
    other.get_by_role("button", name="Sign out").click()
    expect(page.locator("#live-indicator")).to_have_text("signed out")
    inbox = page.url
    page.locator("#f-due").select_option(index=1)
    notice = page.locator("#session-notice #signed-out-live")
    expect(notice).to_contain_text("You were signed out")
    assert page.url == inbox
    expect(page.locator("#bulk-reason")).to_have_value("checked against the ledger")
    # Signed in again in the other tab: the filter applies here, and the reason is still there.
    other.goto(f"{server}/accounts/login/")
    other.get_by_label("Username").fill(personas["reviewer"].username)
    other.get_by_label("Password").fill("gatehouse")
    other.get_by_role("button", name="Sign in").click()
    expect(other.locator("header .who")).to_contain_text(personas["reviewer"].username)
    page.locator("#f-due").select_option(index=0)
    # The answer has been swapped in (its URL pushed; the row was on the page before it): a sign-out while it
    # is still under way would end its session mid-request, another test's case (test_views).
    expect(page).to_have_url(re.compile(r"[?&]due=(&|$)"))
    expect(page.locator(f'#inbox-results tr[data-task-id="{task.pk}"]')).to_have_count(1)
    expect(page.locator("#bulk-reason")).to_have_value("checked against the ledger")
    # Nothing typed: signed out again, a filter change goes to the sign-in page as before.
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url("**/accounts/login/**")  # the sign-out answered: the session is gone
    page.locator("#bulk-reason").fill("")
    page.locator("#f-due").select_option(index=1)
    page.wait_for_url("**/accounts/login/**")
    page.context.close()
