"""An effect's arguments and result carry redacted values under names of their own; readers who see the values
masked get them masked there too.

An outside tester's graph declared ``employee.iban`` sensitive and paid with
``perform_effect("payout", ..., args={"amount": ..., "iban": state["employee"]["iban"]})``: a lead (no "view
sensitive") read the IBAN in clear in the audit trail's ``effect.executed`` while ``thread.started`` beside it
showed ``•••• redacted``. No declared path names ``args.iban``: they are masked by value, as message text is.
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.contrib.auth.models import Permission, User
from django.db import transaction

from approvals import gateway
from approvals.audit import audit_record
from approvals.models import AuditAction
from approvals.redaction import MASK
from approvals.tokens import token_issue
from runtime.models import Effect, EffectStatus, Thread
from tests.conftest import ApiClient
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _audit_reader() -> User:
    user = User.objects.create_user(f"effect-audit-reader-{uuid.uuid4().hex[:6]}")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_audit", "view_all_graphs", "view_approvaltask", "view_thread"])
    )
    return user


@pytest.fixture
def paid() -> tuple[Thread, str]:
    """A KYC thread whose state holds a date of birth, and an effect that was passed it as an argument."""
    dob = f"dob-{uuid.uuid4().hex[:10]}"
    task = task_make(graph="kyc_onboarding", node="compliance_review", values={"applicant": {"date_of_birth": dob}})
    thread = task.thread
    Thread.objects.filter(pk=thread.pk).update(values={"applicant": {"name": "Ada", "date_of_birth": dob}})
    thread.refresh_from_db()
    args = {"amount": 800, "dob": dob, "memo": f"born {dob}"}
    effect = Effect.objects.create(
        key=f"gh:{thread.pk}:verify", name="verify", thread=thread, args=args, status=EffectStatus.DONE,
        result={"echo": dob}, calls=1,
    )  # fmt: skip
    with transaction.atomic():
        audit_record(
            actor=None, actor_label="runtime", action=AuditAction.EFFECT_EXECUTED, subject_type="effect",
            subject_id=effect.key, thread_id=thread.pk, graph=thread.graph,
            details={"key": effect.key, "name": "verify", "args": args, "result": effect.result},
        )  # fmt: skip
    return thread, dob


def test_an_audit_reader_who_sees_values_masked_gets_an_effects_arguments_masked(paid):
    thread, dob = paid
    body = ApiClient(token_issue(user=_audit_reader())).get("/api/audit", thread=str(thread.pk)).content.decode()
    assert dob not in body
    [event] = [e for e in json.loads(body) if e["action"] == AuditAction.EFFECT_EXECUTED]
    assert event["details"]["args"] == {"amount": 800, "dob": MASK, "memo": "born •••"}
    assert event["details"]["result"] == {"echo": MASK}


def test_a_reviewer_who_sees_values_masked_gets_an_effects_arguments_masked(paid, personas):
    thread, dob = paid
    [shown] = gateway.effects_masked(personas["reviewer"].user, thread, list(Effect.objects.filter(thread=thread)))
    assert (shown.args["dob"], shown.result) == (MASK, {"echo": MASK})
    [seen] = gateway.effects_masked(personas["auditor"].user, thread, list(Effect.objects.filter(thread=thread)))
    assert (seen.args["dob"], seen.result) == (dob, {"echo": dob})  # who may see the value sees it
