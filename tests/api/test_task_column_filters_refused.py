"""``GET /api/tasks`` never answers a filter or an order it cannot apply with the unfiltered list.

The attacker here is a client's own mistake: ``c.amount=abc`` (or a column the gate does not have, or
``sort=col:amount``) answered 200 with every task, so a script that "filtered" to small loans went on to
act on all of them. Each is a 422 naming the parameter; a good column filter filters, as the inbox's does.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from approvals.inbox_filter import InboxFilter
from approvals.selectors import tasks_inbox
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")

COLUMNS = [
    {"key": "amount", "path": "/amount", "label": "Amount", "type": "money", "currency": "EUR"},
    {"key": "risk", "path": "/details/risk_score", "type": "risk", "scale": [0, 100]},
    {"key": "country", "path": "/country"},
]


def _gate_tasks(gate: str, values: list[tuple[Any, Any, str]]) -> list[Any]:
    """Tasks at a gate of their own whose payload declares the inbox columns."""
    return [
        task_make(
            graph="loan_approval",
            node=gate,
            payload={
                "title": f"{gate} {amount}",
                "amount": amount,
                "details": {"risk_score": risk},
                "country": country,
                "columns": COLUMNS,
            },
            title=f"{gate} {amount}",
        )
        for amount, risk, country in values
    ]


@pytest.fixture
def gate() -> str:
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    _gate_tasks(gate, [(500, 10, "FR"), (20000, 72, "DE"), (1500, 40, "de")])
    return gate


def _refused(response: Any) -> str:
    assert response.status_code == 422, (response.status_code, response.content)
    return str(response.json()["error"]["field"])


def test_the_reported_request_is_refused_naming_the_column(personas):
    response = personas["reviewer"].client.get(
        "/api/tasks", graph="loan_approval", gate="human_review", **{"c.bogus": "1"}
    )
    assert _refused(response) == "c.bogus"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"c.bogus": "1"}, "c.bogus"),
        ({"c.amount": "abc"}, "c.amount"),
        ({"c.amount": ">=1e400"}, "c.amount"),  # not finite
        ({"c.amount": "10..x"}, "c.amount"),
        ({"c.amount": ">=\u0661"}, "c.amount"),  # an Arabic-Indic digit, which float() would read
        ({"c.risk": "lots"}, "c.risk"),
        ({"c.country": "x" * 201}, "c.country"),
        ({"c.amount": ["1", "2"]}, "c.amount"),  # which one? neither
        ({"c.": "1"}, "c."),
        ({"sort": "col:bogus"}, "sort"),
        ({"sort": "col:amount"}, "sort"),  # the list is newest first: no order is silently dropped either
        ({"sort": "-created_at"}, "sort"),
        ({"amount": ">=1000"}, "amount"),  # a filter this list does not have, not a column's c.amount
        ({"assignee": "me"}, "assignee"),
        ({"node": "other_gate"}, "node"),  # node is an alias of gate: both, different, is ambiguous
        ({f"c.k{i}": "1" for i in range(9)}, "c.k8"),  # at most 8 column filters
    ],
)
def test_a_bad_column_filter_or_sort_is_a_422_naming_it(personas, gate, params, field):
    response = personas["approver"].client.get("/api/tasks", graph="loan_approval", gate=gate, **params)
    assert _refused(response) == field


def test_a_column_filter_without_a_gate_is_refused(personas, gate):
    assert _refused(personas["approver"].client.get("/api/tasks", **{"c.amount": ">=1000"})) == "c.amount"


def test_a_column_filter_filters_as_the_inbox_does(personas, gate):
    client = personas["approver"].client
    params = {"graph": "loan_approval", "gate": gate, "c.amount": ">=1500", "c.country": "DE"}
    response = client.get("/api/tasks", **params)
    assert response.status_code == 200, response.content
    titles = sorted(item["title"] for item in response.json()["items"])
    assert titles == [f"{gate} 1500", f"{gate} 20000"]
    wanted = InboxFilter(graph="loan_approval", node=gate, columns={"amount": ">=1500", "country": "DE"})
    assert {str(t.pk) for t in tasks_inbox(user=personas["approver"].user, filter=wanted)} == {
        item["id"] for item in response.json()["items"]
    }
    ranged = client.get("/api/tasks", graph="loan_approval", node=gate, **{"c.risk": "30..80"})  # node: gate's alias
    assert sorted(item["title"] for item in ranged.json()["items"]) == [f"{gate} 1500", f"{gate} 20000"]
    empty = client.get("/api/tasks", graph="loan_approval", gate=gate, **{"c.amount": ""})  # no filter, as on the page
    assert len(empty.json()["items"]) == 3


def test_a_column_redacted_for_the_reader_cannot_be_filtered_by(personas):
    """Filtering by a value the reader may not see would reveal it a bisection at a time."""
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    columns = [{"key": "dob", "path": "/applicant/date_of_birth", "label": "Born"}]
    task_make(
        graph="kyc_onboarding",
        node=gate,
        payload={"title": "kyc", "applicant": {"date_of_birth": "1961-01-30"}, "columns": columns},
    )
    response = personas["reviewer"].client.get("/api/tasks", graph="kyc_onboarding", gate=gate, **{"c.dob": "1961"})
    assert _refused(response) == "c.dob"
