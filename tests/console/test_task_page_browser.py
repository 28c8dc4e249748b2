"""The task page in Chromium: an outside tester's findings (a submit after sign-out, long reasons, focus after
htmx swaps, tab order, the final approver's rule).

Reuses test_browser's daphne server and browser. Every wait is an ``expect`` or ``wait_for_function`` bounded
by the suite's time factor (``WAIT_MS``, ``expect``'s default set by the browser fixture).
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from approvals import users
from approvals.comments import comment_post
from approvals.models import Decision
from approvals.payloads import REASON_MAX_CHARS
from runtime.models import StoreOperation
from tests.console.test_browser import WAIT_MS, _live, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import decision_make, task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _width(page: Page) -> list[int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def test_a_reason_or_comment_of_one_long_word_wraps_on_every_page_that_shows_it(
    browser,  # noqa: F811
    server,  # noqa: F811
    personas,
    made_up_gates,
):
    """A 5,000-character reason without a space made the task page 45,976 px wide in a 1,280 px window,
    the thread page 45,227 px and /decisions/ 1,938 px."""
    task = task_make(metadata={"case": f"W-{uuid.uuid4().hex[:6]}"})
    word = "w" * REASON_MAX_CHARS
    comment_post(actor=personas["reviewer"].user, task=task, body="c" * 4000)
    decision = decision_make(task, personas["reviewer"].user, "reject", reason=word)
    # Other cells too (a clean-clone run, with the session's other decisions listed, found /decisions/
    # 1,456 px wide): a gate named without a space.
    long_gate = task_make(node="gate_" + "n" * 150, metadata={"case": f"W-{uuid.uuid4().hex[:6]}"})
    decision_make(long_gate, personas["reviewer"].user, "reject", reason="r")
    page = _sign_in(browser, server, personas["admin"], f"/tasks/{task.pk}/", width=1280, height=900)
    for path in [f"/tasks/{task.pk}/", f"/threads/{task.thread_id}/", "/decisions/", f"/decisions/{decision.pk}/"]:
        page.goto(f"{server}{path}")
        page.wait_for_load_state("load")
        scroll, inner = _width(page)
        assert scroll <= inner, f"{path} is {scroll} px wide in a {inner} px window"
    page.context.close()


def test_a_long_unbroken_interrupt_payload_wraps_on_every_page_that_shows_it(browser, server, personas):  # noqa: F811
    """A graph's interrupt("…") of a 3,000-character string without a space (its title too) made the task page
    3,700 px wide."""
    word = "p" * 3000
    task = task_make(payload=word, metadata={"case": f"W-{uuid.uuid4().hex[:6]}"})
    listed = task_make(payload=["q" * 3000, "r"], metadata={"case": f"W-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, personas["admin"], f"/tasks/{task.pk}/", width=1280, height=900)
    for path in [f"/tasks/{task.pk}/", f"/tasks/{listed.pk}/", f"/threads/{task.thread_id}/", "/", "/threads/"]:
        page.goto(f"{server}{path}")
        page.wait_for_load_state("load")
        scroll, inner = _width(page)
        assert scroll <= inner, f"{path} is {scroll} px wide in a {inner} px window"
    page.context.close()


def test_long_unbroken_thread_metadata_wraps_on_the_lists_and_pages_that_show_it(browser, server, personas):  # noqa: F811
    """Metadata well inside the API's limits ({"case": "CASE-" + 300 X, "note": 1000 N}) made the inbox 3,640 px
    wide at 1,366 px (its Task column squeezed to a letter a line), /threads/ 3,394 px, the task page's
    breadcrumb 2,486 px and the thread page's header 10,900 px; a 480-character applicant overflowed the
    thread page's "Memory reads and writes"."""
    marker = uuid.uuid4().hex[:6]
    applicant = "A" * 480
    metadata = {"case": f"CASE-{marker}" + "X" * 300, "note": "N" * 1000, "applicant": applicant}
    task = task_make(metadata=metadata, title="Loan L-1: 20000 for " + applicant)
    run = task.thread.runs.first()
    StoreOperation.objects.create(
        thread=task.thread, run=run, op="search", namespace=f"applicants.{applicant}", key=f"L-{applicant}", hits=1
    )
    page = _sign_in(browser, server, personas["admin"], "/", width=1366, height=900)
    too_wide = {}
    for path in ["/", f"/?q=CASE-{marker}", "/threads/", f"/tasks/{task.pk}/", f"/threads/{task.thread_id}/"]:
        page.goto(f"{server}{path}")
        page.wait_for_load_state("load")
        scroll, inner = _width(page)
        if scroll > inner:
            too_wide[path] = scroll
    assert too_wide == {}, f"pages wider than the {inner} px window (px): {too_wide}"
    # The inbox's Task column keeps a readable width beside the long case (it was squeezed to letters).
    # Read afresh until it holds: the live inbox may swap its rows in meanwhile (a detached cell measures 0).
    page.goto(f"{server}/?q=CASE-{marker}")
    page.wait_for_function(
        "sel => { const e = document.querySelector(sel); return e && e.getBoundingClientRect().width >= 200; }",
        arg=f'tr[data-task-id="{task.pk}"] td.title',
        timeout=WAIT_MS,
    )
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


