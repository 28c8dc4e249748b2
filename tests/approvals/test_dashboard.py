"""The team dashboard's numbers: exact on seeded data (percentiles included), scoped, filtered, refusing bad input.

Every test seeds tasks of graphs whose names are unique to it, and reads the
dashboard filtered to those graphs (or as a lead assigned only to them), so
rows other tests leave behind never change a number here.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from approvals import dashboard
from approvals.errors import Forbidden, InvalidInput, NotFound
from approvals.models import ApprovalTask, Decision, GraphAssignment, WebhookEndpoint
from approvals.roles import roles_ensure
from approvals.tokens import token_issue
from tests.conftest import ApiClient, Persona
from tests.factories import decision_make, task_decided, task_make
from tests.sqlite_probe import sqlite_probe

pytestmark = pytest.mark.usefixtures("live_db")

T0 = datetime(2026, 6, 1, tzinfo=UTC)


def _graph(prefix: str = "dash") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _decision(task: ApprovalTask, actor, *, outcome: str = "approve", at: datetime) -> Decision:
    """``actor``'s decision on ``task`` at ``at``, through the service."""
    # These graphs are not registered: a reason is required to reject or edit, and an edit edits the action.
    extra: dict = {"reason": "seeded"} if outcome in ("reject", "edit") else {}
    if outcome == "edit":
        extra["action_args"] = {"amount": 1}
    return decision_make(task, actor, outcome, at=at, **extra)


def _decided(
    by, graph: str, node: str, *, created: datetime, waited: timedelta, outcome: str = "approve"
) -> ApprovalTask:
    """A task of ``graph`` opened at ``created`` and decided by ``by`` ``waited`` later."""
    task = task_make(graph=graph, node=node, created_at=created)
    _decision(task, by, outcome=outcome, at=created + waited)
    task.refresh_from_db()
    return task


def hook_principal_make(graph: str, gate: str = "human_review"):
    """An inbound webhook endpoint's principal deciding ``gate`` of ``graph``, as webhook_endpoint_create makes it
    (the service role, one gate-scoped assignment); made here because that service needs a registered graph."""
    name = f"dash-{uuid.uuid4().hex[:8]}"
    principal = get_user_model().objects.create_user(f"webhook:{name}")
    principal.groups.add(roles_ensure()["service"])
    GraphAssignment.objects.create(user=principal, graph=graph, gate=gate)
    WebhookEndpoint.objects.create(name=name, graph=graph, gates=[gate], principal=principal)
    return principal


def lead_make(graphs: list[str]) -> Persona:
    user = get_user_model().objects.create_user(f"lead-{uuid.uuid4().hex[:6]}", password="gatehouse")
    user.groups.add(roles_ensure()["lead"])
    for graph in graphs:
        GraphAssignment.objects.create(user=user, graph=graph)
    return Persona(user.username, "lead", token_issue(user=user), user)


def _filters(user, graph: str = "", since: str = "", until: str = "") -> dashboard.DashboardFilters:
    return dashboard.dashboard_filters_parse(user=user, graph=graph, since=since, until=until)


# --- the numbers ----------------------------------------------------------------------------


def test_percentiles_are_nearest_rank_per_gate(auditor, reviewer):
    graph = _graph()
    for minutes in range(20, 0, -1):  # inserted in reverse: the database sorts, not the insert order
        _decided(reviewer.user, graph, "review", created=T0 + timedelta(hours=1), waited=timedelta(minutes=minutes))
    for hours in (5, 1, 9):
        _decided(reviewer.user, graph, "second_look", created=T0 + timedelta(hours=2), waited=timedelta(hours=hours))
    _decided(reviewer.user, graph, "single", created=T0, waited=timedelta(seconds=42))
    # Decided outside the range: not counted.
    _decided(reviewer.user, graph, "review", created=T0 - timedelta(days=3), waited=timedelta(hours=1))
    # Still pending: has no time to decision.
    task_make(graph=graph, node="review", created_at=T0)

    f = _filters(auditor.user, graph, "2026-06-01", "2026-06-03")
    timing = {(t.node): t for t in dashboard.time_to_decision(user=auditor.user, filters=f)}

    assert set(timing) == {"review", "second_look", "single"}
    assert (timing["review"].decided, timing["review"].p50_seconds, timing["review"].p95_seconds) == (20, 600, 1140)
    assert (timing["second_look"].decided, timing["second_look"].p50_seconds, timing["second_look"].p95_seconds) == (
        3,
        5 * 3600,
        9 * 3600,
    )
    assert (timing["single"].p50_seconds, timing["single"].p95_seconds) == (42, 42)
    assert timing["review"].link.startswith("/decisions/?")
    assert f"graph={graph}" in timing["review"].link and "node=review" in timing["review"].link


