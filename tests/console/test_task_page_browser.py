"""The task page in Chromium: an outside tester's findings (a submit after sign-out, long reasons, focus after
htmx swaps, tab order, the final approver's rule).

Reuses test_browser's daphne server and browser. Every wait is an ``expect`` or ``wait_for_function`` bounded
by the suite's time factor (``WAIT_MS``, ``expect``'s default set by the browser fixture).
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Page, expect  # noqa: F401

from approvals.comments import comment_post
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
