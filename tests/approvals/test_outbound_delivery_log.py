"""The outbound delivery log reconstructs a decision's deliveries: it pages without a gap, filters by thread
(graph, event type, status), refuses a filter it does not have, and shows each delivery's thread."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from approvals.models import OutboundDelivery, OutboundStatus, WebhookSubscription
from approvals.outbound import subscriptions
from tests.console.conftest import console_client

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def log() -> Iterator[dict[str, Any]]:
    """Two subscriptions (loan_approval, kyc_onboarding) and their deliveries: 9 of one thread, 3 of another."""
    made = [
        subscriptions.subscription_create(
            actor=None,
            url=f"http://127.0.0.1:9/{graph}-{uuid.uuid4().hex[:6]}",
            graph=graph,
            event_types=["task.decided"],
        )
        for graph in ("loan_approval", "kyc_onboarding")
    ]
    # Nothing of the rest of the suite is queued to them (a closed port, retried on the worker).
    WebhookSubscription.objects.filter(pk__in=[s.pk for s in made]).update(active=False)
    loan, kyc = made
    examined, other = uuid.uuid4(), uuid.uuid4()

    def delivery(subscription: WebhookSubscription, thread: uuid.UUID, **fields: Any) -> OutboundDelivery:
        return OutboundDelivery.objects.create(
            subscription=subscription,
            event_id=f"evt_{uuid.uuid4().hex[:12]}",
            event_type=fields.pop("event_type", "task.decided"),
            graph=subscription.graph,
            payload={"type": "task.decided", "data": {"thread_id": str(thread), "decision_id": "d-1"}},
            thread_id=thread,
            **fields,
        )

    mine = [delivery(loan, examined, status=OutboundStatus.DELIVERED, response_code=200) for _ in range(9)]
    theirs = [delivery(loan, other, event_type="task.signed") for _ in range(3)]
    kyc_rows = [delivery(kyc, examined)]
    yield {"loan": loan, "kyc": kyc, "thread": examined, "mine": mine, "theirs": theirs, "kyc_rows": kyc_rows}


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [row["id"] for row in rows]


def test_the_api_pages_back_through_every_delivery_without_a_gap(personas, log):
    client = personas["operator"].client
    wanted = sorted((d.pk for d in log["mine"] + log["theirs"]), reverse=True)
    seen: list[int] = []
    page = client.get("/api/webhook-deliveries", subscription=log["loan"].pk, limit=4).json()
    while page:
        seen += _ids(page)
        page = client.get("/api/webhook-deliveries", subscription=log["loan"].pk, limit=4, before_id=seen[-1]).json()
    assert seen == wanted


def test_the_api_lists_a_threads_deliveries_with_what_they_carry(personas, log):
    rows = personas["operator"].client.get("/api/webhook-deliveries", thread=str(log["thread"])).json()
    assert _ids(rows) == sorted((d.pk for d in log["mine"] + log["kyc_rows"]), reverse=True)
    first = rows[-1]
    assert first["thread_id"] == str(log["thread"]) and first["decision_id"] == "d-1"
    assert first["url"] == log["loan"].url and first["response_code"] == 200


@pytest.mark.parametrize(
    "params,expected",
    [
        ({"graph": "kyc_onboarding"}, "kyc_rows"),
        ({"event_type": "task.signed"}, "theirs"),
        ({"status": "delivered"}, "mine"),
    ],
)
def test_the_api_filters_by_graph_event_type_and_status(personas, log, params, expected):
    scope = {"subscription": log["loan"].pk} if expected != "kyc_rows" else {}
    rows = personas["operator"].client.get("/api/webhook-deliveries", **scope, **params, limit=500)
    found = set(_ids(rows.json()))
    assert {d.pk for d in log[expected]} <= found
    others = {d.pk for key in ("mine", "theirs", "kyc_rows") if key != expected for d in log[key]}
    assert not found & others


@pytest.mark.parametrize("name", ["bogus", "thread_id", "cursor", "sort"])
def test_the_api_refuses_a_parameter_it_does_not_take_naming_it(personas, log, name):
    response = personas["operator"].client.get("/api/webhook-deliveries", **{name: "1"})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == name


@pytest.mark.parametrize("field,value", [("thread", "not-a-uuid"), ("before_id", "-1"), ("status", "sent")])
def test_a_bad_filter_is_a_422_naming_it(personas, log, field, value):
    response = personas["operator"].client.get("/api/webhook-deliveries", **{field: value})
    assert response.status_code == 422, response.content
    assert field in response.content.decode()


def test_a_reviewer_of_one_graph_sees_none_of_another_graphs_deliveries(personas, log):
    """Visibility is unchanged: deliveries are seen through subscriptions one may see (operators, admins,
    auditors; a reader scoped to a graph sees only that graph's)."""
    ids = set(_ids(personas["loan_reviewer"].client.get("/api/webhook-deliveries", thread=str(log["thread"])).json()))
    assert not ids & {d.pk for d in log["kyc_rows"]}
    assert set(_ids(personas["auditor"].client.get("/api/webhook-deliveries", thread=str(log["thread"])).json())) == {
        d.pk for d in log["mine"] + log["kyc_rows"]
    }


def test_the_console_log_filters_by_thread_links_it_and_pages(personas, log, monkeypatch):
    from console.views import webhooks as view

    monkeypatch.setattr(view, "LOG_PAGE", 4)
    client = console_client(personas["operator"])
    html = client.get("/webhooks/", {"thread": str(log["thread"])}).content.decode()
    log_html = html[html.index('id="delivery-log"') :]
    newest = sorted((d.pk for d in log["mine"] + log["kyc_rows"]), reverse=True)
    for pk in newest[:4]:
        assert f'id="log-outbound-{pk}"' in log_html
    for pk in newest[4:] + [d.pk for d in log["theirs"]]:
        assert f'id="log-outbound-{pk}"' not in log_html
    assert f'href="/threads/{log["thread"]}/"' in log_html
    assert f"before={newest[3]}" in log_html  # the next page starts below the last row shown
    older = client.get("/webhooks/", {"thread": str(log["thread"]), "before": newest[3]}).content.decode()
    older_log = older[older.index('id="delivery-log"') :]
    for pk in newest[4:8]:
        assert f'id="log-outbound-{pk}"' in older_log


def test_the_console_log_refuses_a_bad_thread_naming_it(personas, log):
    response = console_client(personas["operator"]).get("/webhooks/", {"thread": "nope"})
    assert response.status_code == 422
    assert "thread" in response.content.decode()


@pytest.mark.parametrize(
    ("role", "audit", "deliveries"),
    [("auditor", True, True), ("operator", False, True), ("reviewer", False, False)],
)
def test_a_threads_page_links_its_audit_trail_and_its_deliveries_for_who_may_read_them(
    personas, role, audit, deliveries
):
    """An examiner rebuilding a decision from its thread's page found no way to the deliveries it caused."""
    from tests.factories import thread_make

    thread = thread_make()
    html = console_client(personas[role]).get(f"/threads/{thread.pk}/").content.decode()
    assert (f'href="/audit/?thread={thread.pk}"' in html) is audit
    assert (f'href="/webhooks/?thread={thread.pk}#delivery-log"' in html) is deliveries
    if deliveries:  # the link leads somewhere that answers
        assert console_client(personas[role]).get("/webhooks/", {"thread": str(thread.pk)}).status_code == 200
