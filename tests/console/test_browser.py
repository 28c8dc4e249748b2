"""The console in real Chromium against a real daphne server, Celery worker, PostgreSQL and Redis.

One browser for the whole module; each test opens its own contexts (cookie jars).
Screenshots land in var/screenshots/ (git-ignored). Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from approvals.models import ApprovalTask
from runtime.models import Thread, ThreadStatus
from tests.conftest import (
    ROOT,
    loan_input,
    pending_tasks,
    scaled,
    thread_settled,
    thread_start,
)
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

SCREENSHOTS = ROOT / "var" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
WAIT_MS = scaled(30) * 1000  # a resume crosses Celery, the graph and the fake bank: generous, but bounded


@pytest.fixture
def server(console_server: str) -> str:
    """daphne serving the console (tests/conftest.py ``console_server``: one per test session)."""
    return console_server


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # .ci/run installs it; a missing browser is a failed build, not a skipped check.
    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed: run `make chromium`"
    # Playwright's sync API drives an event loop in this thread; Django's ORM
    # calls from the test body are still plain sync calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=scaled(10) * 1000)  # busy machines: the suite's time factor
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def _sign_in(
    browser: Browser, server: str, persona: Any, path: str = "/", *, width: int = 1400, height: int = 1000
) -> Page:
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    # Encoded: a path with its own query ("/?assigned=me&q=...") must reach the inbox whole, not lose "&q=".
    page.goto(f"{server}/accounts/login/?next={quote(path, safe='/')}")
    page.get_by_label("Username").fill(persona.username)
    page.get_by_label("Password").fill("gatehouse")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("header .who")).to_contain_text(persona.username)
    return page


def _live(page: Page) -> None:
    expect(page.locator("#live-indicator")).to_have_text("live")


def test_a_reviewer_claims_edits_approves_and_watches_the_thread_complete(browser, server, personas, bank):
    reviewer = personas["reviewer"]
    case = f"B-{uuid.uuid4().hex[:6]}"
    thread = thread_start(
        personas["operator"], "loan_approval", loan_input(amount=20000), case=case, applicant="Ada Lovelace"
    )
    [task] = pending_tasks(reviewer, thread["id"])

    page = _sign_in(browser, server, reviewer, f"/?q={case}")
    row = page.locator(f'#inbox-results tr[data-task-id="{task["id"]}"]')
    expect(row).to_contain_text("human_review")
    _live(page)
    page.screenshot(path=str(SCREENSHOTS / "inbox.png"), full_page=True)

    row.get_by_role("link").click()
    expect(page.locator("h1")).to_contain_text("Loan")
    page.get_by_role("button", name="Claim").click()
    expect(page.locator("#task-live")).to_contain_text("Claimed by you")

    page.locator("#f-edits-amount").fill("15000")
    page.get_by_label("Approve", exact=True).check()
    page.get_by_label("Reason").fill("Income verified; lower the exposure")
    page.get_by_role("button", name="Submit decision").click()
    expect(page.locator("#decision-panel")).to_contain_text("Decision recorded")

    # No reload from here on: the websocket pushes the resumed thread's progress.
    expect(page.locator("#task-live #thread-status")).to_have_text("Completed", timeout=WAIT_MS)
    expect(page.locator("#task-live")).to_contain_text("disburse")
    page.screenshot(path=str(SCREENSHOTS / "task.png"), full_page=True)

    # Read from the database: Playwright's sync API runs an event loop in this thread, so the
    # test client cannot call the (async, long-polling) thread endpoint from here.
    done = Thread.objects.get(pk=thread["id"])
    assert done.status == ThreadStatus.COMPLETED
    assert done.values["amount"] == 15000 and done.values["status"] == "disbursed"
    assert bank.ledger.executions[f"gh:{thread['id']}:disburse"] == 1

    page.goto(f"{server}/threads/{thread['id']}/")
    timeline = page.locator("#thread-live .timeline")
    expect(timeline).to_contain_text("Edit and approve")
    expect(timeline).to_contain_text("Action disburse: done")
    page.locator(".tl-checkpoint a").first.click()
    expect(page.locator("#checkpoint-view")).to_contain_text("State at checkpoint")
    page.screenshot(path=str(SCREENSHOTS / "thread.png"), full_page=True)
    page.context.close()


def test_a_watching_reviewer_sees_a_new_task_appear_live(browser, server, personas):
    case = f"L-{uuid.uuid4().hex[:6]}"
    page = _sign_in(browser, server, personas["reviewer2"], f"/?q={case}")
    expect(page.locator("#inbox-results")).to_contain_text("No tasks match")
    _live(page)

    thread = thread_start(personas["operator"], "loan_approval", loan_input(amount=20000), case=case)
    # The row arrives highlighted (the flash lasts 2.5 s: wait for the highlighted row itself,
    # not for the row and then, later, its class).
    row = page.locator("#inbox-results tr.is-new[data-task-id]")
    expect(row).to_have_count(1, timeout=WAIT_MS)
    expect(row).to_contain_text(case)
    assert ApprovalTask.objects.get(thread_id=thread["id"]).pk.hex == row.get_attribute("data-task-id").replace("-", "")
    page.context.close()


def test_a_pushed_row_goes_to_the_top_of_the_list_before_the_list_is_re_rendered(browser, server, personas):
    """The fragment a live inbox sends when a task opens (console.consumers.InboxConsumer), on its own:
    after the first render the server's messages are held back, so the row on screen is the pushed one."""
    from django.http import QueryDict
    from django.template.loader import render_to_string

    from console import page_context

    case = f"P-{uuid.uuid4().hex[:6]}"
    older = task_make(metadata={"case": case})
    page = _sign_in(browser, server, personas["reviewer"], f"/?q={case}")
    sockets: list[Any] = []
    forwarded: list[str] = []

    def through(ws: Any) -> None:  # the real socket's first render (on connect), then only what the test sends
        def from_server(message: Any) -> None:
            if not forwarded:
                forwarded.append(message)
                ws.send(message)

        ws.connect_to_server().on_message(from_server)
        sockets.append(ws)

    page.route_web_socket(lambda url: "/ws/inbox/" in url, through)
    page.reload()
    _live(page)
    deadline = time.monotonic() + WAIT_MS / 1000
    while not forwarded and time.monotonic() < deadline:  # Playwright delivers the message while the page waits
        page.wait_for_timeout(20)
    assert forwarded, "the server's first render"
    rows = page.locator("#inbox-rows tr[data-task-id]")
    expect(rows).to_have_count(1)
    task = task_make(metadata={"case": case})
    ctx = page_context.inbox_row_context(personas["reviewer"].user, QueryDict(f"q={case}"), task.pk)
    sockets[-1].send(render_to_string("console/partials/inbox_row_push.html", ctx))
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-task-id", str(task.pk))
    expect(rows.nth(1)).to_have_attribute("data-task-id", str(older.pk))
    expect(rows.first).to_contain_text(case)
    page.context.close()


