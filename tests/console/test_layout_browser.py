"""The console's layout and small behaviours in real Chromium: Enter applies the inbox's column filters,
no page is wider than a phone, the keyboard help closes with Escape, and a thread with branches loads
without a Content-Security-Policy error (its fork form refusing in place).

Reuses test_browser's daphne server and browser; screenshots land in var/screenshots/.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from approvals import claims, time_travel
from approvals.inbound.webhooks import webhook_endpoint_create
from approvals.models import InboundDelivery
from tests.conftest import loan_input, pending_tasks, thread_start
from tests.console.test_browser import (  # noqa: F401  (fixtures)
    SCREENSHOTS,
    WAIT_MS,
    _live,
    _sign_in,
    browser,
    server,
)
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

COLUMNS = [{"key": "amount", "path": "/amount", "label": "Amount", "type": "number"}]


def _problems(page: Page) -> list[str]:
    """What the browser's console reports as an error, or a script throws, from now on."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(f"console: {m.text} ({page.url})") if m.type == "error" else None)
    page.on("pageerror", lambda error: seen.append(f"script error: {error} ({page.url})"))
    return seen


def _inbox_of_two_amounts(browser, server, personas) -> tuple[Any, Any, Any, Any]:  # noqa: F811
    """Two tasks of a gate of their own (amounts 500 and 25000, an Amount column) and an approver's inbox
    filtered to that gate: (small, big, page, its rows)."""
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    small, big = (
        task_make(node=gate, payload={"title": f"{gate} {n}", "amount": n, "columns": COLUMNS}) for n in (500, 25000)
    )
    page = _sign_in(browser, server, personas["approver"], f"/?graph=loan_approval&node={gate}")
    rows = page.locator("#inbox-results tr[data-task-id]")
    expect(rows).to_have_count(2)
    return small, big, page, rows


def test_enter_in_a_column_filter_applies_it_and_updates_the_url(browser, server, personas):  # noqa: F811
    small, big, page, rows = _inbox_of_two_amounts(browser, server, personas)
    _live(page)  # htmx is up and the live list settled: a push would re-render the filter row
    amount = page.get_by_label("Filter by Amount")
    amount.fill(">=21000")
    amount.press("Enter")
    expect(rows).to_have_count(1)
    expect(page.locator(f'#inbox-results tr[data-task-id="{big.pk}"]')).to_be_visible()
    expect(page).to_have_url(re.compile(r"[?&]c\.amount=%3E%3D21000(&|$)"))
    expect(page.get_by_label("Filter by Amount")).to_have_value(">=21000")  # the re-rendered list keeps it
    assert page.locator(f'#inbox-results tr[data-task-id="{small.pk}"]').count() == 0
    page.screenshot(path=str(SCREENSHOTS / "inbox_column_filter_enter.png"))
    page.context.close()


def test_a_live_push_after_a_column_filter_keeps_the_list_filtered(browser, server, personas):  # noqa: F811
    """The race the test above lost once on a loaded machine (two rows, not one), made to happen every time.

    The inbox's socket was opened with the page's filters and kept them: once a filter was applied in
    place (htmx; the address and the list changed, the socket did not), the socket's next render (its
    first, landing late on a loaded machine, or any task event of the graph) showed the list under the
    page's old filters again, and emptied the column filter. Here a claim of the filtered-in task pushes
    that render.
    """
    small, big, page, rows = _inbox_of_two_amounts(browser, server, personas)
    _live(page)
    amount = page.get_by_label("Filter by Amount")
    amount.fill(">=21000")
    amount.press("Enter")
    expect(rows).to_have_count(1)
    expect(page).to_have_url(re.compile(r"[?&]c\.amount=%3E%3D21000(&|$)"))
    claims.task_claim(actor=personas["reviewer2"].user, task_id=big.pk)
    # The render the claim pushed (whichever socket heard it): it shows the claim, under the applied filter.
    big_row = page.locator(f'#inbox-results tr[data-task-id="{big.pk}"]')
    expect(big_row).to_contain_text(personas["reviewer2"].username, timeout=WAIT_MS)
    expect(rows).to_have_count(1)
    expect(page.locator(f'#inbox-results tr[data-task-id="{small.pk}"]')).to_have_count(0)
    expect(page.get_by_label("Filter by Amount")).to_have_value(">=21000")
    page.context.close()


def _fits(page: Page, path: str) -> None:
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"{path} is {width[0]} px wide on a {width[1]} px screen"
    header, sign_out = page.locator("header.topbar"), page.get_by_role("button", name="Sign out")
    box, inner = header.bounding_box(), sign_out.bounding_box()
    assert box and inner and inner["x"] + inner["width"] <= box["x"] + box["width"], path  # on the dark bar
    assert inner["y"] + inner["height"] <= box["y"] + box["height"], path


