"""The dashboard page: who may open it, its charts and numbers (as text, linked), filters, bad input;
and the lists it links to (inbox overdue filter, decision history thread and webhook filters)."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from html import unescape

import pytest
from django.utils import timezone

from tests.approvals.test_dashboard import _decided, _decision, hook_principal_make, lead_make
from tests.console.conftest import console_client
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _graph() -> str:
    return f"dashv_{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize(
    "role,expected",
    [("auditor", 200), ("admin", 200), ("reviewer", 403), ("approver", 403), ("operator", 403), ("outsider", 403)],
)
def test_who_may_open_the_dashboard(as_role, role, expected):
    response = as_role(role).get("/dashboard/")
    assert response.status_code == expected
    if expected == 403:
        assert b"chart-pending" not in response.content


def test_anonymous_is_sent_to_sign_in(client):
    response = client.get("/dashboard/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_page_draws_accessible_charts_with_the_numbers_as_text(as_role, personas):
    graph = _graph()
    now = timezone.now()
    task_make(graph=graph, node="review", due_at=now - timedelta(hours=1))
    for minutes in (10, 20, 30):
        _decided(
            personas["reviewer"].user,
            graph,
            "review",
            created=now - timedelta(hours=2),
            waited=timedelta(minutes=minutes),
        )
    html = as_role("auditor").get("/dashboard/", {"graph": graph}).content.decode()

    for chart in ("chart-pending", "chart-timing", "chart-outcomes", "chart-reviewers"):
        assert re.search(
            rf'<svg id="{chart}" class="chart" role="img" aria-labelledby="{chart}-title {chart}-desc"', html
        )
        assert f'<title id="{chart}-title">' in html
    assert 'data-metric="overdue" data-value="1"' in html
    assert f'href="/?graph={graph}&amp;due=overdue"' in html
    assert 'data-metric="p50" data-value="1200.0">20 min<' in html
    assert 'data-metric="p95" data-value="1800.0">30 min<' in html
    assert f"{personas['reviewer'].username}: 3</title>" in html
    assert "<script" not in html.split("<main", 1)[-1].split("</main>", 1)[0]  # no chart library


def test_a_lead_sees_only_their_graph_on_the_page():
    mine, theirs = _graph(), _graph()
    lead = lead_make([mine])
    task_make(graph=mine, node="gate_a")
    task_make(graph=theirs, node="gate_b")
    client = console_client(lead)
    html = client.get("/dashboard/").content.decode()
    assert mine in html and theirs not in html
    response = client.get("/dashboard/", {"graph": theirs})
    assert response.status_code == 404 and theirs not in unescape(response.content.decode()).split("not found")[-1]


@pytest.mark.parametrize(
    "params,field",
    [
        ({"since": "soon"}, "since"),
        ({"until": "2026-02-30"}, "until"),
        ({"since": "2026-06-02", "until": "2026-06-01"}, "since"),
    ],
)
def test_bad_filters_are_a_4xx_naming_the_field(as_role, params, field):
    response = as_role("auditor").get("/dashboard/", params)
    assert response.status_code == 422
    assert f'data-field="{field}"' in response.content.decode()


def test_the_last_date_there_is_draws_the_dashboard_up_to_the_end_of_time(as_role):
    """?until=9999-12-31 said "its UTC time must fall between 0001-01-01 and 9999-12-31", of a date in it."""
    response = as_role("auditor").get("/dashboard/", {"until": "9999-12-31"})
    assert response.status_code == 200
    html = unescape(response.content.decode())
    assert "out of range" not in html and 'data-field="until"' not in html
    assert 'name="until" value="9999-12-31"' in html and "/ws/dashboard/?until=9999-12-31" in html  # counted, live


def test_the_overdue_link_lists_exactly_the_overdue_tasks(as_role):
    graph = _graph()
    now = timezone.now()
    late = task_make(graph=graph, due_at=now - timedelta(minutes=1))
    task_make(graph=graph, due_at=now + timedelta(hours=1))
    task_make(graph=graph)
    html = as_role("auditor").get("/", {"graph": graph, "due": "overdue"}).content.decode()
    assert set(re.findall(r'data-task-id="([0-9a-f-]+)"', html)) == {str(late.pk)}


def test_an_unknown_due_filter_is_refused_naming_the_field(as_role):
    html = as_role("auditor").get("/", {"due": "someday"}).content.decode()
    assert "due:" in html


def test_decision_history_filters_by_thread_and_by_webhook(as_role, personas):
    graph = _graph()
    hook_user = hook_principal_make(graph)
    now = timezone.now()
    by_hook = _decision(task_make(graph=graph), hook_user, at=now)
    by_person_task = task_make(graph=graph)
    by_person = _decision(by_person_task, personas["reviewer"].user, at=now)
    client = as_role("auditor")

    def ids(**params):
        html = client.get("/decisions/", {"graph": graph, **params}).content.decode()
        return set(re.findall(r'data-decision-id="([0-9a-f-]+)"', html))

    assert ids() == {str(by_hook.pk), str(by_person.pk)}
    assert ids(via="webhook") == {str(by_hook.pk)}
    assert ids(via="person") == {str(by_person.pk)}
    assert ids(thread=str(by_person_task.thread_id)) == {str(by_person.pk)}
    assert ids(thread=str(uuid.uuid4())) == set()
    html = client.get("/decisions/", {"thread": "not-a-uuid"}).content.decode()
    assert "thread:" in html and "data-decision-id" not in html