def test_a_row_pushed_after_the_list_that_already_shows_it_is_not_shown_twice(browser, server, personas):
    """A task's row is pushed at once and the whole list re-rendered after it, the row rendered beside a list
    render that may already be under way: that render can include the task and arrive first. The row then
    came second and sat on top of the list's own copy of it (seen once as two highlighted rows). The race is
    forced here: the server's row fragment is held back until the next list render has been delivered."""
    case = f"D-{uuid.uuid4().hex[:6]}"
    page = _sign_in(browser, server, personas["reviewer"], f"/?q={case}")
    held: list[Any] = []
    released: list[str] = []
    row_push = '<tbody hx-swap-oob="afterbegin:#inbox-rows">'

    def reordered(ws: Any) -> None:
        def from_server(message: Any) -> None:
            if isinstance(message, str) and message.startswith(row_push):
                held.append(message)
                return
            ws.send(message)
            if held and 'id="inbox-results"' in str(message):
                ws.send(held.pop())
                released.append(message)

        ws.connect_to_server().on_message(from_server)

    page.route_web_socket(lambda url: "/ws/inbox/" in url, reordered)
    page.reload()
    _live(page)
    expect(page.locator("#inbox-results")).to_contain_text("No tasks match")
    task = task_make(metadata={"case": case})
    deadline = time.monotonic() + WAIT_MS / 1000
    while not released and time.monotonic() < deadline:  # Playwright delivers messages while the page waits
        page.wait_for_timeout(20)
    assert released, "the row, sent after a list render"
    rows = page.locator(f'#inbox-results tr[data-task-id="{task.pk}"]')
    expect(rows).to_have_count(1)
    expect(rows).to_have_class(re.compile(r"\bis-new\b"))
    page.context.close()


