"""The task page in Chromium: an outside tester's findings (a submit after sign-out, long reasons, focus after
htmx swaps, tab order, the final approver's rule).

Reuses test_browser's daphne server and browser. Every wait is an ``expect`` or ``wait_for_function`` bounded
by the suite's time factor (``WAIT_MS``, ``expect``'s default set by the browser fixture).
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Page, expect

from approvals.comments import comment_post
from approvals.models import Decision
from approvals.payloads import REASON_MAX_CHARS
from tests.console.test_browser import WAIT_MS, _live, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import decision_make, task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _width(page: Page) -> list[int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def test_a_reason_or_comment_of_one_long_word_wraps_on_every_page_that_shows_it(browser, server, personas):  # noqa: F811
    """A 5,000-character reason without a space made the task page 45,976 px wide in a 1,280 px window,
    the thread page 45,227 px and /decisions/ 1,938 px."""
    task = task_make(metadata={"case": f"W-{uuid.uuid4().hex[:6]}"})
    word = "w" * REASON_MAX_CHARS
    comment_post(actor=personas["reviewer"].user, task=task, body="c" * 4000)
    decision = decision_make(task, personas["reviewer"].user, "reject", reason=word)
    page = _sign_in(browser, server, personas["admin"], f"/tasks/{task.pk}/", width=1280, height=900)
    for path in [f"/tasks/{task.pk}/", f"/threads/{task.thread_id}/", "/decisions/", f"/decisions/{decision.pk}/"]:
        page.goto(f"{server}{path}")
        page.wait_for_load_state("load")
        scroll, inner = _width(page)
        assert scroll <= inner, f"{path} is {scroll} px wide in a {inner} px window"
    page.context.close()


# --- 1: a submit after the session ended ----------------------------------------------------------------------


def test_a_submit_after_signing_out_elsewhere_records_nothing_keeps_the_text_and_goes_through_once_signed_in(
    browser,  # noqa: F811
    server,  # noqa: F811
    personas,
):
    """Signed out in a second tab, Submit decision sent the page to /accounts/login/?next=... with no message:
    after signing in, the long reason and the comment draft were gone."""
    reviewer = personas["reviewer"]
    task = task_make(metadata={"case": f"O-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, reviewer, f"/tasks/{task.pk}/")
    _live(page)
    reason = "Income not verified; " * 40
    page.get_by_label("Reject", exact=True).check()
    page.get_by_label("Reason").fill(reason)
    page.locator("#comment-body").fill("a draft for the team")

    other = page.context.new_page()  # the second tab: same cookies
    other.goto(f"{server}/")
    other.get_by_role("button", name="Sign out").click()
    expect(other.get_by_label("Username")).to_be_visible()

    page.get_by_role("button", name="Submit decision").click()
    notice = page.locator("#session-notice")
    expect(notice).to_contain_text("You were signed out")
    expect(notice).to_contain_text("nothing was recorded")
    assert page.url == f"{server}/tasks/{task.pk}/"
    expect(page.get_by_label("Reason")).to_have_value(reason)
    expect(page.locator("#comment-body")).to_have_value("a draft for the team")
    expect(page.get_by_label("Reject", exact=True)).to_be_checked()
    expect(notice.get_by_role("link", name="Sign in again in a new tab")).to_be_focused()
    assert not Decision.objects.filter(task=task).exists()

    with page.context.expect_page() as opened:
        notice.get_by_role("link", name="Sign in again in a new tab").click()
    signing = opened.value
    signing.get_by_label("Username").fill(reviewer.username)
    signing.get_by_label("Password").fill("gatehouse")
    signing.get_by_role("button", name="Sign in").click()
    expect(signing.locator("header .who")).to_contain_text(reviewer.username)

    # Back in the first tab, the same submit goes through (with the new sign-in's CSRF token).
    page.bring_to_front()
    page.get_by_role("button", name="Submit decision").click()
    expect(page.locator("#decision-panel")).to_contain_text("Decision recorded")
    expect(notice).to_be_empty()
    decision = Decision.objects.get(task=task)
    assert decision.outcome == "reject" and decision.reason == reason
    page.context.close()