# --- 5: focus after htmx swaps ------------------------------------------------------------------------------


# No htmx request, swap or settle under way: a control swapped in is wired (htmx's documented classes).
_SETTLED = "!document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')"


_STATE = """() => ({focused: document.activeElement && (document.activeElement.id || document.activeElement.tagName),
    busy: [...document.querySelectorAll('.htmx-request, .htmx-swapping, .htmx-settling')].map(e => e.id || e.tagName),
    pushes: window.__claimPushes, requests: window.__requests,
    claim: (document.querySelector('#claim-box') || {}).textContent})"""


def _focused(page: Page, script: str, *, also: str = "true") -> None:
    """Wait until ``script`` (an expression over ``el``, the focused element) holds once htmx has settled, read
    in one script: a live push may replace the element between two reads."""
    check = f"() => {{ const el = document.activeElement; return !!el && ({script}) && {_SETTLED} && ({also}); }}"
    try:
        page.wait_for_function(check, timeout=WAIT_MS)
    except PlaywrightTimeoutError:
        raise AssertionError(f"not focused as {script!r} / {also!r}: {page.evaluate(_STATE)}") from None


# Each live push of the task's Now panel, noted as whether it showed the viewer's claim; and the requests under
# way (an answer is swapped in before its request's loadend: htmx listens to load). A live push often replaces
# the panel a request targeted, whose own events then fire on detached elements no listener hears.
_PUSHES = """() => { window.__claimPushes = [];
    document.addEventListener('htmx:wsAfterMessage', () => window.__claimPushes.push(
        (document.querySelector('#claim-box') || {textContent: ''}).textContent.includes('Claimed by you')));
    window.__requests = 0;
    const send = XMLHttpRequest.prototype.send;
    XMLHttpRequest.prototype.send = function (...args) {
        window.__requests++;
        this.addEventListener('loadend', () => window.__requests--);
        return send.apply(this, args);
    }; }"""


