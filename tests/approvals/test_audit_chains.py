"""The audit trail in chains (approvals/audit.py): who goes where, that writers of different chains do not wait for
each other, and that deleting, reordering, editing, forging or moving a row in any chain is found by audit_verify.

Tampering runs as someone with SQL access and triggers off (``session_replication_role = replica``), inside the
test's transaction, so it is rolled back afterwards.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction

from approvals.audit import (
    GENESIS,
    audit_anchor,
    audit_record,
    chain_for,
    event_fields,
    event_hash,
)
from approvals.models import AuditEvent
from tests.conftest import scaled, wait_for

# Tests on the whole trail: see tests/conftest.py audit_quiet.
pytestmark = pytest.mark.usefixtures("audit_quiet")


def thread_in(chain: int) -> uuid.UUID:
    """A thread id whose events go to ``chain`` (with the configured number of chains)."""
    while True:
        thread = uuid.uuid4()
        if chain_for(f"thread:{thread}", chains=settings.GATEHOUSE_AUDIT_CHAINS) == chain:
            return thread


def record(thread: uuid.UUID | None = None, **fields: Any) -> AuditEvent:
    return audit_record(
        **{"actor": None, "action": "test.chains", "subject_type": "test", "subject_id": "x", "thread_id": thread}
        | fields
    )


def as_attacker(sql: str, params: list[object] | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params or [])
        cursor.execute("SET LOCAL session_replication_role = origin")


def verify() -> str:
    out = StringIO()
    call_command("audit_verify", stdout=out)
    return out.getvalue()


def findings() -> str:
    with pytest.raises(CommandError) as caught:
        verify()
    return str(caught.value)


# --- which chain ---------------------------------------------------------------------------------


def test_the_chain_of_a_key_is_stable_across_processes_and_spreads_over_all_chains():
    # sha256 of the key, not Python's salted hash(): every process and every restart agrees.
    key = "thread:00000000-0000-0000-0000-000000000001"
    assert chain_for(key, chains=8) == 1 + int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 8 == 6
    assert chain_for("thread:00000000-0000-0000-0000-000000000001", chains=1) == 1
    assert {chain_for(f"thread:{uuid.UUID(int=i)}", chains=8) for i in range(200)} == set(range(1, 9))


@pytest.mark.django_db
def test_one_transaction_appends_to_one_chain_whatever_its_threads():
    """One lock per transaction: a transaction holding two chains' locks could deadlock with another."""
    first = record(thread_in(1))
    second = record(thread_in(2))
    untethered = record(None, subject_id="no-thread")
    assert first.chain == second.chain == untethered.chain == 1
    assert second.prev_hash == first.hash and untethered.prev_hash == second.hash


@pytest.mark.usefixtures("live_db")
def test_each_transaction_appends_to_its_own_threads_chain():
    events = []
    for chain in (3, 5, 3):
        with transaction.atomic():
            events.append(record(thread_in(chain)))
    assert [e.chain for e in events] == [3, 5, 3]
    newest_before = AuditEvent.objects.filter(chain=3, id__lt=events[2].id).order_by("-id").first()
    assert events[2].prev_hash == newest_before.hash  # the chain-5 event in between is another chain's


# --- writers of different chains do not wait for each other --------------------------------------


