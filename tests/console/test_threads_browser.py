"""The threads list in real Chromium: a thread started elsewhere appears, and moves on, without a reload.

Real daphne, Celery worker, Redis channel layer and PostgreSQL (the fixtures of test_browser.py).
Screenshots land in var/screenshots/.
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

from runtime.models import Thread
from tests.conftest import api_decide, loan_input, pending_tasks, scaled, thread_start
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


# The state card's checkpoint, both travel forms' and the "A new branch from" text's, read at once: the
# socket swaps the card and the forms together, and reads split over two calls could straddle a swap.
_TRAVEL_TARGETS = """() => {
  const code = document.querySelector('#checkpoint-view code[title^="Checkpoint id"]');
  const value = (form) => (document.querySelector(`#${form} input[name="checkpoint_id"]`) || {}).value;
  const said = [...document.querySelectorAll('#time-travel p')]
    .find(p => p.textContent.startsWith('A new branch from'));
  const from = said ? said.querySelector('code') : null;
  return {
    shown: code ? code.textContent.trim() : null,
    status: (document.querySelector('#thread-status') || {}).textContent,
    replay: value('replay-form'), fork: value('fork-form'), from: from ? from.textContent.trim() : null,
    typed: (document.querySelector('#fork-reason') || {}).value,
  };
}"""


def _targets_when(page, condition: str) -> dict:
    """The travel targets once ``condition`` (a JS expression over ``t``, the targets) holds, read in one script."""
    page.wait_for_function(f"() => {{ const t = ({_TRAVEL_TARGETS})(); return ({condition}) ? t : null; }}")
    return page.evaluate(_TRAVEL_TARGETS)


def test_after_a_replay_the_travel_forms_follow_the_state_the_page_shows(browser, server, personas, bank):  # noqa: F811
    """Replayed from the gate's checkpoint, the page landed on showed the branch's head as its current state, but
    "A new branch from …" and both forms' checkpoint_id still named the old line's checkpoint."""
    operator = personas["operator"]
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000), case=f"TT-{uuid.uuid4().hex[:6]}")
    [task] = pending_tasks(operator, thread["id"])
    page = _sign_in(browser, server, operator, f"/threads/{thread['id']}/?checkpoint={task['checkpoint_id']}")
    _live(page)
    page.locator("#replay-reason").fill("check the branch")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Replay from here").click()
    page.wait_for_url(f"**/threads/{thread['id']}/")
    _live(page)
    # The replay pauses at the gate on its branch: the state card shows its head, and so do the forms.
    on_branch = _targets_when(
        page, f"t.status === 'Waiting for a decision' && t.shown && t.shown !== '{task['checkpoint_id']}'"
    )
    assert on_branch["replay"] == on_branch["fork"] == on_branch["from"] == on_branch["shown"], on_branch
    assert Thread.objects.get(pk=thread["id"]).checkpoint_id == on_branch["shown"]

    # The branch's loan is approved and paid: the forms move on to the last checkpoint, what was typed stays.
    page.locator("#fork-reason").fill("typed by hand")
    [branch_task] = [t for t in pending_tasks(operator, thread["id"]) if t["id"] != task["id"]]
    assert api_decide(personas["approver"], branch_task).status_code == 201
    done = _targets_when(page, "t.status === 'Completed'")
    assert done["replay"] == done["fork"] == done["from"] == done["shown"] != on_branch["shown"], done
    assert done["typed"] == "typed by hand"
    page.screenshot(path=str(SCREENSHOTS / "thread-after-replay.png"), full_page=True)
    page.context.close()