def test_claim_then_release_with_the_keyboard_keeps_focus_on_the_button(browser, server, personas):  # noqa: F811
    """After Claim (Enter) and then Release, document.activeElement was <body>."""
    task = task_make(metadata={"case": f"K-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    _live(page)
    page.evaluate(_PUSHES)
    page.locator("#claim-button").focus()
    page.keyboard.press("Enter")
    # Focus is on Release once both the answer and the claim's own live push (either may come first) are in.
    _focused(page, "el.id === 'release-button'", also="window.__claimPushes.includes(true) && !window.__requests")
    page.evaluate("window.__claimPushes = []")
    page.keyboard.press("Enter")
    _focused(page, "el.id === 'claim-button'", also="window.__claimPushes.includes(false) && !window.__requests")
    expect(page.locator("#claim-box")).to_contain_text("Nobody is working on this task.")
    page.context.close()


def test_save_roles_with_the_keyboard_keeps_focus_on_the_button(browser, server, personas):  # noqa: F811
    user = users.user_create(actor=users.CLI, username=f"focus-{uuid.uuid4().hex[:6]}", roles=["reviewer"])
    page = _sign_in(browser, server, personas["admin"], f"/users/{user.pk}/")
    page.locator('#roles input[name="roles"][value="approver"]').check()
    page.get_by_role("button", name="Save roles").focus()
    page.evaluate("document.querySelector('#user-panel').dataset.before = '1'")  # gone once the answer is swapped in
    page.keyboard.press("Enter")
    expect(page.locator("#user-panel")).to_contain_text("Roles saved")
    expect(page.locator("#user-panel[data-before]")).to_have_count(0)
    _focused(page, "el.tagName === 'BUTTON' && el.textContent.trim() === 'Save roles' && !!el.closest('#roles')")
    assert users.user_roles(user) == ["approver", "reviewer"]
    page.context.close()


def test_a_decision_submitted_from_the_keyboard_moves_focus_to_what_was_recorded(browser, server, personas):  # noqa: F811
    task = task_make(metadata={"case": f"D-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    _live(page)
    page.get_by_label("Approve", exact=True).check()
    page.get_by_role("button", name="Submit decision").focus()
    page.keyboard.press("Enter")
    _focused(page, "el.id === 'decision-h' && el.textContent.includes('Decision recorded')")
    page.context.close()


# --- 6: tab order follows what is seen ---------------------------------------------------------------------------

_WHERE = """() => {
    const el = document.activeElement;
    if (!el || el === document.body) return "body";
    const parts = [["now", "#task-live"], ["decision", "#decision-panel"], ["conversation", "#conversation"],
                   ["ask", "section[aria-labelledby=ask-h]"]];
    for (const [name, sel] of parts) {
        if (el.closest(sel)) return name + ":" + (el.id || el.tagName);
    }
    return "other:" + (el.id || el.textContent.trim().slice(0, 30));
}"""


def _tab_until(page: Page, wanted: str, limit: int = 80) -> list[str]:
    """Press Tab from the top of the page until the focused element is ``wanted``; every stop on the way."""
    stops: list[str] = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        stops.append(page.evaluate(_WHERE))
        if stops[-1] == wanted:
            return stops
    raise AssertionError(f"{wanted} not reached in {limit} stops: {stops}")


@pytest.mark.parametrize("width", [1400, 390])
def test_tab_reaches_the_claim_before_the_main_column_and_a_skip_link_leads_to_the_decision(
    browser,  # noqa: F811
    server,  # noqa: F811
    personas,
    width,
):
    """Tab went through the whole main column, conversation included (~22 stops), before the Now panel's
    Claim; at 390 px the Now panel was drawn first but reached last."""
    task = task_make(metadata={"case": f"T-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/", width=width, height=900)
    _live(page)
    page.evaluate("document.activeElement && document.activeElement.blur()")
    stops = _tab_until(page, "now:claim-button")
    assert not [s for s in stops if s.split(":")[0] in ("decision", "conversation", "ask")], stops
    # Drawn where it is reached: first on a phone (above what the agent asks), at the top of the right column
    # (beside what the agent asks) on a wide screen.
    where = """() => { const now = document.querySelector('#task-live').getBoundingClientRect();
        const ask = document.querySelector('#ask-h').closest('section').getBoundingClientRect();
        return now.left >= ask.right ? 'right' : now.bottom <= ask.top ? 'above' : 'elsewhere'; }"""
    assert page.evaluate(where) == ("above" if width < 900 else "right")

    page.goto(f"{server}/tasks/{task.pk}/")
    _live(page)
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to decision")
    expect(skip).to_be_focused()
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    assert page.evaluate(_WHERE).startswith("decision:"), page.evaluate(_WHERE)
    page.context.close()