def test_pending_over_time_counts_what_was_open_at_each_instant(auditor, reviewer):
    graph = _graph()
    task_make(graph=graph, node="gate", created_at=T0 - timedelta(hours=1))  # open throughout
    _decided(
        reviewer.user, graph, "gate", created=T0 + timedelta(hours=12), waited=timedelta(hours=24)
    )  # open at day 1
    # opened at day 1, closed day 2
    _decided(reviewer.user, graph, "gate", created=T0 + timedelta(days=1), waited=timedelta(days=1))
    task_make(graph=graph, node="gate", status="superseded", created_at=T0)  # no closing time: left out
    task_make(graph=graph, node="gate", created_at=T0 + timedelta(days=3, hours=1))  # after the range
    task_make(graph=graph, node="other", created_at=T0 + timedelta(days=2))

    f = _filters(auditor.user, graph, T0.isoformat(), (T0 + timedelta(days=3)).isoformat())
    series = {s.node: s for s in dashboard.pending_over_time(user=auditor.user, filters=f)}

    assert [p.at for p in series["gate"].points] == [T0 + timedelta(days=i) for i in range(4)]
    assert [p.count for p in series["gate"].points] == [1, 3, 1, 1]
    assert [p.count for p in series["other"].points] == [0, 0, 1, 1]
    assert series["gate"].now == 1
    assert series["gate"].link == f"/?graph={graph}&node=gate"


def test_a_short_range_is_sampled_hourly(auditor):
    f = _filters(auditor.user, "", T0.isoformat(), (T0 + timedelta(hours=5)).isoformat())
    assert len(f.points()) == 6 and f.step == timedelta(hours=1)


def test_overdue_counts_open_tasks_past_due_whatever_the_range(auditor, reviewer):
    graph = _graph()
    now = timezone.now()
    task_make(graph=graph, due_at=now - timedelta(minutes=5))
    task_make(graph=graph, due_at=now - timedelta(days=30))
    task_make(graph=graph, due_at=now + timedelta(hours=1))  # not yet due
    task_make(graph=graph)  # no due time
    task_decided(by=reviewer.user, graph=graph, due_at=now - timedelta(hours=1))  # closed

    overdue, escalated = dashboard.queue_alarms(user=auditor.user, filters=_filters(auditor.user, graph))

    assert overdue.count == 2
    assert overdue.link == f"/?graph={graph}&due=overdue"
    assert escalated.count == 0  # none of these was escalated
    assert escalated.link == f"/?graph={graph}&due=escalated"


def test_decisions_by_outcome_reviewer_and_webhook(auditor, personas):
    graph = _graph()
    reviewer, approver = personas["reviewer"].user, personas["approver"].user
    hook_user = hook_principal_make(graph)
    at = T0 + timedelta(hours=3)
    for actor, outcome in [
        (reviewer, "approve"),
        (reviewer, "approve"),
        (reviewer, "reject"),
        (approver, "edit"),
        (approver, "approve"),
        (hook_user, "approve"),
        (hook_user, "reject"),
    ]:
        _decision(task_make(graph=graph), actor, outcome=outcome, at=at)
    _decision(task_make(graph=graph), reviewer, at=T0 - timedelta(days=1))  # before the range

    f = _filters(auditor.user, graph, "2026-06-01", "2026-06-02")
    outcomes, reviewers, webhook, total = dashboard.decision_counts(user=auditor.user, filters=f)

    assert {c.key: c.count for c in outcomes} == {"approve": 4, "reject": 2, "edit": 1, "respond": 0}
    assert [(c.key, c.count) for c in reviewers] == sorted(
        [(reviewer.username, 3), (approver.username, 2), (hook_user.username, 2)], key=lambda kv: (-kv[1], kv[0])
    )
    assert (webhook.count, total) == (2, 7)
    d = dashboard.dashboard_for(user=auditor.user, filters=f)
    assert d.webhook_share == pytest.approx(2 / 7)
    assert "via=webhook" in webhook.link and f"graph={graph}" in webhook.link
    assert "outcome=reject" in next(c.link for c in outcomes if c.key == "reject")


# --- scoping ------------------------------------------------------------------------------------


