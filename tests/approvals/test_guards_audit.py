"""The audit chain (approvals/audit.py), as someone would try to fork it, hide a tail or fool its verifier.

Two writers racing for the head, an outside verifier recomputing hashes with the documented formula, a sink
file with a blank line slipped in before the anchors it should hide, an anchor whose head was cut off: each is
a test that fails if the guard goes.

In-process: written against the surviving mutants of ``approvals/audit.py`` (docs/mutation-testing.md).
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction

from approvals.audit import (
    GENESIS,
    AnchorRef,
    SinkUnreadable,
    anchor_sink_catch_up,
    anchor_sink_path,
    anchors_compare,
    anchors_from_sink,
    anchors_stored,
    audit_anchor,
    audit_chain_check,
    audit_record,
)
from approvals.models import AuditEvent
from tests.conftest import scaled, wait_for

# Tests on the whole trail: see tests/conftest.py audit_quiet.
pytestmark = pytest.mark.usefixtures("audit_quiet")


def outside_hash(event: AuditEvent) -> str:
    """The hash as an outside verifier computes it from the documented format (docs/security-audit.md), not our
    code: chains other than 0 (the events from before partitioning) also hash their chain and id."""
    fields = {
        "at": event.at.isoformat(),
        "actor": event.actor_label,
        "actor_id": event.actor_id,  # since migration 0032 (docs/security-audit.md, "Who acted")
        "action": event.action,
        "subject": f"{event.subject_type}:{event.subject_id}",
        "thread": str(event.thread_id) if event.thread_id else None,
        "graph": event.graph,
        "details": event.details,
    }
    if event.chain != 0:
        fields.update(chain=event.chain, id=event.id)
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(f"{event.prev_hash}|{text}".encode()).hexdigest()


def head() -> AuditEvent:
    return AuditEvent.objects.order_by("-id").first()


def record(**fields) -> AuditEvent:
    return audit_record(**{"actor": None, "action": "test.guard", "subject_type": "test", "subject_id": "x", **fields})


# --- what an event says, and the hash an outsider can check ----------------------------------------


@pytest.mark.django_db
def test_an_outside_verifier_recomputes_every_hash_including_non_ascii_details_and_the_thread():
    from tests.factories import task_make

    thread = task_make().thread
    event = record(details={"reviewer": "Zoë Ångström", "note": "façade ✓"}, thread_id=thread.pk, graph="g")
    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.details == {"reviewer": "Zoë Ångström", "note": "façade ✓"}
    assert stored.thread_id == thread.pk
    assert stored.chain != 0
    assert stored.hash == outside_hash(stored)


@pytest.mark.django_db
def test_an_outside_verifier_recomputes_the_hashes_of_the_chain_from_before_partitioning():
    legacy = AuditEvent.objects.filter(chain=0).order_by("id")[:20]  # the migrations' own events
    assert legacy
    for event in legacy:
        assert event.hash == outside_hash(event)


@pytest.mark.django_db
def test_the_event_names_the_stored_user_who_acted():
    user = get_user_model().objects.create_user(f"guard-{uuid.uuid4().hex[:8]}")
    event = AuditEvent.objects.get(pk=record(actor=user, subject_id=42, graph="loan_approval").pk)
    assert event.actor_id == user.pk
    assert event.actor_label == user.username
    assert (event.subject_type, event.subject_id, event.graph) == ("test", "42", "loan_approval")


@pytest.mark.django_db
def test_a_principal_never_stored_is_recorded_by_its_name():
    """``manage.py`` acting as a superuser: the trail keeps who it was, and the event is still written."""
    unsaved = get_user_model()(username="cli-superuser")
    event = AuditEvent.objects.get(pk=record(actor=unsaved).pk)
    assert event.actor_id is None
    assert event.actor_label == "cli-superuser"


@pytest.mark.django_db
def test_an_event_recorded_without_a_graph_belongs_to_no_graph():
    event = AuditEvent.objects.get(pk=record().pk)
    assert event.graph == ""
    assert event.thread_id is None


@pytest.mark.django_db
def test_an_explicit_label_names_the_actor_of_a_system_event():
    assert record(actor_label="webhook:bank").actor_label == "webhook:bank"
    assert record().actor_label == "system"


# --- one head per chain: concurrent writers to a chain are serialised -------------------------------


@pytest.mark.usefixtures("live_db")
def test_a_writer_waits_for_the_head_another_open_transaction_is_appending():
    """Without the chain lock both writers read the same head and the chain forks (two events, one parent).

    Both events have the same subject and no thread: the same chain."""
    first_recorded, release, second_started = threading.Event(), threading.Event(), threading.Event()
    second_done = threading.Event()
    out: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                out["first"] = record(action="test.race.first")
                first_recorded.set()
                release.wait(scaled(30))
        except BaseException as exc:
            out["error"] = exc
            first_recorded.set()
        finally:
            connections.close_all()

    def second() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                out["second_pid"] = cursor.fetchone()[0]
            second_started.set()
            with transaction.atomic():
                out["second"] = record(action="test.race.second")
        except BaseException as exc:
            out["error"] = exc
        finally:
            second_done.set()
            connections.close_all()

    one = threading.Thread(target=first)
    one.start()
    two = None
    try:
        assert first_recorded.wait(scaled(30)) and "error" not in out, out.get("error")
        two = threading.Thread(target=second)
        two.start()
        assert second_started.wait(scaled(30))

        def second_waits_for_a_lock() -> bool:
            if second_done.is_set():
                return True
            with connection.cursor() as cursor:
                cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [out["second_pid"]])
                row = cursor.fetchone()
            return bool(row and row[0] == "Lock")

        wait_for(second_waits_for_a_lock, timeout=30, what="the second writer to wait for the chain lock")
        assert not second_done.is_set(), "the second writer appended while the first held the head"
    finally:
        release.set()
        one.join(scaled(30))
        if two is not None:
            two.join(scaled(30))
    assert "error" not in out, out.get("error")
    first_event, second_event = out["first"], out["second"]
    assert second_event.chain == first_event.chain and second_event.prev_hash == first_event.hash
    siblings = AuditEvent.objects.filter(chain=first_event.chain, prev_hash=first_event.prev_hash)
    assert not siblings.exclude(pk=first_event.pk).exists()


# --- anchors -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_anchor_pins_the_head_before_it_and_is_a_system_event():
    before = record(action="test.before-anchor")
    count = AuditEvent.objects.filter(chain=before.chain).count()
    anchor = next(a for a in audit_anchor() if a.chain == before.chain)
    event = AuditEvent.objects.get(pk=anchor.head_id)
    assert (event.actor_label, event.subject_type, event.subject_id) == ("system", "audit", str(before.pk))
    assert event.details["head_id"] == before.pk and event.details["head_hash"] == before.hash
    assert event.details["length"] == count
    assert (anchor.head_hash, anchor.length) == (event.hash, count + 1)


def _as_attacker(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql)
        cursor.execute("SET LOCAL session_replication_role = origin")


@pytest.mark.django_db
def test_an_anchor_of_an_emptied_trail_says_so():
    _as_attacker("DELETE FROM approvals_auditanchor")
    _as_attacker("DELETE FROM approvals_auditevent")
    anchors = audit_anchor()
    assert [a.chain for a in anchors] == list(range(1, settings.GATEHOUSE_AUDIT_CHAINS + 1))  # chain 0 is empty
    for anchor in anchors:
        event = AuditEvent.objects.get(pk=anchor.head_id)
        assert event.subject_id == "0"
        assert {k: event.details[k] for k in ("head_id", "head_hash", "length")} == {
            "head_id": None,
            "head_hash": GENESIS,
            "length": 0,
        }
        assert event.prev_hash == GENESIS and anchor.length == 1


def test_no_sink_is_configured_by_an_empty_setting(settings):
    settings.GATEHOUSE_AUDIT_ANCHOR_SINK = ""
    assert anchor_sink_path() is None
    settings.GATEHOUSE_AUDIT_ANCHOR_SINK = "/var/lib/gatehouse/anchors.jsonl"
    assert str(anchor_sink_path()) == "/var/lib/gatehouse/anchors.jsonl"


@pytest.mark.django_db
def test_the_sink_line_carries_the_anchor_its_chain_and_its_time(tmp_path):
    anchors = audit_anchor()
    sink = tmp_path / "anchors.jsonl"
    anchor_sink_catch_up(anchors, path=sink)  # a new sink starts with this round
    lines = [json.loads(line) for line in sink.read_text().splitlines()]
    assert lines == [
        {
            "anchor": anchor.pk,
            "at": anchor.at.isoformat(),
            "chain": anchor.chain,
            "head_id": anchor.head_id,
            "head_hash": anchor.head_hash,
            "length": anchor.length,
        }
        for anchor in anchors
    ]


def test_a_sink_line_from_before_partitioning_pins_chain_0(tmp_path):
    sink = tmp_path / "anchors.jsonl"
    sink.write_text(
        _sink_line(1, 10, "a" * 64, 10) + "\n" + json.dumps({**json.loads(_sink_line(2, 20, "b" * 64, 2)), "chain": 3})
    )
    assert [r.chain for r in anchors_from_sink(sink)] == [0, 3]


def _sink_line(anchor_id: int, head_id: int, head_hash: str, length: int) -> str:
    return json.dumps({"anchor": anchor_id, "head_id": head_id, "head_hash": head_hash, "length": length})


def test_a_blank_line_in_the_sink_does_not_hide_the_anchors_after_it(tmp_path):
    sink = tmp_path / "anchors.jsonl"
    sink.write_text(_sink_line(1, 10, "a" * 64, 10) + "\n\n   \n" + _sink_line(2, 20, "b" * 64, 20) + "\n")
    refs = anchors_from_sink(sink)
    assert [(r.anchor_id, r.head_id, r.source) for r in refs] == [(1, 10, "sink line 1"), (2, 20, "sink line 4")]


def test_an_unreadable_sink_names_the_file_and_the_line(tmp_path):
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(SinkUnreadable, match=f"cannot read the anchor sink {missing}"):
        anchors_from_sink(missing)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(_sink_line(1, 10, "a" * 64, 10) + "\n" + '{"anchor": 2}\n')
    with pytest.raises(SinkUnreadable, match=f"{broken}:2: not an anchor line"):
        anchors_from_sink(broken)


@pytest.mark.django_db
def test_stored_anchors_are_named_by_their_id():
    anchor = audit_anchor()[-1]
    mine = [r for r in anchors_stored() if r.anchor_id == anchor.pk]
    assert mine == [
        AnchorRef(f"anchor #{anchor.pk}", anchor.pk, anchor.head_id, anchor.head_hash, anchor.length, anchor.chain)
    ]


def test_the_database_and_the_sink_are_compared_anchor_by_anchor():
    stored = [
        AnchorRef("anchor #1", 1, 10, "a" * 64, 10),
        AnchorRef("anchor #2", 2, 20, "b" * 64, 20),
        AnchorRef("anchor #4", 4, 40, "e" * 64, 4, 2),
    ]
    sink = [
        AnchorRef("sink line 1", 1, 10, "a" * 64, 10),
        AnchorRef("sink line 2", 2, 20, "c" * 64, 20),
        AnchorRef("sink line 3", 3, 30, "d" * 64, 30),
        AnchorRef("sink line 4", 4, 40, "e" * 64, 4, 5),  # the same head, said to be another chain's
    ]
    assert anchors_compare(stored, sink) == [
        "anchor #2 in the database differs from sink line 2",
        "anchor #3 (sink line 3) is missing from the database",
        "anchor #4 in the database differs from sink line 4",
    ]


# --- the verifier's findings, against anchors made up for the chain as it is -----------------------


@pytest.fixture
def chain():
    """(the chain, events in it, its newest event), with at least two events."""
    with transaction.atomic():
        first = record(action="test.chain")
        record(action="test.chain")
    newest = AuditEvent.objects.filter(chain=first.chain).order_by("-id").first()
    return first.chain, AuditEvent.objects.filter(chain=first.chain).count(), newest


@pytest.mark.django_db
def test_an_intact_chain_reaching_its_anchor_has_no_problem(chain):
    number, length, newest = chain
    report = audit_chain_check(anchors=[AnchorRef("anchor #x", None, newest.pk, newest.hash, length, number)])
    assert report.intact, report.problems
    assert (report.chains[number].length, report.chains[number].head_id) == (length, newest.pk)
    assert (report.checked, report.verified) == (AuditEvent.objects.count(), AuditEvent.objects.count())


@pytest.mark.django_db
def test_an_anchor_beyond_the_newest_event_means_the_tail_was_lost(chain):
    number, length, newest = chain
    ref = AnchorRef("sink line 7", 7, newest.pk + 1000, "f" * 64, 1, number)  # its head is past the newest event
    assert audit_chain_check(anchors=[ref]).problems == [
        f"TAIL LOST: sink line 7 recorded 1 events up to #{newest.pk + 1000} in chain {number}; the chain now has "
        f"{length} (newest #{newest.pk})"
    ]


@pytest.mark.django_db
def test_an_anchor_counting_more_events_than_the_chain_has_means_the_tail_was_lost(chain):
    number, length, _ = chain
    ref = AnchorRef("anchor #9", 9, -1, "f" * 64, length + 5, number)  # its head (gone) was before the newest event
    [problem] = audit_chain_check(anchors=[ref]).problems
    assert problem.startswith("TAIL LOST: anchor #9 recorded")


@pytest.mark.django_db
def test_an_anchored_event_gone_from_the_middle_of_a_full_length_chain_is_named(chain):
    number, length, _ = chain
    ref = AnchorRef("anchor #9", 9, -1, "f" * 64, length, number)
    assert audit_chain_check(anchors=[ref]).problems == [
        f"event #-1 pinned by anchor #9 is missing from chain {number}"
    ]


@pytest.mark.django_db
def test_an_anchor_whose_event_moved_in_the_chain_means_events_before_it_changed(chain):
    number, length, newest = chain
    ref = AnchorRef("anchor #9", 9, newest.pk, newest.hash, length + 3, number)
    assert audit_chain_check(anchors=[ref]).problems == [
        f"events before #{newest.pk} in chain {number} were removed or added: anchor #9 counted {length + 3}, "
        f"the chain has {length}"
    ]


@pytest.mark.django_db
def test_an_anchor_whose_event_is_in_another_chain_is_named(chain):
    number, length, newest = chain
    other = number % 8 + 1
    ref = AnchorRef("anchor #9", 9, newest.pk, newest.hash, length, other)
    assert audit_chain_check(anchors=[ref]).problems == [
        f"event #{newest.pk} pinned by anchor #9 in chain {other} is in chain {number} now"
    ]


@pytest.mark.django_db
def test_an_anchor_whose_event_has_another_hash_means_it_was_rewritten(chain):
    number, length, newest = chain
    ref = AnchorRef("anchor #9", 9, newest.pk, "0" * 64, length, number)
    assert audit_chain_check(anchors=[ref]).problems == [
        f"REWRITTEN: event #{newest.pk} no longer has the hash anchor #9 recorded"
    ]


@pytest.mark.django_db
def test_an_anchor_against_an_emptied_trail_reports_its_chain_empty():
    _as_attacker("DELETE FROM approvals_auditevent")
    report = audit_chain_check(anchors=[AnchorRef("anchor #1", 1, 5, "f" * 64, 5, 3)])
    assert report.problems == [
        "TAIL LOST: anchor #1 recorded 5 events up to #5 in chain 3; the chain now has 0 (empty)"
    ]
