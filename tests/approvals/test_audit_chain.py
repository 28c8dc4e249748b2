"""The audit trail is a hash chain: each event commits to the previous one, and tampering is found."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from approvals.audit import GENESIS, audit_record, audit_verify, event_fields, event_hash
from approvals.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("audit_quiet")]


def tamper(sql: str, params: list[object]) -> None:
    """Rewrite the table as someone with database rights would: with triggers (append-only guards) off."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)
        cursor.execute("SET LOCAL session_replication_role = origin")


def record(n: int = 3, **details: object) -> list[AuditEvent]:
    return [
        audit_record(
            actor=None,
            actor_label="test",
            action=f"test.step{i}",
            subject_type="test",
            subject_id=i,
            graph="loan_approval",
            details={"step": i, **details},
        )
        for i in range(n)
    ]


def test_each_event_commits_to_the_previous_events_hash_in_its_chain():
    events = record(3)  # one transaction: one chain
    chain = events[0].chain
    before = AuditEvent.objects.filter(chain=chain, id__lt=events[0].id).order_by("-id").first()
    assert events[0].prev_hash == (before.hash if before else GENESIS)
    assert [e.chain for e in events] == [chain] * 3
    assert events[1].prev_hash == events[0].hash
    assert events[2].prev_hash == events[1].hash


def test_an_events_hash_covers_its_fields_and_the_previous_hash():
    [event] = record(1)
    event.refresh_from_db()
    assert event.hash == event_hash(event_fields(event), event.prev_hash)
    assert event.hash != event_hash(event_fields(event), GENESIS if event.prev_hash != GENESIS else "f" * 64)


def test_the_actor_label_defaults_to_system_without_a_user():
    event = audit_record(actor=None, action="test.system", subject_type="test", subject_id="x")
    assert event.actor_label == "system"
    assert event.actor is None


def test_details_are_stored_as_canonical_json():
    import datetime
    import uuid

    ident = uuid.uuid4()
    event = audit_record(
        actor=None,
        action="test.canonical",
        subject_type="test",
        subject_id="x",
        details={"b": 1, "a": ident, "when": datetime.date(2024, 1, 2)},
    )
    event.refresh_from_db()
    assert event.details == {"a": str(ident), "b": 1, "when": "2024-01-02"}
    assert event.hash == event_hash(event_fields(event), event.prev_hash)


def test_audit_verify_accepts_an_intact_chain():
    before, broken = audit_verify()
    assert broken is None
    record(3)
    checked, broken = audit_verify()
    assert broken is None
    assert checked == before + 3


@pytest.mark.parametrize(
    "column,value",
    [
        ("details", '\'{"step": 1, "amount": 999999}\'::jsonb'),
        ("action", "'test.nothing_happened'"),
        ("actor_label", "'someone-else'"),
        ("subject_id", "'42'"),
        ("graph", "'kyc_onboarding'"),
        ("at", "at - interval '1 hour'"),
    ],
)
def test_audit_verify_reports_the_first_tampered_event(column, value):
    assert audit_verify()[1] is None
    events = record(3)
    tamper(f"UPDATE approvals_auditevent SET {column} = {value} WHERE id = %s", [events[1].id])
    checked, broken = audit_verify()
    assert broken is not None
    assert broken.id == events[1].id
    assert checked == AuditEvent.objects.filter(id__lt=events[1].id).count()


def test_audit_verify_reports_an_event_whose_hash_was_recomputed_after_tampering():
    """Rewriting an event and its own hash still breaks the link to the next event."""
    events = record(3)
    tampered = AuditEvent.objects.get(pk=events[1].pk)
    tampered.details = {"step": 1, "amount": 999999}
    tampered.hash = event_hash(event_fields(tampered), tampered.prev_hash)
    tamper(
        "UPDATE approvals_auditevent SET details = %s::jsonb, hash = %s WHERE id = %s",
        ['{"step": 1, "amount": 999999}', tampered.hash, tampered.id],
    )
    assert audit_verify()[1].id == events[2].id


def test_audit_verify_reports_the_event_after_a_deleted_one():
    events = record(3)
    tamper("DELETE FROM approvals_auditevent WHERE id = %s", [events[1].id])
    assert audit_verify()[1].id == events[2].id


def test_an_event_recorded_in_a_rolled_back_transaction_leaves_no_trace():
    head = AuditEvent.objects.order_by("-id").first()
    try:
        with transaction.atomic():
            record(1)
            raise RuntimeError("the change failed")
    except RuntimeError:
        pass
    assert AuditEvent.objects.order_by("-id").first() == head
    assert audit_verify()[1] is None