def test_a_lead_scoped_to_one_graph_never_sees_another_graphs_numbers(reviewer):
    mine, theirs = _graph("dashA"), _graph("dashB")
    lead = lead_make([mine])
    lead_make([theirs])  # a lead of the other graph, whose numbers these are
    now = timezone.now()
    task_make(graph=mine, due_at=now - timedelta(hours=1))
    for _ in range(3):
        task_make(graph=theirs, due_at=now - timedelta(hours=1))
    _decision(task_make(graph=theirs), reviewer.user, at=now - timedelta(hours=1))

    d = dashboard.dashboard_for(user=lead.user, filters=_filters(lead.user))

    assert d.overdue.count == 1
    assert {s.graph for s in d.pending} == {mine}
    assert d.decisions_total == 0 and d.reviewers == []
    assert d.graphs == [mine]
    # Naming the other graph is a 404, as for any object one may not see.
    with pytest.raises(NotFound) as exc:
        _filters(lead.user, theirs)
    assert exc.value.field == "graph"
    # Through the API, too: the token's user is scoped the same way.
    response = lead.client.get("/api/dashboard", graph=theirs)
    assert response.status_code == 404 and response.json()["error"]["field"] == "graph"
    body = lead.client.get("/api/dashboard").json()
    assert body["overdue"]["count"] == 1
    assert {s["graph"] for s in body["pending"]} == {mine}


def test_a_token_scoped_to_a_graph_narrows_an_auditor(auditor):
    mine, theirs = _graph(), _graph()
    task_make(graph=mine, due_at=timezone.now() - timedelta(hours=1))
    task_make(graph=theirs, due_at=timezone.now() - timedelta(hours=1))
    token = token_issue(user=auditor.user, graphs=[mine], actions=["read"])
    client = ApiClient(token)
    assert client.get("/api/dashboard", graph=theirs).status_code == 404
    body = client.get("/api/dashboard").json()
    assert {s["graph"] for s in body["pending"]} == {mine}


def test_an_unknown_graph_is_a_404_for_whoever_sees_every_graph_too(auditor):
    # An auditor sees every graph; a typo used to answer a dashboard of zeros, a lead's a 404.
    response = auditor.client.get("/api/dashboard", graph="loan_aproval")
    assert response.status_code == 404 and response.json()["error"]["field"] == "graph"
    assert auditor.client.get("/api/dashboard", graph="loan_approval").status_code == 200  # registered
    retired = _graph("retired")  # no longer registered, but its tasks are still counted
    task_make(graph=retired)
    body = auditor.client.get("/api/dashboard", graph=retired).json()
    assert [s["graph"] for s in body["pending"]] == [retired]


@pytest.mark.parametrize(
    "role,expected", [("auditor", 200), ("admin", 200), ("reviewer", 403), ("approver", 403), ("operator", 403)]
)
def test_who_may_see_the_dashboard(personas, role, expected):
    assert personas[role].client.get("/api/dashboard").status_code == expected


def test_a_reviewer_is_refused_in_the_domain_too(personas):
    with pytest.raises(Forbidden):
        dashboard.dashboard_for(user=personas["reviewer"].user, filters=_filters(personas["reviewer"].user))


# --- filters and bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params,field",
    [
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-40"}, "until"),
        ({"since": "2026-06-02", "until": "2026-06-01"}, "since"),
        ({"since": "2026-01-01", "until": "2026-12-01"}, "since"),  # longer than 92 days
        ({"graph": "g" * 101}, "graph"),
        ({"since": "2026-06-01T00:00:00\x00"}, "since"),
    ],
)
def test_bad_filters_are_refused_naming_the_field(auditor, params, field):
    with pytest.raises(InvalidInput) as exc:
        dashboard.dashboard_filters_parse(user=auditor.user, **params)
    assert exc.value.field == field
    response = auditor.client.get("/api/dashboard", **params)
    assert 400 <= response.status_code < 500
    assert response.json()["error"]["field"] == field


def test_a_bare_until_date_means_the_end_of_that_day(auditor):
    f = _filters(auditor.user, "", "2026-06-01", "2026-06-01")
    assert (f.since, f.until) == (T0, T0 + timedelta(days=1))


