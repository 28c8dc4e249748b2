"""The dashboard in real Chromium: its SVG charts render, and every number they show matches the API.

Seeded tasks and decisions belong to a graph unique to this module, and the page is read filtered to it.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests.approvals.test_dashboard import _decided
from tests.console.test_browser import SCREENSHOTS, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def test_the_charts_render_with_the_numbers_the_api_gives(browser, server, personas):  # noqa: F811
    graph = f"dashb_{uuid.uuid4().hex[:8]}"
    now = timezone.now()
    reviewer, approver = personas["reviewer"].user, personas["approver"].user
    late = task_make(graph=graph, node="review", due_at=now - timedelta(minutes=20))
    task_make(graph=graph, node="review", due_at=now + timedelta(hours=3))
    task_make(graph=graph, node="sign_off")
    for i, (minutes, actor, outcome) in enumerate(
        [(5, reviewer, "approve"), (15, reviewer, "reject"), (25, approver, "edit"), (90, approver, "approve")]
    ):
        _decided(
            actor,
            graph,
            "review" if i < 3 else "sign_off",
            created=now - timedelta(hours=5),
            waited=timedelta(minutes=minutes),
            outcome=outcome,
        )
    since = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    until = (now + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    api = personas["auditor"].client.get("/api/dashboard", graph=graph, since=since, until=until).json()

    page = _sign_in(browser, server, personas["auditor"], "/dashboard/")
    page.goto(f"{server}/dashboard/?graph={graph}&since={since}&until={until}")
    for chart in ("chart-pending", "chart-timing", "chart-outcomes", "chart-reviewers"):
        svg = page.locator(f"svg#{chart}[role=img]")
        expect(svg).to_be_visible()
        assert svg.bounding_box()["height"] > 20  # drawn, not collapsed
        expect(page.locator(f"#{chart}-title")).not_to_be_empty()

    # The queue now.
    expect(page.locator('[data-metric="overdue"]')).to_have_text(str(api["overdue"]["count"]))
    assert api["overdue"]["count"] == 1
    pending_now = sum(s["now"] for s in api["pending"])
    expect(page.locator('[data-metric="pending"]')).to_have_text(str(pending_now))
    # The pending series: one polyline per gate, its "now" equal to the API's.
    for s in api["pending"]:
        line = page.locator(f'svg#chart-pending a.chart-series[data-key="{s["graph"]} / {s["node"]}"]')
        expect(line).to_have_attribute("data-now", str(s["now"]))
        expect(line.locator("circle")).to_have_count(len(s["points"]))
    # Time to decision: the bars' values and the table's numbers are the API's percentiles.
    for t in api["time_to_decision"]:
        key = f"{t['graph']} / {t['node']}"
        for p in ("p50", "p95"):
            bar = page.locator(f'svg#chart-timing a.chart-bar[data-key="{key}:{p}"]')
            assert float(bar.get_attribute("data-value")) == t[f"{p}_seconds"]
            assert (
                float(
                    page.locator(f'#table-timing tr[data-key="{key}"] [data-metric="{p}"]').get_attribute("data-value")
                )
                == t[f"{p}_seconds"]
            )
    assert {t["node"]: t["p95_seconds"] for t in api["time_to_decision"]} == {"review": 1500, "sign_off": 5400}
    expect(page.locator('#table-timing tr[data-key$="/ review"] [data-metric="p95"]')).to_have_text("25 min")
    # Outcomes and reviewers: each bar's value and visible text.
    for o in api["outcomes"]:
        bar = page.locator(f'svg#chart-outcomes a.chart-bar[data-key="{o["key"]}"]')
        expect(bar).to_have_attribute("data-value", str(o["count"]))
        expect(bar.locator("text.chart-value")).to_have_text(str(o["count"]))
    for r in api["reviewers"]:
        expect(page.locator(f'svg#chart-reviewers a.chart-bar[data-key="{r["key"]}"]')).to_have_attribute(
            "data-value", str(r["count"])
        )
    assert {r["key"]: r["count"] for r in api["reviewers"]} == {reviewer.username: 2, approver.username: 2}
    page.screenshot(path=str(SCREENSHOTS / "dashboard.png"), full_page=True)

    # Every number links to the list behind it: the overdue count opens the inbox showing that task.
    page.locator('[data-metric="overdue"]').click()
    expect(page.locator(f'#inbox-results tr[data-task-id="{late.pk}"]')).to_be_visible()
    expect(page.locator("#inbox-results tr[data-task-id]")).to_have_count(1)
    page.screenshot(path=str(SCREENSHOTS / "dashboard-overdue-inbox.png"), full_page=True)
    # And a reviewer's bar opens the decision history filtered to that reviewer.
    page.goto(f"{server}/dashboard/?graph={graph}&since={since}&until={until}")
    page.locator(f'svg#chart-reviewers a.chart-bar[data-key="{reviewer.username}"] rect').click()
    expect(page.locator("#decision-results tr[data-decision-id]")).to_have_count(2)
    page.context.close()


@pytest.mark.parametrize("width", [1400, 1280, 1024, 800])
def test_every_number_a_bar_chart_draws_is_inside_its_card(browser, server, personas, width):  # noqa: F811
    """At 1280 px the top reviewer's "10" was cut at the edge of the half-width card and read "1": the chart
    kept a 520 px minimum in a narrower card, and the value fell outside what its scroller showed."""
    graph = f"dashw_{uuid.uuid4().hex[:8]}"
    now = timezone.now()
    reviewer, approver = personas["reviewer"].user, personas["approver"].user
    for i in range(12):
        actor = reviewer if i < 10 else approver
        _decided(actor, graph, "review", created=now - timedelta(hours=2), waited=timedelta(minutes=5 + i))
    since = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    until = (now + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    page = _sign_in(browser, server, personas["auditor"], "/dashboard/", width=width)
    page.goto(f"{server}/dashboard/?graph={graph}&since={since}&until={until}")
    expect(page.locator(f'svg#chart-reviewers a.chart-bar[data-key="{reviewer.username}"]')).to_have_attribute(
        "data-value", "10"
    )
    # Each value's box against what its card shows (the scroller's visible box), read in one script.
    outside = page.evaluate(
        """() => [...document.querySelectorAll('svg.chart text.chart-value, svg.chart text.chart-label')]
            .map(t => {
              const box = t.getBoundingClientRect(), shown = t.closest('.chart-scroll').getBoundingClientRect();
              return {text: t.textContent, chart: t.closest('svg').id, left: box.left, right: box.right,
                      from: shown.left, to: shown.right};
            })
            .filter(t => t.left < t.from - 0.5 || t.right > t.to + 0.5)"""
    )
    page.screenshot(path=str(SCREENSHOTS / f"dashboard-{width}.png"), full_page=True)
    assert outside == [], outside
    page.context.close()
