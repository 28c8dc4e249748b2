"""Digests and hashes are computed over values about to be stored and recomputed later from what a ``jsonb``
column returns. PostgreSQL writes a float of 1e16 or more out in full (``1e+20`` reads back as the integer
``100000000000000000000``), so before ``canonical_dumps`` such a value made a signed decision, an effect's
arguments or an audit event read back as tampered with. Each test stores the value and recomputes from the row.
"""

from __future__ import annotations

from typing import Any

import pytest

from approvals.audit import audit_chain_check, audit_record, canonical, event_fields, event_hash
from approvals.intent import decision_digest, intent_verify
from approvals.models import AuditEvent, Decision
from runtime.effects import args_digest, canonical_json
from runtime.jsonable import as_jsonb_returns, canonical_dumps
from tests.factories import decision_make, loan_gate, task_make

LARGE = [1e16, -1e16, 1e20, 1.5e17, 1.7976931348623157e308]
UNCHANGED = [0.0, 1.5, -2.25, 1e-7, 9999999999999998.0, 2**63, 10**30]


@pytest.mark.parametrize("number", LARGE)
def test_a_large_float_renders_as_the_whole_number_jsonb_returns(number: float):
    assert canonical_dumps({"n": number}) == f'{{"n":{int(number)}}}'
    assert canonical({"a": [number]}) == canonical({"a": [int(number)]})
    assert canonical_json({"n": number}) == canonical_json({"n": int(number)})


@pytest.mark.parametrize("number", UNCHANGED)
def test_every_other_number_renders_as_before(number: float):
    import json

    assert canonical_dumps({"n": number}) == json.dumps({"n": number}, separators=(",", ":"))


def test_strings_that_look_like_exponents_are_left_alone():
    value = {"s": "1e+20", "t": "x e+ y", "n": 3}
    assert canonical_dumps(value) == '{"n":3,"s":"1e+20","t":"x e+ y"}'
    assert as_jsonb_returns(value) == value


@pytest.mark.django_db
@pytest.mark.parametrize("number", LARGE[:4])
def test_an_audit_event_with_a_large_float_verifies_from_its_stored_row(number: float):
    event = audit_record(
        actor=None, action="test.numbers", subject_type="test", subject_id="n", details={"amount": number}
    )
    row = AuditEvent.objects.get(pk=event.pk)
    assert row.details == {"amount": int(number)}
    assert row.hash == event_hash(event_fields(row), row.prev_hash)
    assert audit_chain_check().intact


@pytest.mark.django_db
def test_a_decision_signing_a_large_float_verifies_from_its_stored_row(personas: dict[str, Any]):
    task = task_make(payload=loan_gate(21000))
    decision = decision_make(task, personas["reviewer"].user, "edit", reason="big", action_args={"amount": 1e20})
    stored = Decision.objects.select_related("task").get(pk=decision.pk)
    assert stored.signed_action["args"]["amount"] == 10**20
    assert decision_digest(stored) == stored.signed_digest
    report = intent_verify(threads=[task.thread])
    assert not report.failing, [t.problems for t in report.failing]


def test_effect_arguments_digest_alike_before_and_after_storage():
    assert args_digest({"amount": 1e20, "loan_id": "L-1"}) == args_digest({"amount": 10**20, "loan_id": "L-1"})
