"""Events appended together (``audit_record_all``) are the events as many ``audit_record`` calls append.

One statement appends several events of a transaction (migration 0025). The attacks: the order within
the statement, its order against single appends before and after it, what the Python objects say
against the rows, a rollback, and a tampered row among them, all checked by the trail's own walk.
"""

from __future__ import annotations

import itertools
import uuid
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from approvals.audit import AuditEntry, audit_chain_check, audit_record, audit_record_all
from approvals.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("audit_quiet")]


def _entry(n: int, thread: uuid.UUID | None, **fields: Any) -> AuditEntry:
    defaults: dict[str, Any] = {
        "action": f"test.together.{n}",
        "subject_type": "test",
        "subject_id": f"s{n}",
        "thread_id": thread,
        "graph": "g",
        "details": {"n": n, "nested": {"list": [n, str(n)], "none": None}},
        "actor_label": "tester",
    }
    return AuditEntry(**(defaults | fields))


def _trail_intact() -> None:
    report = audit_chain_check()
    assert report.broken is None, f"broken at {report.broken}"


def test_events_appended_together_keep_their_order_between_single_appends_and_verify():
    thread = uuid.uuid4()
    with transaction.atomic():
        before = audit_record(actor=None, action="test.before", subject_type="test", subject_id="b", thread_id=thread)
        with CaptureQueriesContext(connection) as ctx:
            together = audit_record_all([_entry(n, thread) for n in range(1, 5)])
        after = audit_record(actor=None, action="test.after", subject_type="test", subject_id="a", thread_id=thread)
    assert len(ctx) == 1  # the four in one statement
    events = [before, *together, after]
    stored = list(AuditEvent.objects.filter(thread_id=thread).order_by("id"))
    assert [e.action for e in stored] == [
        "test.before", "test.together.1", "test.together.2", "test.together.3", "test.together.4", "test.after"
    ]  # fmt: skip
    # What the caller was handed is what was stored, event by event: ids, links, hashes.
    assert [(e.pk, e.prev_hash, e.hash) for e in events] == [(e.pk, e.prev_hash, e.hash) for e in stored]
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(stored))
    assert len({e.chain for e in stored}) == 1
    _trail_intact()


def test_events_appended_together_carry_their_actors_subjects_and_details():
    thread = uuid.uuid4()
    with transaction.atomic():
        audit_record_all([_entry(1, thread), _entry(2, None, actor_label=None)])  # no thread, no label
    first, second = AuditEvent.objects.filter(action__startswith="test.together.").order_by("-id")[:2][::-1]
    assert (first.actor_label, first.subject_id, str(first.thread_id), first.graph) == (
        "tester",
        "s1",
        str(thread),
        "g",
    )
    assert first.details == {"n": 1, "nested": {"list": [1, "1"], "none": None}}
    assert (second.actor_label, second.thread_id, second.details["n"]) == ("system", None, 2)
    _trail_intact()


def test_events_appended_together_in_a_transaction_that_rolls_back_leave_nothing():
    thread = uuid.uuid4()
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_record_all([_entry(1, thread), _entry(2, thread)])
        raise RuntimeError("roll back")
    assert not AuditEvent.objects.filter(thread_id=thread).exists()
    _trail_intact()


def test_a_row_of_a_statement_edited_afterwards_is_found_by_the_walk():
    thread = uuid.uuid4()
    with transaction.atomic():
        events = audit_record_all([_entry(n, thread) for n in range(1, 4)])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")  # past the append-only trigger
        cursor.execute("UPDATE approvals_auditevent SET details = '{\"n\": 99}' WHERE id = %s", [events[1].pk])
    out = StringIO()
    with pytest.raises(Exception, match=str(events[1].pk)):
        call_command("audit_verify", stdout=out)
