"""The inbox's sort orders are read from their indexes, not sorted: at 100k pending tasks a sort of
every one of them was 100 ms a page (bench/console_scale.py), an index scan that stops at the page's
last row is 3 ms. The planner is told sorting is off limits; a query whose ORDER BY no index can
give (an explicit ``NULLS LAST`` on the ``created_at DESC`` index, as happened) still needs a Sort."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from approvals.inbox_filter import InboxFilter
from console.selectors import inbox_list
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _plan(sql: str) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.parametrize("sort", ["newest", "oldest", "due"])
def test_each_inbox_order_is_read_from_an_index(personas, sort):
    task_make()
    with CaptureQueriesContext(connection) as ctx:
        inbox_list(user=personas["admin"].user, filter=InboxFilter(), sort=sort, limit=50)
    [listing] = [
        q["sql"] for q in ctx.captured_queries if 'FROM "approvals_approvaltask"' in q["sql"] and "ORDER BY" in q["sql"]
    ]
    plan = _plan(listing)
    assert " Sort " not in f" {plan} " and "Sort Key" not in plan, plan


@pytest.mark.parametrize("direction", ["cursor", "before"])
def test_a_page_deep_in_the_list_starts_its_index_scan_at_its_cursor(personas, direction):
    """Keyset pages: the (created_at, id) bound is an index condition, not a filter over the rows before it."""
    admin = personas["admin"].user
    for _ in range(3):
        task_make()
    first = inbox_list(user=admin, filter=InboxFilter(), limit=1)
    second = inbox_list(user=admin, filter=InboxFilter(), limit=1, cursor=first.next_cursor)
    link = {"cursor": second.next_cursor} if direction == "cursor" else {"before": second.prev_cursor}
    with CaptureQueriesContext(connection) as ctx:
        inbox_list(user=admin, filter=InboxFilter(), limit=1, **link)
    [listing] = [q["sql"] for q in ctx.captured_queries if "ORDER BY" in q["sql"]]
    conditions = [line for line in _plan(listing).splitlines() if "Index Cond" in line]
    assert any("created_at" in line for line in conditions), _plan(listing)


def test_the_task_pages_last_claim_or_release_is_one_entry_of_its_own_index(personas):
    """``claim_release_last`` (every task page) read the newest claim or release of the task through
    audit_action_newest: a walk through every task's claims and releases, longer with each one the trail
    gained. Its own partial index gives the task's newest entry; scans of the whole table are ruled out."""
    from approvals.claims import claim_release_last

    task = task_make()
    with CaptureQueriesContext(connection) as ctx:
        claim_release_last(task)
    [read] = [q["sql"] for q in ctx.captured_queries if "approvals_auditevent" in q["sql"]]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN {read}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "audit_task_claim_newest" in plan and " Sort " not in f" {plan} ", plan
