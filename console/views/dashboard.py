"""The team dashboard page (leads, auditors, admins): charts and numbers, each linked to its list."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals import dashboard
from approvals.errors import DomainError
from console import charts
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors


@require_GET
@console_login_required
@domain_errors
def dashboard_page(request: HtmxHttpRequest) -> HttpResponse:
    dashboard.require_viewer(request.user)
    params = {k: request.GET.get(k, "") for k in ("graph", "since", "until")}
    try:
        filters = dashboard.dashboard_filters_parse(
            user=request.user, graph=params["graph"], since=params["since"], until=params["until"]
        )
    except DomainError as exc:
        # The page still renders its form, with the message next to the field; nothing is counted.
        ctx = {
            "nav": "dashboard",
            "params": params,
            "error": exc,
            "graphs": dashboard.dashboard_graphs(user=request.user),
        }
        return render(request, "console/dashboard.html", ctx, status=exc.status)
    d = dashboard.dashboard_for(user=request.user, filters=filters)
    return render(request, "console/dashboard.html", {"nav": "dashboard", "params": params, **dashboard_context(d)})


def dashboard_context(d: dashboard.Dashboard) -> dict[str, Any]:
    """The page's charts (SVG) and the numbers they draw, for the template's tables."""
    timing_bars = []
    for t in d.timing:
        label = f"{t.graph} / {t.node}"
        timing_bars.append(
            charts.Bar(
                f"{label} p50",
                t.p50_seconds,
                charts.duration_text(t.p50_seconds),
                t.link,
                f"{label}:p50",
                charts.PALETTE[0],
            )
        )
        timing_bars.append(
            charts.Bar(
                f"{label} p95",
                t.p95_seconds,
                charts.duration_text(t.p95_seconds),
                t.link,
                f"{label}:p95",
                charts.PALETTE[1],
            )
        )
    pending_now = sum(s.now for s in d.pending)
    return {
        "d": d,
        "graphs": d.graphs,
        "pending_now": pending_now,
        "step": dashboard.step_name(d.filters),
        "webhook_percent": round(d.webhook_share * 100, 1),
        "timing_rows": [
            (t, charts.duration_text(t.p50_seconds), charts.duration_text(t.p95_seconds)) for t in d.timing
        ],
        "pending_chart": charts.line_chart(
            "chart-pending",
            "Pending tasks over time by graph and gate",
            [charts.Series(f"{s.graph} / {s.node}", [(p.at, p.count) for p in s.points], s.link) for s in d.pending],
        ),
        "pending_rows": [(s, charts.colour_of(i)) for i, s in enumerate(d.pending)],
        "timing_chart": charts.bar_chart("chart-timing", "Time to decision per gate (p50 and p95)", timing_bars),
        "outcome_chart": charts.bar_chart(
            "chart-outcomes",
            "Decisions by outcome",
            [charts.Bar(c.label, c.count, str(c.count), c.link, c.key) for c in d.outcomes],
        ),
        "reviewer_chart": charts.bar_chart(
            "chart-reviewers",
            "Decisions per reviewer",
            [charts.Bar(c.label, c.count, str(c.count), c.link, c.key) for c in d.reviewers],
        ),
    }
