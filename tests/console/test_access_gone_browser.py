"""A task page whose reader loses access while it is open (an outside reviewer persona, in Chromium): the
live socket said the view is no longer available and closed 4403, but the decision form stayed usable, and
its submit answered 404 in place of the form: the typed reason was lost.

Reuses test_browser's daphne server and browser. Every wait is an ``expect`` bounded by the suite's time
factor (``expect``'s default, set by the browser fixture).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import connection
from playwright.sync_api import Page, expect

from approvals import users
from approvals.models import Decision, GraphAssignment
from tests.approvals.handoffs import person
from tests.console.test_browser import _live, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

REASON = "Income not verified against the payslips; " * 12


def _task_page_typed(browser, server) -> tuple[Page, object, object]:  # noqa: F811
    """A reviewer of two graphs on a task page of one of them, a rejection and its reason typed."""
    reviewer = person(graphs=("loan_approval", "kyc_onboarding"))  # still a reviewer of another graph after
    task = task_make()
    page = _sign_in(browser, server, SimpleNamespace(username=reviewer.username), f"/tasks/{task.pk}/")
    _live(page)
    page.get_by_label("Reject", exact=True).check()
    page.get_by_label("Reason").fill(REASON)
    page.locator("#comment-body").fill("a draft for the team")
    return page, reviewer, task


def test_a_decision_refused_for_lost_access_keeps_the_form_and_the_text_and_says_why(browser, server):  # noqa: F811
    page, reviewer, task = _task_page_typed(browser, server)
    # Withdrawn without its announcement reaching the page (a command in another process whose relay was down):
    # the page still offers the form, and its submit is the first to learn.
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {GraphAssignment._meta.db_table} WHERE user_id = %s AND graph = %s",
            [reviewer.pk, "loan_approval"],
        )
    page.get_by_role("button", name="Submit decision").click()
    notice = page.locator("#session-notice")
    expect(notice).to_contain_text("You no longer have access to this task")
    expect(notice).to_contain_text("nothing was recorded")
    expect(notice).to_contain_text("kept below so you can copy it")
    # The form is still there, with what was typed, in the page it was typed in.
    expect(page.get_by_label("Reason")).to_have_value(REASON)
    expect(page.get_by_label("Reject", exact=True)).to_be_checked()
    expect(page.locator("#comment-body")).to_have_value("a draft for the team")
    assert not Decision.objects.filter(task=task).exists()
    page.context.close()


def test_a_page_told_its_view_is_gone_disables_its_submits_and_keeps_the_text_copyable(browser, server):  # noqa: F811
    page, reviewer, task = _task_page_typed(browser, server)
    users.user_revoke(actor=users.CLI, user_id=reviewer.pk, graphs=["loan_approval"])
    expect(page.locator("#live-gone")).to_contain_text("no longer available")
    expect(page.locator("#live-indicator")).to_have_text("no access")
    expect(page.get_by_role("button", name="Submit decision")).to_be_disabled()
    expect(page.locator("#comment-submit")).to_be_disabled()
    # What was typed stays, in fields that are not disabled: it can be selected and copied.
    reason = page.get_by_label("Reason")
    expect(reason).to_have_value(REASON)
    expect(reason).to_be_enabled()
    reason.select_text()
    assert page.evaluate("(el) => el.value.substring(el.selectionStart, el.selectionEnd)", reason.element_handle())
    # Signing out still works: the header's form is not the view's.
    expect(page.get_by_role("button", name="Sign out")).to_be_enabled()
    assert not Decision.objects.filter(task=task).exists()
    page.context.close()


def test_a_submit_from_a_page_drawn_for_another_user_keeps_its_notice_and_the_text(browser, server):  # noqa: F811
    """The same path (the session notice) for a 409: the notice was cleared by the request's own end
    (console.js cleared it on any answer but a 401), so the page showed nothing at all."""
    page, _reviewer, task = _task_page_typed(browser, server)
    other = person(graphs=("loan_approval",))
    tab = page.context.new_page()  # the second tab: same cookies
    tab.goto(f"{server}/")
    tab.get_by_role("button", name="Sign out").click()
    tab.get_by_label("Username").fill(other.username)
    tab.get_by_label("Password").fill("gatehouse")
    tab.get_by_role("button", name="Sign in").click()
    expect(tab.locator("header .who")).to_contain_text(other.username)
    page.bring_to_front()
    page.get_by_role("button", name="Submit decision").click()
    notice = page.locator("#session-notice")
    expect(notice).to_contain_text(f"This browser is now signed in as {other.username}")
    expect(notice).to_contain_text("nothing was recorded")
    expect(page.get_by_label("Reason")).to_have_value(REASON)
    assert not Decision.objects.filter(task=task).exists()
    page.context.close()
