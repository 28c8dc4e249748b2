"""The inbox at 800 px: a task's title wraps between its words, never inside one, and a list wider than the
window scrolls sideways in its own box rather than widen the page.

A QA reviewer's inbox at 800 px showed "Identi / ty / verifi / catio / n": the title cell may break anywhere
(a title of one 3,000-character word must not widen the page), and a table lays a cell that may break
anywhere out at its narrowest, one letter wide, whenever its columns are short of room.

Reuses test_browser's daphne server and browser; screenshots land in var/screenshots/.
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

COLUMNS = [
    {"key": "amount", "path": "/amount", "label": "Amount", "type": "money", "currency": "EUR"},
    {"key": "risk", "path": "/risk", "label": "Risk", "type": "number"},
]

# Each word of the cell's text on one line: a Range over a word has one box, or two when the word is cut.
WORDS_CUT = """cell => {
  const cut = [];
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      if (range.getClientRects().length > 1) cut.push(match[0]);
    }
  }
  return cut;
}"""


@pytest.mark.parametrize("width", [800, 1024])
def test_inbox_titles_wrap_between_words_and_the_list_scrolls_in_place(browser, server, personas, width):  # noqa: F811
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    titles = ["Identity verification for Grace Hopper", "Loan L-3158: EUR 39,417 for Grace Hopper"]
    for title in titles:
        task_make(
            node=gate,
            payload={"title": title, "amount": 39417, "risk": 0.42, "columns": COLUMNS},
            metadata={"case": f"KYC-{uuid.uuid4().hex[:8]}", "applicant": "Grace Brewster Murray Hopper"},
        )
    page = _sign_in(browser, server, personas["approver"], f"/?graph=loan_approval&node={gate}", width=width)
    cells = page.locator("#inbox-results tr[data-task-id] td.title")
    expect(cells).to_have_count(2)
    page.screenshot(path=str(SCREENSHOTS / f"inbox_{width}.png"), full_page=True)
    for cell in cells.all():
        assert cell.evaluate(WORDS_CUT) == [], cell.inner_text()
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"the inbox is {scroll} px wide in a {inner} px window"
    page.context.close()
