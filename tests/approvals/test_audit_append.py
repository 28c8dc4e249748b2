"""Appending within one transaction (approvals/audit.py): each event is one round trip that locks, links,
numbers and inserts it (PostgreSQL), with the hash verification computes, and a savepoint rolled back never
leaves the chain linked to a row that is gone or a lock that was released.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from approvals.audit import (
    _LOCK_CLASS,
    APPEND_COLUMNS,
    GENESIS,
    audit_anchor,
    audit_chain_check,
    audit_record,
    canonical,
    event_fields,
    event_hash,
    hashed_parts,
)
from approvals.models import AuditEvent
from tests.conftest import ROOT, scaled


def record(subject: object = "x", **fields: Any) -> AuditEvent:
    return audit_record(
        **{"actor": None, "action": "test.append", "subject_type": "test", "subject_id": subject} | fields
    )


def lock_held(chain: int) -> bool:
    """This transaction holds ``chain``'s advisory lock (two int4 keys: classid, objid)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
            "AND classid = %s AND objid = %s AND objsubid = 2 AND granted",
            [_LOCK_CLASS, chain],
        )
        return bool(cursor.fetchone()[0])


def intact() -> None:
    report = audit_chain_check()
    assert report.intact, (report.broken, report.problems)


def stored_as_recorded(event: AuditEvent) -> None:
    row = AuditEvent.objects.get(pk=event.pk)
    assert event_fields(row) == event_fields(event)
    assert (row.prev_hash, row.hash) == (event.prev_hash, event.hash)
    assert row.hash == event_hash(event_fields(row), row.prev_hash)


@pytest.mark.django_db
def test_each_event_is_one_statement_that_locks_links_numbers_and_inserts_it():
    """PostgreSQL: ``gatehouse_audit_append`` takes the chain's lock, reads its head, draws the id and inserts the
    row in one round trip; the hash it computes is the one verification computes from the stored row."""
    with CaptureQueriesContext(connection) as first:
        a = record(1)
    assert lock_held(a.chain)
    with CaptureQueriesContext(connection) as second:
        b = record(2)
    with CaptureQueriesContext(connection) as third:
        c = record(3, details={"n": 3})
    for ctx in (first, second, third):
        assert len(ctx.captured_queries) == 1
        assert "gatehouse_audit_append(" in ctx.captured_queries[0]["sql"]
    assert a.chain == b.chain == c.chain and a.id < b.id < c.id
    assert (b.prev_hash, c.prev_hash) == (a.hash, b.hash)
    for event in (a, b, c):
        stored_as_recorded(event)
    intact()


HOSTILE_DETAILS = [
    {"id": 7, "nested": {"id": "x"}, "chain": 99},  # keys named like the hashed fields, at other depths
    {"text": 'quotes " and \\ backslashes | pipes , commas "id":1'},
    {"unicode": "Zürich — 東京 — emoji 🧾 — RTL \u202e — combining é"},
    {"numbers": [0, -1, 1.5, 1e20, 2**53 + 1], "flags": [True, False, None]},
    {"": "empty key", "~": "after every letter", "A": "before lower case"},
    {},
]


@pytest.mark.django_db
@pytest.mark.parametrize("details", HOSTILE_DETAILS, ids=range(len(HOSTILE_DETAILS)))
@pytest.mark.parametrize("thread", [None, "7b0a3a0e-9a7c-4c55-8d0e-2b1e8f6f2c11"])
def test_the_servers_hash_is_the_one_verification_computes_whatever_the_fields_hold(details, thread):
    event = record('hostile "subject" | é', details=details, thread_id=thread, graph="g|ä")
    stored_as_recorded(event)
    fields = event_fields(event)
    assert event.hash == event_hash(fields, event.prev_hash)
    intact()


def test_the_hashed_fields_split_around_the_id_rejoin_to_their_canonical_form():
    fields = {"action": "a", "actor": "b", "at": "t", "chain": 3, "details": {"id": 1}, "graph": "",
              "subject": "s:1", "thread": None}  # fmt: skip
    head, tail = hashed_parts(fields)
    for event_id in (1, 42, 9_007_199_254_740_993):
        assert head + str(event_id) + tail == canonical({**fields, "id": event_id})
    assert hashed_parts({"action": "only before"}) == ('{"action":"only before","id":', "}")
    assert hashed_parts({"thread": "only after"}) == ('{"id":', ',"thread":"only after"}')


