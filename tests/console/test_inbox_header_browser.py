"""The inbox's header row stays at the window's top while the page scrolls, at every width.

Below 1280 px the list scrolls sideways in its own box (test_inbox_width_browser.py), and that box became the
header's scrolling box: ``position: sticky`` held the header to a box that never scrolls down, so at 800-1280 px
it scrolled away with the rows. Reuses test_browser's daphne server and browser.
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

from tests.console.test_browser import (  # noqa: F401  (fixtures)
    SCREENSHOTS,
    _sign_in,
    browser,
    server,
)
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

HEAD_TOP = "() => document.querySelector('table.grid.inbox thead th').getBoundingClientRect().top"
# The header is drawn over the rows it covers: what is at its middle is one of its cells.
HEAD_ON_TOP = """() => {
  const head = document.querySelector('table.grid.inbox thead');
  const box = head.querySelector('th:nth-child(2)').getBoundingClientRect();
  const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
  return head.contains(hit);
}"""


@pytest.mark.parametrize("width", [800, 1024, 1366])
def test_the_inbox_header_stays_at_the_top_of_the_window_as_the_page_scrolls(browser, server, personas, width):  # noqa: F811
    marker = uuid.uuid4().hex[:8]
    for i in range(30):
        task_make(metadata={"case": f"{marker}-{i}", "applicant": "Grace Brewster Murray Hopper"})
    page = _sign_in(browser, server, personas["reviewer"], f"/?q={marker}", width=width, height=700)
    rows = page.locator("#inbox-results tr[data-task-id]")
    expect(rows).to_have_count(30)
    start = page.evaluate(HEAD_TOP)
    assert start > 100  # below the page's head and filters, where the list begins

    page.locator("#inbox-results tbody tr").nth(3).hover()
    page.mouse.wheel(0, 900)  # the wheel over the list: its box does not scroll down, the page does
    page.wait_for_function("() => window.scrollY > 0")
    page.wait_for_function(f"() => Math.abs(({HEAD_TOP})()) < 2")
    assert page.evaluate(HEAD_ON_TOP)
    page.screenshot(path=str(SCREENSHOTS / f"inbox_header_{width}.png"))

    # Back at the top the header is where the list begins again.
    page.evaluate("() => window.scrollTo(0, 0)")
    page.wait_for_function(f"() => Math.abs(({HEAD_TOP})() - {start}) < 2")
    page.context.close()