@pytest.mark.usefixtures("live_db")
def test_a_writer_waits_only_for_its_own_chain():
    """One connection holds chain 1's lock (an open transaction that appended to it); a writer to chain 2
    commits meanwhile, and a writer to chain 1 waits for the lock until the first commits."""
    holding, release = threading.Event(), threading.Event()
    other_done, same_done = threading.Event(), threading.Event()
    out: dict[str, Any] = {}

    def hold() -> None:
        try:
            with transaction.atomic():
                out["held"] = record(thread_in(1), action="test.race.hold")
                holding.set()
                release.wait(scaled(30))
        except BaseException as exc:
            out["error"] = exc
            holding.set()
        finally:
            connections.close_all()

    def write(chain: int, done: threading.Event) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                out[f"pid{chain}"] = cursor.fetchone()[0]
            with transaction.atomic():
                out[f"event{chain}"] = record(thread_in(chain), action=f"test.race.chain{chain}")
        except BaseException as exc:
            out["error"] = exc
        finally:
            done.set()
            connections.close_all()

    def waits_for_a_lock(pid_key: str) -> bool:
        if pid_key not in out:
            return False
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s", [out[pid_key]])
            row = cursor.fetchone()
        return bool(row and row == ("Lock", "advisory"))

    holder = threading.Thread(target=hold)
    holder.start()
    writers = []
    try:
        assert holding.wait(scaled(30)) and "error" not in out, out.get("error")
        writers = [
            threading.Thread(target=write, args=(2, other_done)),
            threading.Thread(target=write, args=(1, same_done)),
        ]
        for writer in writers:
            writer.start()
        # The other chain's writer commits while chain 1's lock is held ...
        assert other_done.wait(scaled(30)) and "error" not in out, out.get("error")
        assert AuditEvent.objects.filter(pk=out["event2"].pk).exists()
        # ... and the same chain's writer is waiting for it.
        wait_for(lambda: waits_for_a_lock("pid1"), timeout=30, what="the chain-1 writer to wait for its lock")
        assert not same_done.is_set()
    finally:
        release.set()
        holder.join(scaled(30))
        for writer in writers:
            writer.join(scaled(30))
    assert "error" not in out, out.get("error")
    assert same_done.is_set()
    # It appended after the holder: its predecessor in chain 1 is the holder's event or one appended after
    # it. (Not necessarily the holder's own: the session's worker may take chain 1's lock first when it
    # is freed, for a run of an earlier test whose thread hashes there; CI saw exactly that once.)
    before = AuditEvent.objects.get(hash=out["event1"].prev_hash)
    assert before.chain == out["held"].chain == out["event1"].chain and before.pk >= out["held"].pk


# --- tampering in any chain is found ------------------------------------------------------------


@pytest.fixture
def trail() -> dict[str, Any]:
    """Events in the transaction's chain, an anchor round (an event in every chain), then more events."""
    before = [record(thread_in(2), subject_id=f"before-{i}") for i in range(3)]
    round_ = {a.chain: a for a in audit_anchor()}
    after = [record(thread_in(2), subject_id=f"after-{i}") for i in range(2)]
    assert "intact" in verify()
    return {"chain": before[0].chain, "before": before, "anchors": round_, "after": after}


def _other_chain(trail: dict[str, Any]) -> int:
    return trail["chain"] % settings.GATEHOUSE_AUDIT_CHAINS + 1


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["own", "other"])
def test_an_edited_row_in_any_chain_is_found(trail, where):
    chain = trail["chain"] if where == "own" else _other_chain(trail)
    target = trail["before"][1].pk if where == "own" else trail["anchors"][chain].head_id
    as_attacker("UPDATE approvals_auditevent SET actor_label = 'someone-else' WHERE id = %s", [target])
    assert f"audit chain {chain} BROKEN at event #{target}" in findings()


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["own", "other"])
def test_a_deleted_row_in_any_chain_is_found(trail, where):
    chain = trail["chain"] if where == "own" else _other_chain(trail)
    if where == "own":
        gone, next_id = trail["before"][1].pk, trail["before"][2].pk
    else:  # the other chain's anchor event; a second round puts another after it
        gone, next_id = trail["anchors"][chain].head_id, {a.chain: a for a in audit_anchor()}[chain].head_id
    as_attacker("DELETE FROM approvals_auditevent WHERE id = %s", [gone])
    assert f"audit chain {chain} BROKEN at event #{next_id}" in findings()


@pytest.mark.django_db
def test_the_deleted_newest_row_of_a_chain_is_found_by_its_anchor(trail):
    chain = _other_chain(trail)
    anchor = trail["anchors"][chain]
    as_attacker("DELETE FROM approvals_auditevent WHERE id = %s", [anchor.head_id])
    assert (
        f"TAIL LOST: anchor #{anchor.pk} recorded {anchor.length} events up to #{anchor.head_id} in chain {chain}"
        in (findings())
    )


@pytest.mark.django_db
def test_two_rows_swapped_within_a_chain_are_found(trail):
    a, b = trail["before"][0], trail["before"][1]
    # Swap their ids: the order by id now shows b before a. Both hashes cover their id.
    as_attacker("UPDATE approvals_auditevent SET id = -1 WHERE id = %s", [a.pk])
    as_attacker("UPDATE approvals_auditevent SET id = %s WHERE id = %s", [a.pk, b.pk])
    as_attacker("UPDATE approvals_auditevent SET id = %s WHERE id = -1", [b.pk])
    assert f"audit chain {trail['chain']} BROKEN at event #{a.pk}" in findings()


def _wasted_id() -> int:
    """Draw an id in a savepoint that rolls back: a gap in the ids, free for an attacker to move a row into."""
    try:
        with transaction.atomic():
            wasted = record(subject_id="rolled-back").pk
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    return wasted