def test_the_append_function_takes_every_column_of_the_model():
    """A column added to AuditEvent must be added to ``gatehouse_audit_append`` (a new migration) too."""
    columns = {f.column for f in AuditEvent._meta.concrete_fields}
    assert columns == set(APPEND_COLUMNS) | {"id", "prev_hash", "hash"}


@pytest.mark.django_db
def test_an_event_rolled_back_with_its_savepoint_is_not_the_head_of_the_next():
    kept = record("kept")
    with pytest.raises(RuntimeError), transaction.atomic():
        gone = record("gone")
        raise RuntimeError("roll the savepoint back")
    after = record("after")
    assert not AuditEvent.objects.filter(pk=gone.pk).exists()
    assert after.prev_hash == kept.hash and after.id > gone.id > kept.id
    intact()


@pytest.mark.django_db
def test_a_savepoint_rolled_back_elsewhere_in_the_transaction_keeps_the_chain_linked():
    first = record("first")
    with pytest.raises(RuntimeError), transaction.atomic():
        AuditEvent.objects.filter(pk=first.pk).exists()  # no audit row in it
        raise RuntimeError("roll the savepoint back")
    second = record("second")
    assert second.prev_hash == first.hash and second.id > first.id
    intact()


@pytest.mark.django_db
def test_events_inside_a_savepoint_that_commits_stay_the_head():
    outer = record("outer")
    with transaction.atomic():
        inner = record("inner")
    after = record("after")
    assert (inner.prev_hash, after.prev_hash) == (outer.hash, inner.hash)
    intact()


@pytest.mark.django_db
def test_a_lock_released_by_a_rolled_back_savepoint_is_taken_again_and_the_head_read_again():
    with pytest.raises(RuntimeError), transaction.atomic():
        gone = record("same-subject")  # both events in the same chain
        assert lock_held(gone.chain)
        raise RuntimeError("roll the savepoint back: its lock goes with it")
    assert not lock_held(gone.chain)
    with CaptureQueriesContext(connection) as ctx:
        after = record("same-subject")
    assert after.chain == gone.chain and lock_held(after.chain)
    assert "gatehouse_audit_append(" in ctx.captured_queries[0]["sql"]  # which takes the lock again
    newest_before = AuditEvent.objects.filter(chain=after.chain, id__lt=after.id).order_by("-id").first()
    assert after.prev_hash == (newest_before.hash if newest_before else GENESIS) != gone.hash
    intact()


@pytest.mark.django_db
def test_an_anchor_round_inside_a_transaction_that_appended_keeps_the_rounds_order():
    """The round's events are ordered by id in the order it appends them across chains (the witnesses rely on
    it), and the transaction's later events come after all of them."""
    before = [record(i) for i in range(3)]
    round_ = audit_anchor()
    after = [record(i) for i in range(2)]
    anchored = [a.head_id for a in round_ if a.chain != 0]
    assert anchored == sorted(anchored) and max(e.id for e in before) < anchored[0]
    assert min(e.id for e in after) > anchored[-1]
    intact()


@pytest.mark.usefixtures("live_db")
def test_concurrent_transactions_of_one_chain_each_append_after_the_others():
    """Writers appending several events per transaction to one chain: every event links to the one before it by
    id, whoever wrote it."""
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for t in range(4):
                with transaction.atomic():
                    for i in range(3):
                        record("same-chain", details={"writer": n, "tx": t, "i": i})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(scaled(60))
    assert not errors, errors
    events = list(AuditEvent.objects.filter(subject_id="same-chain").order_by("id"))
    assert len(events) == 36 and len({e.chain for e in events}) == 1
    rows = list(AuditEvent.objects.filter(chain=events[0].chain, id__gte=events[0].id).order_by("id"))
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(rows))
    by_tx: dict[tuple[int, int], list[int]] = {}
    for e in events:
        by_tx.setdefault((e.details["writer"], e.details["tx"]), []).append(e.details["i"])
    assert all(steps == [0, 1, 2] for steps in by_tx.values())  # each transaction's events in append order
    intact()