def test_no_page_is_wider_than_a_phone(browser, server, personas):  # noqa: F811
    admin = personas["admin"]
    task = task_make(metadata={"case": f"N-{uuid.uuid4().hex[:6]}", "applicant": "Ada Lovelace"})
    # Long outside input on the webhooks page: a refused delivery's id and reason, stored as received.
    endpoint = webhook_endpoint_create(
        actor=None, name=f"wide-{uuid.uuid4().hex[:6]}", graph="loan_approval", gates=["human_review"]
    )
    InboundDelivery.objects.create(
        endpoint=endpoint,
        webhook_id="A" * 200,
        status="refused",
        http_status=401,
        reason="no task has correlation_key " + "K" * 5000,
        body_digest="0" * 64,
    )
    page = _sign_in(browser, server, admin, "/", width=390, height=844)
    menu = [link.get_attribute("href") for link in page.locator("header nav a").all()]
    for path in [*menu, f"/tasks/{task.pk}/", f"/threads/{task.thread_id}/"]:
        page.goto(f"{server}{path}")
        page.wait_for_load_state("load")
        _fits(page, path)
        if path == "/dashboard/":  # charts scroll in their card at a legible size rather than shrink
            for chart in page.locator("svg.chart").all():
                assert chart.bounding_box()["width"] >= 500
            # The time series opens at its latest data (it opened at its oldest: a flat line of zeros).
            series = page.locator(".chart-scroll[data-scroll-end]")
            assert series.evaluate("el => el.scrollWidth > el.clientWidth && el.scrollLeft > 0")
    page.screenshot(path=str(SCREENSHOTS / "narrow_thread.png"), full_page=True)
    page.goto(f"{server}/tasks/{task.pk}/")
    expect(page.locator("#task-live")).to_be_visible()
    # "Now" (claim) first, not below the whole page. Measured in one script: the socket re-renders
    # #task-live as it connects, and a locator's two reads could fall on either side of that swap.
    order = "() => document.querySelector('#task-live').getBoundingClientRect().y"
    order += " < document.querySelector('#ask-h').getBoundingClientRect().y"
    assert page.evaluate(order)
    page.screenshot(path=str(SCREENSHOTS / "narrow_task.png"), full_page=True)
    page.context.close()


def test_escape_or_the_close_button_closes_the_keyboard_help(browser, server, personas):  # noqa: F811
    page = _sign_in(browser, server, personas["reviewer"], "/")
    help_box = page.locator("#kbd-help")
    page.locator("body").press("?")
    expect(help_box).to_be_visible()
    page.keyboard.press("Escape")
    expect(help_box).to_be_hidden()
    expect(page.locator(".kbd-help-toggle")).to_have_attribute("aria-expanded", "false")
    page.locator(".kbd-help-toggle").click()
    expect(help_box).to_be_visible()
    page.get_by_role("button", name="Close keyboard shortcuts").click()
    expect(help_box).to_be_hidden()
    page.context.close()


def test_a_branched_thread_has_no_csp_error_and_a_refused_fork_stays_in_place(browser, server, personas):  # noqa: F811
    operator = personas["operator"]
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000), case=f"T-{uuid.uuid4().hex[:6]}")
    [task] = pending_tasks(operator, thread["id"])
    for reason in ("first fix", "second fix"):
        time_travel.thread_fork(
            actor=operator.user,
            thread_id=thread["id"],
            checkpoint_id=task["checkpoint_id"],
            values={"amount": 21000},
            reason=reason,
        )
    page = _sign_in(browser, server, operator, "/")
    problems = _problems(page)
    page.goto(f"{server}/threads/{thread['id']}/")
    _live(page)
    branches = page.locator("#time-travel li.branch")
    expect(branches).to_have_count(2)
    # Read in one script: the time-travel card follows the thread live, and a push that replaced the row
    # between a locator's lookup and its evaluate gave a detached element, whose computed style is "".
    indent: Any = page.wait_for_function(
        """() => {
            const li = document.querySelector("#time-travel li.branch");
            const margin = li && getComputedStyle(li).marginLeft;
            return margin && margin.endsWith("px") ? margin : null;
        }"""
    ).json_value()
    assert float(indent[:-2]) > 0
    assert problems == []  # no inline style refused by the CSP (the refused fork's 422 below is one, by design)
    page.locator("#fork-values").fill('{"amount": "lots"}')
    page.locator("#fork-reason").fill("wrong type on purpose")
    page.get_by_role("button", name="Fork from here").click()
    expect(page.locator("#fork-values-error")).to_contain_text("values.amount")
    expect(page.locator("#fork-values")).to_have_value('{"amount": "lots"}')
    expect(page.locator("#fork-reason")).to_have_value("wrong type on purpose")
    assert page.url.rstrip("/").endswith(f"/threads/{thread['id']}")  # still the thread page, not /fork
    page.screenshot(path=str(SCREENSHOTS / "fork_refused_in_place.png"), full_page=True)
    page.context.close()
