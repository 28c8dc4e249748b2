"""The outbox keeps the subscriptions it read while their generation stands: never a stale or ghost one.

Every event-emitting transaction used to read its graph's subscriptions. Now the audit append reads the
subscriptions' generation (migration 0024) and the outbox uses what it read before while that number
stands. The attacks: a subscription made, deactivated or deleted after the process read the list, and a
subscription that only a rolled-back transaction ever saw (its number must never come back).
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from approvals.models import OutboundDelivery, WebhookSubscription
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")

SUBSCRIPTIONS_TABLE = WebhookSubscription._meta.db_table


def _graph() -> str:
    return f"outbox-{uuid.uuid4().hex[:8]}"


def _subscribe(graph: str) -> WebhookSubscription:
    return WebhookSubscription.objects.create(
        url="https://hooks.example.test/in", graph=graph, event_types=["task.opened"], secret="s" * 32
    )


def _announced(graph: str) -> list[tuple[int, str]]:
    """(subscription, task) of every task.opened delivery queued for ``graph``."""
    deliveries = OutboundDelivery.objects.filter(graph=graph, event_type="task.opened").order_by("id")
    return [(d.subscription_id, d.payload["data"]["task_id"]) for d in deliveries]


def _subscriptions_read(ctx: CaptureQueriesContext) -> int:
    return sum(SUBSCRIPTIONS_TABLE in query["sql"] for query in ctx.captured_queries)


def test_an_event_reads_no_subscriptions_while_they_are_unchanged_and_reads_them_after_a_change():
    graph = _graph()
    task_make(graph=graph)  # this process reads (and keeps) "none" for the graph
    with CaptureQueriesContext(connection) as ctx:
        task_make(graph=graph)
    assert _subscriptions_read(ctx) == 0

    subscription = _subscribe(graph)
    with CaptureQueriesContext(connection) as ctx:
        task = task_make(graph=graph)
    assert _subscriptions_read(ctx) == 1
    assert _announced(graph) == [(subscription.pk, str(task.pk))]


def test_a_subscription_made_after_the_list_was_read_gets_the_next_event():
    graph = _graph()
    task_make(graph=graph)
    subscription = _subscribe(graph)
    task = task_make(graph=graph)
    assert _announced(graph) == [(subscription.pk, str(task.pk))]


@pytest.mark.parametrize("end", ["deactivated", "deleted"])
def test_a_subscription_ended_after_the_list_was_read_gets_nothing_more(end):
    graph = _graph()
    subscription = _subscribe(graph)
    first = task_make(graph=graph)  # read and kept with the subscription in it
    if end == "deactivated":
        WebhookSubscription.objects.filter(pk=subscription.pk).update(active=False)
    else:
        OutboundDelivery.objects.filter(subscription=subscription).delete()
        subscription.delete()
    task_make(graph=graph)
    expected = [(subscription.pk, str(first.pk))] if end == "deactivated" else []
    assert _announced(graph) == expected


class _Rollback(Exception):
    pass


def test_a_subscription_only_a_rolled_back_transaction_saw_is_never_announced_to():
    graph = _graph()
    task_make(graph=graph)
    with pytest.raises(_Rollback), transaction.atomic():
        ghost = _subscribe(graph)
        task_make(graph=graph)  # inside: the list read with the ghost in it, at this transaction's number
        assert [sub for sub, _ in _announced(graph)] == [ghost.pk]
        raise _Rollback
    # A committed change elsewhere: were the number counted up, it would be the ghost's number again.
    _subscribe(_graph())
    task_make(graph=graph)
    assert _announced(graph) == []