def test_the_last_date_there_is_as_a_bare_until_is_the_end_of_time_not_out_of_range(auditor):
    """The end of 9999-12-31 is midnight of the year 10000: it was refused with "its UTC time must fall
    between 0001-01-01 and 9999-12-31", of a date in that range. Its last instant is that day's end."""
    f = _filters(auditor.user, "", "", "9999-12-31")
    assert f.until == datetime.max.replace(tzinfo=UTC) and f.since == f.until - dashboard.DEFAULT_RANGE
    response = auditor.client.get("/api/dashboard", until="9999-12-31")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["filters"]["until"].startswith("9999-12-31T23:59:59")


def test_an_until_too_early_for_the_default_range_says_why(auditor):
    """0001-01-02 is in range; the week before it, the default since, is not: "its UTC time must fall
    between 0001-01-01 and 9999-12-31" said of 0001-01-02 was untrue."""
    with pytest.raises(InvalidInput) as refused:
        _filters(auditor.user, "", "", "0001-01-02")
    assert refused.value.field == "until" and "give since too" in refused.value.message
    assert "must fall between" not in refused.value.message


def test_the_api_returns_the_numbers_with_their_links(auditor, personas):
    graph = _graph()
    for minutes in (10, 20, 30):
        _decided(personas["reviewer"].user, graph, "review", created=T0, waited=timedelta(minutes=minutes))
    body = auditor.client.get("/api/dashboard", graph=graph, since="2026-06-01", until="2026-06-01").json()

    assert body["filters"]["graph"] == graph and body["filters"]["step"] == "hour"
    [timing] = body["time_to_decision"]
    assert (timing["node"], timing["decided"], timing["p50_seconds"], timing["p95_seconds"]) == (
        "review",
        3,
        1200,
        1800,
    )
    assert {o["key"]: o["count"] for o in body["outcomes"]}["approve"] == 3
    assert body["reviewers"] == [
        {
            "key": personas["reviewer"].username,
            "label": personas["reviewer"].username,
            "count": 3,
            "link": body["reviewers"][0]["link"],
        }
    ]
    assert body["webhook"]["count"] == 0 and body["decisions_total"] == 3 and body["webhook_share"] == 0
    assert body["escalated"] is None or "count" in body["escalated"]
    assert body["reviewers"][0]["link"].startswith("/decisions/?")


# --- the same SQL on SQLite (embedded mode) ----------------------------------------------------------

_SQLITE_PROBE = """
import json
import django
django.setup()
from datetime import UTC, datetime, timedelta
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from approvals import dashboard
from approvals.models import GraphAssignment
from approvals.roles import roles_ensure
from tests.factories import decision_make, task_make

roles = roles_ensure()
user = get_user_model().objects.create_user("auditor")
user.groups.add(roles["auditor"])
reviewer = get_user_model().objects.create_user("reviewer")
reviewer.groups.add(roles["reviewer"])
GraphAssignment.objects.create(user=reviewer, graph="g")
T0 = datetime(2026, 6, 1, tzinfo=UTC)

def task(node, created, waited=None, status="pending"):
    t = task_make(graph="g", node=node, payload={}, status=status, created_at=created)
    if waited is not None:
        decision_make(t, reviewer, at=created + waited)

for minutes in range(20, 0, -1):
    task("review", T0 + timedelta(hours=1), timedelta(minutes=minutes))
for hours in (5, 1, 9):
    task("second_look", T0 + timedelta(hours=2), timedelta(hours=hours))
task("gate", T0 - timedelta(hours=1))
task("gate", T0 + timedelta(hours=12), timedelta(hours=24))
task("gate", T0 + timedelta(days=1), timedelta(days=1))
task("gate", T0, status="superseded")
f = dashboard.dashboard_filters_parse(user=user, since=T0.isoformat(), until=(T0 + timedelta(days=3)).isoformat())
timing = dashboard.time_to_decision(user=user, filters=f)
series = dashboard.pending_over_time(user=user, filters=f)
print(json.dumps({
    "timing": {t.node: [t.decided, t.p50_seconds, t.p95_seconds] for t in timing},
    "pending": {s.node: [p.count for p in s.points] for s in series},
}))
"""


@pytest.mark.embedded
def test_percentiles_and_series_are_the_same_on_sqlite(tmp_path):
    """The window and conditional-count SQL runs on SQLite (embedded mode) with the same results."""
    result = sqlite_probe(_SQLITE_PROBE, tmp_path / "var")
    assert result["timing"] == {
        "review": [20, 600, 1140],
        "second_look": [3, 5 * 3600, 9 * 3600],
        "gate": [2, 86400, 86400],
    }
    assert result["pending"]["gate"] == [1, 3, 1, 1]