@pytest.mark.integration
def test_on_sqlite_a_transaction_appends_after_its_own_rows_and_an_anchor_round(tmp_path: Path):
    """SQLite has no sequence: ids are drawn as the next after every row, one at a time, so an anchor round in
    the same transaction (rows in other chains) cannot collide with ids held for later."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "GATEHOUSE_AUDIT"))}
    for name in ("DATABASE_URL", "REDIS_URL", "GATEHOUSE_QUEUE", "SECRET_KEY"):
        env.pop(name, None)
    env.update(DJANGO_SETTINGS_MODULE="console.settings", GATEHOUSE_VAR_DIR=str(tmp_path / "var"))

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(600)
        )

    done = manage("migrate", "--noinput")
    assert done.returncode == 0, done.stderr[-3000:]
    script = (
        "from django.db import transaction\n"
        "from approvals.audit import audit_anchor, audit_record\n"
        "def rec(i):\n"
        "    return audit_record(actor=None, action='test.sqlite', subject_type='test', subject_id=i)\n"
        "with transaction.atomic():\n"
        "    a, b = rec(1), rec(2)\n"
        "    try:\n"
        "        with transaction.atomic():\n"
        "            gone = rec(3)\n"
        "            raise RuntimeError\n"
        "    except RuntimeError:\n"
        "        pass\n"
        "    c = rec(4)\n"
        "    assert b.prev_hash == a.hash and c.prev_hash == b.hash, 'linked past the rolled-back row'\n"
        "    audit_anchor()\n"
        "    d, e = rec(5), rec(6)\n"
        "    assert e.prev_hash == d.hash and d.id > c.id\n"
    )
    done = manage("shell", "-c", script)
    assert done.returncode == 0, done.stderr[-3000:]
    verified = manage("audit_verify")
    assert verified.returncode == 0 and "intact" in verified.stdout, verified.stdout + verified.stderr


def _quiet_chain_behind_busy_ones(rows: int) -> int:
    """A chain whose head lies behind ``rows`` newer events of the other chains, the statistics knowing it:
    the trail on which a primary-key walk looks cheap to the planner and reads every one of those rows
    (none: the trail the test database has, small)."""
    from approvals.audit import chain_for, chains_configured

    chain = chain_for("test:quiet", chains=chains_configured())
    others = [c for c in range(1, chains_configured() + 1) if c != chain]
    record("quiet")  # the quiet chain's head, then the busy chains' events after it
    with connection.cursor() as cursor:
        if rows:
            cursor.execute(
                "INSERT INTO approvals_auditevent (id, chain, at, actor_label, action, subject_type, subject_id, "
                "graph, details, prev_hash, hash) "
                "SELECT nextval(pg_get_serial_sequence('approvals_auditevent', 'id')), (%s::smallint[])[1 + g %% %s], "
                "now(), 'system', 'test.busy', 'test', g::text, '', '{}', %s, md5(random()::text || g) || md5(g::text) "
                "FROM generate_series(1, %s) g",
                [others, len(others), GENESIS, rows],
            )
        cursor.execute("ANALYZE approvals_auditevent")  # counts this transaction's rows; rolled back with them
    return chain


@pytest.mark.django_db
@pytest.mark.parametrize("behind", [0, 20_000], ids=["small trail", "quiet chain behind 20k events"])
def test_the_chains_head_is_read_through_its_index_whatever_plan_the_function_caches(behind: int):
    """PL/pgSQL caches a generic plan after five calls; for a head lookup written ``chain = $1 ORDER BY id DESC``
    that plan walked the primary key backwards past every newer event of the other chains (an append to a quiet
    chain slowed as the others grew; migration 0022 then planned every call, at a cost). With a generic plan
    forced on every call, on a trail where the primary key tempts the planner, the head must still be read
    through ``audit_chain_head`` (migration 0023), and the event linked to the quiet chain's true head. On a
    small trail a sequential scan and a sort tempt it, and that plan would stay cached as the trail grew."""
    chain = _quiet_chain_behind_busy_ones(behind)
    head = AuditEvent.objects.filter(chain=chain).order_by("-id").values_list("hash", flat=True).first()
    plans: list[str] = []
    raw = connection.connection

    def logged(diag: Any) -> None:
        plans.append(diag.message_primary or "")

    raw.add_notice_handler(logged)
    with connection.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        for setting, value in (
            ("plan_cache_mode", "force_generic_plan"),
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_nested_statements", "on"),
            ("auto_explain.log_level", "notice"),
            ("client_min_messages", "notice"),
        ):
            cursor.execute("SELECT set_config(%s, %s, true)", [setting, value])
    try:
        event = record("quiet")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('auto_explain.log_min_duration', '-1', true)")
        raw.remove_notice_handler(logged)
    assert event.chain == chain and event.prev_hash == head
    heads = [p for p in plans if "ORDER BY e.chain, e.id DESC" in p]
    assert len(heads) == 1, plans
    assert "using audit_chain_head" in heads[0] and "auditevent_pkey" not in heads[0], heads[0]
