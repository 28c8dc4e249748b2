"""The audit trail cannot be changed through the database, and tampering by a superuser is detected."""

from __future__ import annotations

from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from approvals.audit import audit_anchor, audit_record, audit_verify
from approvals.models import AuditEvent

pytestmark = pytest.mark.django_db


def _event(label: str) -> AuditEvent:
    with transaction.atomic():
        return audit_record(actor=None, actor_label=label, action="test.event", subject_type="test", subject_id=label)


@pytest.mark.parametrize(
    "statement",
    ["UPDATE approvals_auditevent SET action = 'x' WHERE id = %s", "DELETE FROM approvals_auditevent WHERE id = %s"],
    ids=["update", "delete"],
)
def test_the_database_refuses_to_change_an_audit_row(statement):
    event = _event("immutable")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, [event.pk])
    assert AuditEvent.objects.get(pk=event.pk).action == "test.event"


def test_the_orm_cannot_rewrite_history_either():
    event = _event("orm")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(details={"rewritten": True})


def test_audit_verify_names_the_first_event_a_superuser_tampered_with():
    events = [_event(f"chain-{i}") for i in range(3)]
    assert audit_verify()[1] is None
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert "intact" in out.getvalue()

    with connection.cursor() as cursor:
        # Only a superuser can switch triggers off for its session, as an attacker with DB access might.
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("UPDATE approvals_auditevent SET details = %s WHERE id = %s", ['{"forged": true}', events[1].pk])
        cursor.execute("SET LOCAL session_replication_role = origin")

    _checked, broken = audit_verify()
    assert broken is not None and broken.pk == events[1].pk
    with pytest.raises(CommandError, match=f"#{events[1].pk}"):
        call_command("audit_verify", stdout=StringIO())


def test_an_anchor_records_the_current_head_of_every_chain():
    head = _event("before-anchor")
    length = AuditEvent.objects.filter(chain=head.chain).count()
    anchors = {a.chain: a for a in audit_anchor()}
    assert set(range(1, settings.GATEHOUSE_AUDIT_CHAINS + 1)) <= set(anchors)
    anchor = anchors[head.chain]
    event = AuditEvent.objects.get(pk=anchor.head_id)
    assert (event.action, event.chain) == ("audit.anchor", head.chain)
    assert {k: event.details[k] for k in ("chain", "head_id", "head_hash", "length")} == {
        "chain": head.chain,
        "head_id": head.pk,
        "head_hash": head.hash,
        "length": length,
    }
    assert event.details["heads"][str(head.chain)] == [head.pk, head.hash, length]
    assert event.prev_hash == head.hash
    # The anchor pins its own event: the chain's newest hash and its length at that moment.
    assert (anchor.head_hash, anchor.length) == (event.hash, length + 1)
