"""The team dashboard: how a review team's queue and decisions look over a date range.

Selectors only. Every number is computed by the database (grouped aggregates
and window functions), never by looping over tasks in Python, and the same SQL
runs on PostgreSQL and SQLite. Every number comes with the filter of the list
behind it (``link``), so the console and the API can send the reader there.

Scoping: every query starts from ``permissions.tasks_visible`` (graph scope,
API token scope), so a lead assigned to graph A never counts a task of graph B;
asking for graph B by name is a 404, like any object one may not see.

Percentiles are *nearest-rank* (the value at rank ``ceil(p/100 * n)`` of the
``n`` durations sorted ascending): an actual observed duration, identical on
both databases, computed with ``ROW_NUMBER()`` / ``COUNT(*)`` windows per gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, QuerySet
from django.db.models.expressions import Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from approvals import permissions
from approvals.deadlines import escalated_q, overdue_q
from approvals.errors import InvalidInput, NotFound
from approvals.inputs import instant_parse, range_check
from approvals.models import ApprovalTask, Decision, Outcome, TaskStatus, WebhookEndpoint
from runtime.registry import graph_names

DEFAULT_RANGE = timedelta(days=7)
MAX_RANGE = timedelta(days=92)
HOURLY_UP_TO = timedelta(days=2)  # ranges up to two days are sampled hourly, longer ones daily
PERCENTILES = (50, 95)
MAX_REVIEWERS = 50  # the busiest reviewers shown; the rest are summed as "others"
INBOX_URL = "/"
DECISIONS_URL = "/decisions/"


@dataclass(frozen=True)
class DashboardFilters:
    graph: str
    since: datetime
    until: datetime

    @property
    def step(self) -> timedelta:
        return timedelta(hours=1) if self.until - self.since <= HOURLY_UP_TO else timedelta(days=1)

    def points(self) -> list[datetime]:
        """Sampling instants for "pending over time": since, since+step, ..., until (always included)."""
        out, at = [], self.since
        while at < self.until:
            out.append(at)
            if self.until - at <= self.step:  # the next step would pass until (or the year 9999)
                break
            at += self.step
        out.append(self.until)
        return out

    def range_params(self) -> dict[str, str]:
        # UTC without an offset: what the console's datetime-local pickers show and send back.
        return {"since": _utc_text(self.since), "until": _utc_text(self.until)}


def _utc_text(when: datetime) -> str:
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def _when(value: str, name: str, *, end: bool) -> datetime:
    """ISO 8601 date or date-time (UTC when no offset); a bare date as ``until`` means the end of that day."""
    return instant_parse(value, name, end=end)


def graph_require(user: permissions.Principal, graph: str) -> None:
    """``NotFound`` naming ``graph`` unless ``user`` may see it and it exists (``_graph_known``): a filter by
    a misspelt graph answered an empty list, read as "nothing there"."""
    if not _graph_known(user, graph):
        raise NotFound(f"graph {graph!r} not found", field="graph")


def _graph_known(user: permissions.Principal, graph: str) -> bool:
    """A graph ``user`` may see that exists: registered, or retired with tasks left to count. Whoever
    sees every graph is told an unknown name is unknown, as a lead of one graph is."""
    if not permissions.graph_visible(user, graph):
        return False
    return graph in graph_names() or permissions.tasks_visible(user).filter(graph=graph).exists()


def dashboard_filters_parse(
    *,
    user: permissions.Principal,
    graph: str | None = None,
    since: str | None = None,
    until: str | None = None,
    now: datetime | None = None,
) -> DashboardFilters:
    """Filters from query strings; empty values mean the default (every visible graph, the last 7 days)."""
    graph = (graph or "").strip()
    if len(graph) > 100:
        raise InvalidInput("graph: at most 100 characters", field="graph")
    if graph:
        graph_require(user, graph)
    now = now or timezone.now()
    end = _when(until.strip(), "until", end=True) if until and until.strip() else now
    if since and since.strip():
        start = _when(since.strip(), "since", end=False)
    elif end - datetime.min.replace(tzinfo=UTC) < DEFAULT_RANGE:
        # In range itself: the default start, DEFAULT_RANGE before it, is not.
        raise InvalidInput(
            f"until: without since, the range starts {DEFAULT_RANGE.days} days earlier, which is out of range"
            " (before 0001-01-01): give since too",
            field="until",
        )
    else:
        start = end - DEFAULT_RANGE
    range_check(start, end)
    if end - start > MAX_RANGE:
        raise InvalidInput(f"since: the range may span at most {MAX_RANGE.days} days", field="since")
    return DashboardFilters(graph=graph, since=start, until=end)


# --- what each number counts (one function each, shared with the lists they link to) ----------


def decisions_by_webhook_q() -> Q:
    """Decisions signed by an inbound webhook's service principal (retired endpoints' rows stay, so count)."""
    return Q(actor_id__in=WebhookEndpoint.objects.values("principal_id"))


# --- the numbers -------------------------------------------------------------------------


@dataclass
class Point:
    at: datetime
    count: int


@dataclass
class PendingSeries:
    graph: str
    node: str
    points: list[Point]
    now: int  # pending at ``until`` (the last point)
    link: str


@dataclass
class GateTiming:
    graph: str
    node: str
    decided: int
    p50_seconds: float
    p95_seconds: float
    link: str


@dataclass
class Counted:
    key: str
    label: str
    count: int
    link: str


@dataclass
class Dashboard:
    filters: DashboardFilters
    pending: list[PendingSeries]
    timing: list[GateTiming]
    overdue: Counted
    escalated: Counted
    outcomes: list[Counted]
    reviewers: list[Counted]
    webhook: Counted
    decisions_total: int
    webhook_share: float  # 0..1 of decisions_total
    graphs: list[str] = field(default_factory=list)


def _link(base: str, **params: str) -> str:
    kept = {k: v for k, v in params.items() if v}
    return base + ("?" + urlencode(kept) if kept else "")


def _tasks(user: permissions.Principal, filters: DashboardFilters) -> QuerySet[ApprovalTask]:
    qs = permissions.tasks_visible(user)
    return qs.filter(graph=filters.graph) if filters.graph else qs


def _decisions(user: permissions.Principal, filters: DashboardFilters) -> QuerySet[Decision]:
    qs = Decision.objects.filter(
        task__in=_tasks(user, filters), created_at__gte=filters.since, created_at__lt=filters.until
    )
    return qs


def pending_over_time(*, user: permissions.Principal, filters: DashboardFilters) -> list[PendingSeries]:
    """Per graph and gate, how many tasks were pending at each sampling instant: one grouped query.

    A task is pending at ``t`` if it was opened at or before ``t`` and is still pending, or was
    decided after ``t``. Superseded and cancelled tasks record no closing time and are left out.
    """
    points = filters.points()
    aggregates = {
        f"p{i}": Count(
            "id",
            filter=Q(created_at__lte=at) & (Q(status=TaskStatus.PENDING) | Q(decided_at__gt=at)),
        )
        for i, at in enumerate(points)
    }
    rows: Any = (  # values() rows with the p<i> aggregates (not in the stubs' TypedDict)
        _tasks(user, filters)
        .filter(created_at__lte=filters.until)
        .filter(Q(status=TaskStatus.PENDING) | Q(status=TaskStatus.DECIDED, decided_at__gt=filters.since))
        .order_by()
        .values("graph", "node")
        .annotate(**aggregates)
        .order_by("graph", "node")
    )
    return [
        PendingSeries(
            graph=row["graph"],
            node=row["node"],
            points=[Point(at=at, count=row[f"p{i}"]) for i, at in enumerate(points)],
            now=row[f"p{len(points) - 1}"],
            link=_link(INBOX_URL, graph=row["graph"], node=row["node"]),
        )
        for row in rows
    ]


def time_to_decision(*, user: permissions.Principal, filters: DashboardFilters) -> list[GateTiming]:
    """p50 and p95 of (decided_at - created_at) per gate, for tasks decided in the range (nearest rank)."""
    gate = [F("graph"), F("node")]
    ranked = (
        _tasks(user, filters)
        .filter(status=TaskStatus.DECIDED, decided_at__gte=filters.since, decided_at__lt=filters.until)
        .annotate(waited=ExpressionWrapper(F("decided_at") - F("created_at"), output_field=DurationField()))
        .annotate(
            rank=Window(RowNumber(), partition_by=gate, order_by=[F("waited").asc(), F("id").asc()]),
            total=Window(Count("id"), partition_by=gate),
        )
    )
    # rank = ceil(p * total / 100) in integer arithmetic (the same on both databases: no float rounding).
    wanted = Q()
    for p in PERCENTILES:
        wanted |= Q(rank=(F("total") * p + 99) / 100)
    rows = ranked.filter(wanted).values("graph", "node", "rank", "total", "waited").order_by("graph", "node", "rank")
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:  # at most two rows per gate
        entry = found.setdefault((row["graph"], row["node"]), {"total": row["total"]})
        for p in PERCENTILES:
            if row["rank"] == (row["total"] * p + 99) // 100:
                entry[f"p{p}"] = _seconds(row["waited"])
    return [
        GateTiming(
            graph=graph,
            node=node,
            decided=entry["total"],
            p50_seconds=entry["p50"],
            p95_seconds=entry["p95"],
            link=_link(DECISIONS_URL, graph=graph, node=node, **filters.range_params()),
        )
        for (graph, node), entry in sorted(found.items())
    ]


def _seconds(value: Any) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value) / 1_000_000  # a backend that hands back microseconds


def queue_alarms(
    *, user: permissions.Principal, filters: DashboardFilters, now: datetime | None = None
) -> tuple[Counted, Counted]:
    """Overdue and escalated open tasks, as they stand now (the date range does not apply)."""
    now = now or timezone.now()
    counts = _tasks(user, filters).aggregate(
        overdue=Count("id", filter=overdue_q(now=now)), escalated=Count("id", filter=escalated_q())
    )
    overdue = Counted("overdue", "Overdue", counts["overdue"], _link(INBOX_URL, graph=filters.graph, due="overdue"))
    escalated = Counted(
        "escalated", "Escalated", counts["escalated"], _link(INBOX_URL, graph=filters.graph, due="escalated")
    )
    return overdue, escalated


def decision_counts(
    *, user: permissions.Principal, filters: DashboardFilters
) -> tuple[list[Counted], list[Counted], Counted, int]:
    """Decisions in the range: by outcome, by reviewer (busiest first), and how many a webhook signed."""
    decisions = _decisions(user, filters)
    span = filters.range_params()
    by_outcome = dict(decisions.order_by().values_list("outcome").annotate(n=Count("id")))
    outcomes = [
        Counted(
            value,
            str(label),
            by_outcome.get(value, 0),
            _link(DECISIONS_URL, graph=filters.graph, outcome=value, **span),
        )
        for value, label in Outcome.choices
    ]
    by_actor = (
        decisions.order_by()
        .values("actor__username")
        .annotate(n=Count("id"))
        .order_by("-n", "actor__username")[:MAX_REVIEWERS]
    )
    reviewers = [
        Counted(
            row["actor__username"],
            row["actor__username"],
            row["n"],
            _link(DECISIONS_URL, graph=filters.graph, actor=row["actor__username"], **span),
        )
        for row in by_actor
    ]
    totals = decisions.aggregate(total=Count("id"), webhook=Count("id", filter=decisions_by_webhook_q()))
    webhook = Counted(
        "webhook",
        "Decided by webhook",
        totals["webhook"],
        _link(DECISIONS_URL, graph=filters.graph, via="webhook", **span),
    )
    return outcomes, reviewers, webhook, totals["total"]


def step_name(filters: DashboardFilters) -> str:
    return "hour" if filters.step == timedelta(hours=1) else "day"


def require_viewer(user: permissions.Principal) -> None:
    """Refuse before parsing filters: who may not see the dashboard learns nothing from its validation."""
    permissions.require_dashboard(user)


def dashboard_for(*, user: permissions.Principal, filters: DashboardFilters, now: datetime | None = None) -> Dashboard:
    """Everything the dashboard shows, for what ``user`` may see."""
    permissions.require_dashboard(user)
    overdue, escalated = queue_alarms(user=user, filters=filters, now=now)
    outcomes, reviewers, webhook, total = decision_counts(user=user, filters=filters)
    return Dashboard(
        filters=filters,
        pending=pending_over_time(user=user, filters=filters),
        timing=time_to_decision(user=user, filters=filters),
        overdue=overdue,
        escalated=escalated,
        outcomes=outcomes,
        reviewers=reviewers,
        webhook=webhook,
        decisions_total=total,
        webhook_share=(webhook.count / total) if total else 0.0,
        graphs=dashboard_graphs(user=user),
    )


def dashboard_graphs(*, user: permissions.Principal) -> list[str]:
    """The graphs the filter menu offers: those ``user`` may see (with tasks, when that is every graph)."""
    visible = permissions.graphs_visible(user)
    if visible is None:
        visible = set(permissions.tasks_visible(user).order_by().values_list("graph", flat=True).distinct()[:500])
    return sorted(g for g in visible if g != permissions.ALL_GRAPHS)
