"""Threat: a four-eyes approval counted for a proposal its signer never saw.

The outside compliance review's reproduction, through the API against the real stack (PostgreSQL, a
Celery worker, the fake bank): on a loan gate asking for two approvals, rev1 proposed 15,000, appr read
the task, lead proposed 90,000, and appr's approval, sent with the evidence digest of the page before,
counted; the admin's approval then paid 90,000 that only one approver ever approved. Each test failed on
the code before the fix.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from approvals.models import ApprovalTask, AuditEvent, Decision
from runtime.models import Effect
from tests.conftest import api_decide, loan_input, pending_tasks, thread_settled, thread_start
from tests.console.conftest import console_client

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _two_approval_loan(operator, reader, amount: int) -> tuple[dict, dict]:
    """A loan paused at its review, whose task asks for two approvals (as a gate policy of two would)."""
    thread = thread_start(operator, "loan_approval", loan_input(amount=amount, income=40000))
    [task] = pending_tasks(reader, thread["id"])
    ApprovalTask.objects.filter(pk=task["id"]).update(required_approvals=2)
    return thread, reader.client.get(f"/api/tasks/{task['id']}").json()


def _paid(bank, thread_id: str) -> list[int]:
    key = f"gh:{thread_id}:disburse"
    if not bank.ledger.executions.get(key):
        return []
    _, _, response = bank.ledger.responses[key]
    return [response["request"]["amount"]] * bank.ledger.executions[key]


def _event(decision_id: str) -> dict:
    events = AuditEvent.objects.filter(action__in=["decision.made", "decision.recorded"])
    return events.get(details__decision=decision_id).details


def _verify(thread_id: str) -> str:
    out = StringIO()
    call_command("decisions_verify", "--thread", thread_id, stdout=out, stderr=out)
    return out.getvalue()


def test_an_approval_sent_with_the_digest_from_before_a_new_proposal_is_refused(personas, bank):
    rev1, lead, appr, admin = personas["reviewer"], personas["reviewer2"], personas["approver"], personas["admin"]
    thread, task = _two_approval_loan(personas["operator"], appr, amount=20000)
    cp = task["checkpoint_id"]
    proposed = api_decide(rev1, task, "edit", reason="cap at 15k", edits={"amount": 15000}, checkpoint_id=cp)
    assert proposed.status_code == 201, proposed.content
    seen = appr.client.get(f"/api/tasks/{task['id']}").json()["evidence_digest"]

    raised = api_decide(lead, task, "edit", reason="raise to 90k", edits={"amount": 90000}, checkpoint_id=cp)
    assert raised.status_code == 201, raised.content
    assert appr.client.get(f"/api/tasks/{task['id']}").json()["evidence_digest"] != seen

    stale = api_decide(appr, task, reason="ok with 15k cap", evidence_digest=seen, checkpoint_id=cp)
    assert stale.status_code == 409, stale.content
    error = stale.json()["error"]
    assert error["field"] == "evidence_digest" and "new proposal" in error["message"], error
    assert not Decision.objects.filter(task_id=task["id"], actor=appr.user).exists()
    assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"

    # The admin's approval alone is not the quorum: nothing is paid on one approval of 90,000.
    alone = api_decide(admin, task, reason="final", checkpoint_id=cp)
    assert alone.status_code == 201, alone.content
    assert _event(alone.json()["id"])["quorum"] == {"approvals": 1, "required": 2, "met": False}
    assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"

    # appr reloads, reads 90,000, and approves it: now two approvers approved what is paid.
    fresh = appr.client.get(f"/api/tasks/{task['id']}").json()
    assert fresh["approvals_remaining"] == 1
    final = api_decide(appr, task, reason="90k read", evidence_digest=fresh["evidence_digest"], checkpoint_id=cp)
    assert final.status_code == 201, final.content
    assert thread_settled(appr, thread["id"], timeout=30)["status"] == "completed"
    assert _paid(bank, thread["id"]) == [90000]
    assert Effect.objects.get(thread_id=thread["id"], name="disburse").args["amount"] == 90000
    for approval in (alone, final):
        details = _event(approval.json()["id"])
        assert details["signed_action"]["args"]["amount"] == 90000
        assert details["proposal"]["decision"] == raised.json()["id"]
    assert "signed intent proven" in _verify(thread["id"])


def test_an_approval_given_before_a_new_proposal_does_not_count_for_it(personas, bank):
    lead, appr, admin = personas["reviewer2"], personas["approver"], personas["admin"]
    thread, task = _two_approval_loan(personas["operator"], appr, amount=20000)
    first = api_decide(appr, task, reason="20k is fine")
    assert first.status_code == 201, first.content
    raised = api_decide(lead, task, "edit", reason="raise to 90k", edits={"amount": 90000})
    assert raised.status_code == 201, raised.content
    assert _event(raised.json()["id"])["supersedes"] == [first.json()["id"]]
    shown = appr.client.get(f"/api/tasks/{task['id']}").json()
    assert shown["approvals_remaining"] == 2
    # The API says which approvals no longer count: a client reading the list alone counted this one.
    assert {a["id"]: a["superseded"] for a in shown["approvals"]} == {
        first.json()["id"]: True,
        raised.json()["id"]: False,
    }

    # Before the fix the admin's approval completed the quorum with appr's approval of 20,000, and paid 90,000.
    second = api_decide(admin, task, reason="final")
    assert second.status_code == 201, second.content
    assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"
    assert _paid(bank, thread["id"]) == []

    again = api_decide(appr, task, reason="90k read")  # their approval was superseded: they may sign the new one
    assert again.status_code == 201, again.content
    assert _event(again.json()["id"])["quorum"] == {"approvals": 2, "required": 2, "met": True}
    assert thread_settled(appr, thread["id"], timeout=30)["status"] == "completed"
    assert _paid(bank, thread["id"]) == [90000]
    assert "signed intent proven" in _verify(thread["id"])


def test_an_approvals_record_shows_the_proposal_it_approved(personas, bank):
    """Outside finding M1: the approval's record said 18,000 and "No edits", though 15,000 was paid."""
    rev1, appr, admin = personas["reviewer"], personas["approver"], personas["admin"]
    thread, task = _two_approval_loan(personas["operator"], appr, amount=18000)
    proposed = api_decide(rev1, task, "edit", reason="cap", edits={"amount": 15000})
    assert proposed.status_code == 201, proposed.content
    assert api_decide(appr, task, reason="ok").status_code == 201
    final = api_decide(admin, task, reason="final")
    assert final.status_code == 201, final.content
    assert thread_settled(appr, thread["id"], timeout=30)["status"] == "completed"
    assert _paid(bank, thread["id"]) == [15000]

    decision = Decision.objects.get(pk=final.json()["id"])
    assert decision.signed_action == {"name": "disburse", "args": {"amount": 15000, "term_months": 24}}
    made = AuditEvent.objects.get(subject_id=task["id"], action="decision.made").details
    assert made["signed_action"]["args"]["amount"] == 15000
    assert made["proposal"]["decision"] == proposed.json()["id"]
    assert made["proposal"]["state_patch"] == {"amount": 15000}
    assert "signed intent proven" in _verify(thread["id"])

    html = console_client(personas["auditor"]).get(f"/decisions/{decision.pk}/").content.decode()
    edits = html.split('id="edits"')[1].split("</section>")[0]
    assert "Approves the proposal by" in edits and proposed.json()["signer_name"] in edits, edits
    assert "18000" in edits and "15000" in edits, edits
    assert "No edits: the state and the proposed action were accepted as seen" not in html