def test_an_auditor_sees_the_task_but_cannot_decide(browser, server, personas):
    task = task_make(metadata={"case": f"A-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, personas["auditor"], f"/tasks/{task.pk}/")
    expect(page.locator("#read-only-note")).to_be_visible()
    expect(page.locator("#decide-button")).to_have_count(0)
    expect(page.locator("#claim-button")).to_have_count(0)
    expect(page.get_by_role("link", name="Audit")).to_be_visible()
    # The endpoint refuses even a hand-made request from the auditor's session.
    status = page.evaluate(
        """async ([url, token]) => (await fetch(url, {method: "POST", headers: {"X-CSRFToken": token,
            "Content-Type": "application/x-www-form-urlencoded"}, body: "decision=approve&reason=x"})).status""",
        [f"/tasks/{task.pk}/decide", page.locator("body").get_attribute("hx-headers").split('"')[3]],
    )
    assert status == 403
    page.context.close()


def test_a_decision_on_a_stale_view_is_refused_and_offers_a_refresh(browser, server, personas):
    task = task_make(metadata={"case": f"S-{uuid.uuid4().hex[:6]}"})
    page = _sign_in(browser, server, personas["reviewer"], f"/tasks/{task.pk}/")
    expect(page.locator("#seen-checkpoint")).to_have_text(task.checkpoint_id)

    # Meanwhile the thread moves on: a redelivered run re-raised the interrupt at a newer checkpoint.
    newer = uuid.uuid4().hex
    ApprovalTask.objects.filter(pk=task.pk).update(checkpoint_id=newer)
    Thread.objects.filter(pk=task.thread_id).update(checkpoint_id=newer)

    page.get_by_label("Approve", exact=True).check()
    page.get_by_label("Reason").fill("looks fine")
    page.get_by_role("button", name="Submit decision").click()
    notice = page.locator("#stale-notice")
    expect(notice).to_contain_text("The thread moved on")
    expect(notice).to_contain_text("Nothing was saved")
    assert not task.decisions.exists()
    notice.get_by_role("link", name="Refresh the task").click()
    expect(page.locator("#seen-checkpoint")).to_have_text(newer)
    page.context.close()


def test_every_page_of_the_menu_loads_without_a_failed_request_or_a_script_error(browser, server, personas):
    """What a browser's console shows a user: a 404 for an icon, a blocked script or a thrown error
    on any page an admin can reach from the menu (and a task's page, and the sign-in page itself)."""
    task = task_make(metadata={"case": f"P-{uuid.uuid4().hex[:6]}"})
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    problems: list[str] = []
    page.on(
        "console", lambda m: problems.append(f"console {m.type}: {m.text} ({page.url})") if m.type == "error" else None
    )
    page.on("pageerror", lambda error: problems.append(f"script error: {error} ({page.url})"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(f"{server}/accounts/login/")
    page.get_by_label("Username").fill(personas["admin"].username)
    page.get_by_label("Password").fill("gatehouse")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("header .who")).to_contain_text(personas["admin"].username)
    menu = [link.get_attribute("href") for link in page.locator("header nav a").all()]
    assert "/users/" in menu and "/audit/" in menu, menu  # the admin's whole menu, not a short one
    for path in [*menu, f"/tasks/{task.pk}/"]:
        page.goto(f"{server}{path}")
        page.wait_for_load_state("load")
        # A live page's socket is open before the next page is asked for: leaving a socket mid-handshake
        # is an error in the browser's console, which this test would report as the page's.
        if page.locator("[ws-connect]").count():
            _live(page)
        # The tab's icon: the page names one, and it is served.
        icons = page.locator('link[rel="icon"]')
        assert icons.count() == 1, path
        assert page.request.get(f"{server}{icons.get_attribute('href')}").ok, path
    # A page that names no icon (the API's JSON) makes the browser ask for /favicon.ico.
    assert page.request.get(f"{server}/favicon.ico").ok
    context.close()
    assert problems == []


def test_retrying_a_failed_step_from_a_live_thread_page(browser, server, personas, tmp_path):
    """The status card is re-rendered by the thread's socket as the page connects, without a request and
    so without a CSRF token: the plain retry form then always failed with Django's 403 page."""
    operator = personas["operator"]
    marker = tmp_path / "fixed"
    thread = thread_start(operator, "flaky", {"subject": "ledger", "marker": str(marker)})
    thread_settled(operator, thread["id"], statuses=("failed",))
    page = _sign_in(browser, server, operator)
    page.goto(f"{server}/threads/{thread['id']}/")
    _live(page)
    retry = page.locator("#thread-live form[action$='/retry']")
    expect(retry.locator("input[name=csrfmiddlewaretoken]")).to_have_count(0)  # the live render's form
    marker.write_text("ok")
    retry.get_by_role("button", name="Retry the failed step").click()
    expect(page.locator("body")).to_contain_text("Retry queued")
    expect(page.locator("#thread-status")).to_have_text("Completed", timeout=WAIT_MS)
    page.context.close()
