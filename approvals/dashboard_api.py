"""``GET /api/dashboard``: the team dashboard's numbers, each with the console list behind it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Query, Router, Schema

from approvals import dashboard
from approvals.api_common import AuthedRequest

router = Router(tags=["dashboard"])


class DashboardQuery(Schema):
    # Plain strings: the console's filter form sends empty fields, which mean "the default".
    graph: str | None = None
    since: str | None = None
    until: str | None = None


class FiltersOut(Schema):
    graph: str
    since: datetime
    until: datetime
    step: str  # "hour" | "day": the spacing of the pending series' points


class PointOut(Schema):
    at: datetime
    count: int


class PendingSeriesOut(Schema):
    graph: str
    node: str
    now: int
    link: str
    points: list[PointOut]


class GateTimingOut(Schema):
    graph: str
    node: str
    decided: int
    p50_seconds: float
    p95_seconds: float
    link: str


class CountedOut(Schema):
    key: str
    label: str
    count: int
    link: str


class DashboardOut(Schema):
    filters: FiltersOut
    graphs: list[str]
    pending: list[PendingSeriesOut]
    time_to_decision: list[GateTimingOut]
    overdue: CountedOut
    escalated: CountedOut
    outcomes: list[CountedOut]
    reviewers: list[CountedOut]
    webhook: CountedOut
    decisions_total: int
    webhook_share: float


def dashboard_out(d: dashboard.Dashboard) -> dict[str, Any]:
    f = d.filters
    return {
        "filters": {"graph": f.graph, "since": f.since, "until": f.until, "step": dashboard.step_name(f)},
        "graphs": d.graphs,
        "pending": d.pending,
        "time_to_decision": d.timing,
        "overdue": d.overdue,
        "escalated": d.escalated,
        "outcomes": d.outcomes,
        "reviewers": d.reviewers,
        "webhook": d.webhook,
        "decisions_total": d.decisions_total,
        "webhook_share": d.webhook_share,
    }


@router.get("/dashboard", response=DashboardOut)
def dashboard_get(request: AuthedRequest, query: Query[DashboardQuery]) -> dict[str, Any]:
    """Pending tasks over time per gate, time to decision (p50/p95, nearest rank) per gate, overdue and
    escalated open tasks, decisions by outcome and by reviewer, and the share a webhook decided.

    `since`/`until`: ISO 8601 dates or date-times (UTC without an offset; a bare `until` date is the end
    of that day), at most 92 days apart; default the last 7 days. Only graphs you may see are counted;
    naming another is a 404. Every number carries `link`, the console list behind it.
    """
    user = request.auth
    dashboard.require_viewer(user)
    filters = dashboard.dashboard_filters_parse(user=user, graph=query.graph, since=query.since, until=query.until)
    return dashboard_out(dashboard.dashboard_for(user=user, filters=filters))
