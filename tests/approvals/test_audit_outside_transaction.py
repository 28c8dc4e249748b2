"""audit_record must share the transaction of the change it records."""

import pytest
from django.db import transaction

from approvals.audit import AuditEntry, audit_record, audit_record_all
from approvals.models import AuditEvent


def test_audit_record_refuses_to_run_outside_a_transaction(live_db: None) -> None:
    # live_db is autocommit with no wrapping transaction; a transactional test
    # case would instead flush every table afterwards, deleting the session's personas.
    assert not transaction.get_connection().in_atomic_block
    with pytest.raises(RuntimeError, match="inside the transaction"):
        audit_record(actor=None, action="test.loose", subject_type="test", subject_id="x")
    assert not AuditEvent.objects.filter(action="test.loose").exists()


def test_audit_record_all_refuses_to_run_outside_a_transaction(live_db: None) -> None:
    assert not transaction.get_connection().in_atomic_block
    entries = [AuditEntry(action="test.loose", subject_type="test", subject_id=str(n)) for n in range(2)]
    with pytest.raises(RuntimeError, match="inside the transaction"):
        audit_record_all(entries)
    assert not AuditEvent.objects.filter(action="test.loose").exists()
