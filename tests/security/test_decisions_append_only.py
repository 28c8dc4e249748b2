"""Threat: an insider with database access makes a signed decision vanish, or rewrites it.

The audit, anchor and comment tables refused DELETE, UPDATE and TRUNCATE; the
decision table did not: ``TRUNCATE approvals_decision CASCADE`` emptied it, and
``decisions_verify`` then still said "signed intent proven", listing the effect
that had lost its decision as merely unverifiable. Now the database refuses
those statements (migration 0035) and, for a superuser who switches triggers
off, ``decisions_verify`` names a decision the audit trail records and the
table lost.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from approvals.models import Decision
from tests.approvals.handoffs import person
from tests.factories import decision_make, loan_gate, task_make, triggers_off

pytestmark = pytest.mark.usefixtures("live_db")


def _refusal(statement: str, params: tuple = ()) -> str | None:
    """The database's refusal of ``statement``, or None if it ran (then rolled back: this session's rows stay)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement, params)
            transaction.set_rollback(True)
    except DatabaseError as exc:
        return str(exc)
    return None


@pytest.fixture
def decision() -> Decision:
    task = task_make()
    return decision_make(task, person(), reason="fine")


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM approvals_decision WHERE id = %s",
        "TRUNCATE approvals_decision CASCADE",  # without CASCADE the inbound deliveries' foreign key refuses it
        "UPDATE approvals_decision SET outcome = 'reject' WHERE id = %s",
        'UPDATE approvals_decision SET resume_value = \'{"decision": "reject"}\' WHERE id = %s',
        "UPDATE approvals_decision SET signed_digest = repeat('0', 64) WHERE id = %s",
        "UPDATE approvals_decision SET created_at = created_at - interval '1 day' WHERE id = %s",
        "UPDATE approvals_decision SET run_id = NULL WHERE id = %s",
    ],
    ids=["delete", "truncate-cascade", "outcome", "resume", "digest", "created_at", "run-unset"],
)
def test_the_database_refuses_to_remove_or_rewrite_a_signed_decision(decision, statement):
    params = (decision.pk,) if "%s" in statement else ()
    refusal = _refusal(statement, params)
    assert refusal is not None and "signed decisions are append-only" in refusal, refusal
    assert Decision.objects.get(pk=decision.pk).outcome == "approve"


def test_a_decision_cannot_be_moved_to_another_run(decision):
    other = decision_make(task_make(), person())
    refusal = _refusal("UPDATE approvals_decision SET run_id = %s WHERE id = %s", (other.run_id, decision.pk))
    assert refusal is not None and "append-only" in refusal, refusal


def test_a_quorum_still_names_the_run_that_carried_its_earlier_decisions():
    """The one update the application makes after insert: an earlier decision of a quorum waits for its run."""
    task = task_make(payload=loan_gate(required_approvals=2))
    first = decision_make(task, person("reviewer"))
    assert first.run_id is None
    final = decision_make(task, person("approver"))
    first.refresh_from_db()
    assert final.run_id is not None and first.run_id == final.run_id


def test_decisions_verify_names_a_resume_whose_signed_decision_was_deleted(decision):
    thread_id = str(decision.task.thread_id)
    out = StringIO()
    call_command("decisions_verify", "--thread", thread_id, stdout=out, stderr=out)
    assert "signed intent proven" in out.getvalue()

    with triggers_off(), connection.cursor() as cursor:  # the insider: a superuser with triggers off
        cursor.execute("DELETE FROM approvals_decision WHERE id = %s", [decision.pk])

    out = StringIO()
    with pytest.raises(CommandError, match=thread_id):
        call_command("decisions_verify", "--thread", thread_id, stdout=out, stderr=out)
    assert f"MISMATCH thread {thread_id}" in out.getvalue()
    assert f"decision {decision.pk}" in out.getvalue() and "gone from the decisions table" in out.getvalue()