@pytest.mark.django_db
def test_a_row_renumbered_past_other_chains_rows_is_found(trail):
    """The other chain's anchor event moved after this chain's later events, into a free id before the next
    event of its own chain: its chain's order holds, the global order changed. Its hash covers its id."""
    other = _other_chain(trail)
    moved = trail["anchors"][other].head_id
    free = _wasted_id()  # after trail["after"], before the next round
    following = {a.chain: a for a in audit_anchor()}[other].head_id
    assert moved < trail["after"][-1].pk < free < following
    as_attacker("UPDATE approvals_auditevent SET id = %s WHERE id = %s", [free, moved])
    assert f"audit chain {other} BROKEN at event #{free}" in findings()


@pytest.mark.django_db
def test_a_row_forged_into_one_chain_with_another_chains_head_is_found(trail):
    chain, other = trail["chain"], _other_chain(trail)
    other_head = AuditEvent.objects.filter(chain=other).order_by("-id").first()
    forged = AuditEvent(
        id=AuditEvent.objects.order_by("-id").values_list("id", flat=True)[0] + 1,
        chain=chain,
        at=trail["after"][-1].at,
        actor_label="forger",
        action="test.forged",
        subject_type="test",
        subject_id="x",
        graph="",
        details={},
        prev_hash=other_head.hash,  # a real head, and a correct hash over the row: but the wrong chain's
    )
    forged.hash = event_hash(event_fields(forged), forged.prev_hash)
    as_attacker(
        "INSERT INTO approvals_auditevent (id, chain, at, actor_label, action, subject_type, subject_id, graph, "
        "details, prev_hash, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, '{}'::jsonb, %s, %s)",
        [forged.id, chain, forged.at, "forger", "test.forged", "test", "x", "", forged.prev_hash, forged.hash],
    )
    assert f"audit chain {chain} BROKEN at event #{forged.id}" in findings()


@pytest.mark.django_db
def test_a_row_moved_to_another_chain_breaks_both(trail):
    event, other = trail["before"][1], _other_chain(trail)
    as_attacker("UPDATE approvals_auditevent SET chain = %s WHERE id = %s", [other, event.pk])
    text = findings()
    assert f"audit chain {other} BROKEN at event #{event.pk}" in text  # its hash covers its chain
    assert f"audit chain {trail['chain']} BROKEN at event #{trail['before'][2].pk}" in text  # the gap it left


@pytest.mark.django_db
def test_a_chain_rewritten_consistently_with_its_anchors_gone_is_found_by_the_other_chains(trail):
    """Rewrite an event before the anchor round and re-chain everything after it in its chain, anchor event
    included (its own head fixed up too), then delete the anchor rows: the chain links up, no anchor row
    pins it, but every other chain's anchor event saw the old head."""
    chain = trail["chain"]
    rows = list(AuditEvent.objects.filter(chain=chain, pk__gte=trail["before"][1].pk).order_by("id"))
    prev = rows[0].prev_hash
    length = AuditEvent.objects.filter(chain=chain, pk__lt=rows[0].pk).count()
    for row in rows:
        if row.pk == trail["before"][1].pk:
            row.details = {"rewritten": True}
        if row.action == "audit.anchor":
            row.details = {
                **row.details,
                "head_hash": prev,
                "heads": {**row.details["heads"], str(chain): [row.details["head_id"], prev, length]},
            }
        row.prev_hash = prev
        row.hash = event_hash(event_fields(row), prev)
        as_attacker(
            "UPDATE approvals_auditevent SET details = %s::jsonb, prev_hash = %s, hash = %s WHERE id = %s",
            [json.dumps(row.details), row.prev_hash, row.hash, row.pk],
        )
        prev, length = row.hash, length + 1
    as_attacker("DELETE FROM approvals_auditanchor")
    text = findings()
    assert "BROKEN" not in text  # the links alone would not show it
    assert f"saw chain {chain} at" in text and "WITNESS" in text


@pytest.mark.django_db
def test_the_chain_from_before_partitioning_is_verified_with_the_others():
    legacy = AuditEvent.objects.filter(chain=0).order_by("id")
    assert legacy.exists()  # the migrations' own events
    assert all(e.hash == event_hash(event_fields(e), e.prev_hash) for e in legacy)
    assert legacy.first().prev_hash == GENESIS
    target = legacy[1] if legacy.count() > 2 else legacy.first()
    as_attacker("UPDATE approvals_auditevent SET details = '{\"forged\": true}'::jsonb WHERE id = %s", [target.pk])
    assert f"audit chain 0 BROKEN at event #{target.pk}" in findings()
