"""The threads list in real Chromium: a thread started elsewhere appears, and moves on, without a reload.

Real daphne, Celery worker, Redis channel layer and PostgreSQL (the fixtures of test_browser.py).
Screenshots land in var/screenshots/.
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

from tests.conftest import loan_input, scaled, thread_start
from tests.console.test_browser import SCREENSHOTS, WAIT_MS, _live, _sign_in, browser, server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

LIVE_MS = scaled(15) * 1000  # an event crosses Redis to the consumer, which re-renders: bounded, not slept


def test_a_thread_started_in_the_background_appears_on_an_open_threads_list(browser, server, personas):  # noqa: F811
    operator = personas["operator"]
    case = f"TL-{uuid.uuid4().hex[:8]}"
    page = _sign_in(browser, server, operator, f"/threads/?q={case}")
    expect(page.locator("#threads-results")).to_contain_text("No threads match")
    _live(page)
    page.evaluate("window.__threadsNoReload = true")  # still there at the end: the page never reloaded
    # A reader typing a new search meanwhile: the push must not touch the box (it is outside the swap).
    page.locator("#t-q").fill(f"{case} half-typed")

    thread = thread_start(operator, "loan_approval", loan_input(amount=20000), case=case, applicant="Ada Lovelace")

    row = page.locator(f'#threads-results tr[data-thread-id="{thread["id"]}"]')
    expect(row).to_have_count(1, timeout=LIVE_MS)
    expect(row).to_contain_text(case)
    # Its run reaches the loan's human review: the status follows, still without a reload.
    expect(row.locator(".status")).to_have_text("Waiting for a decision", timeout=WAIT_MS)
    expect(page.locator("#t-q")).to_have_value(f"{case} half-typed")
    assert page.evaluate("window.__threadsNoReload === true"), "the threads list reloaded"
    page.screenshot(path=str(SCREENSHOTS / "threads-live.png"), full_page=True)
    page.context.close()
