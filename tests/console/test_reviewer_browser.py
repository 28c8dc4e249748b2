"""What a reviewer's page shows as the task changes under it, and keyboard use of the inbox, in Chromium."""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

from approvals import claims
from tests.console.test_browser import WAIT_MS, _live, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import decision_make, task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_a_stale_claim_refusal_goes_once_the_claimer_decides(browser, server, personas):  # noqa: F811
    """ "reviewer2 has claimed this task until 11:48 UTC; ask them…" stayed above "no longer pending"."""
    task = task_make(metadata={"case": f"C-{uuid.uuid4().hex[:6]}"})
    claims.task_claim(actor=personas["reviewer2"].user, task_id=task.pk)
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    _live(page)
    page.get_by_label("Approve", exact=True).check()
    page.get_by_label("Reason").fill("looks fine")
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
