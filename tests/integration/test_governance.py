"""Decisions that hold up to an auditor: quorum, separation of duties, evidence, signatures, redaction."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from approvals.models import ApprovalTask, AuditEvent, Decision
from approvals.redaction import MASK
from approvals.security import SESSION_AUTH_AT
from runtime.models import Run
from tests.conftest import ApiClient, api_decide, api_wait, pending_tasks, thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _refusals(task_id: str) -> list[dict]:
    events = AuditEvent.objects.filter(subject_id=task_id, action="decision.refused").order_by("id")
    return list(events.values_list("details", flat=True))


def test_a_two_approver_gate_resumes_only_when_the_quorum_is_met(personas):
    reviewer, approver, approver2 = personas["reviewer"], personas["approver"], personas["approver2"]
    thread = thread_start(personas["operator"], "four_eyes", {"subject": "wire", "amount": 5000})
    [task] = pending_tasks(reviewer, thread["id"])
    assert reviewer.client.get(f"/api/tasks/{task['id']}").json()["required_approvals"] == 2

    first = api_decide(reviewer, task, reason="looks fine")
    assert first.status_code == 201 and first.json()["meaning"] == "approved"
    assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"
    assert not Run.objects.filter(thread_id=thread["id"], kind="resume").exists()

    again = api_decide(reviewer, task)
    assert again.status_code == 409  # one signature per person

    not_final = api_decide(personas["reviewer2"], task)
    assert not_final.status_code == 403  # the quorum's last approval needs the approver role
    assert _refusals(task["id"])[-1]["rule"] == "quorum.final_approver"

    final = api_decide(approver, task, reason="second pair of eyes")
    assert final.status_code == 201, final.content
    done = thread_settled(reviewer, thread["id"])
    assert done["values"]["answers"] == ["approve:5000"]
    detail = approver2.client.get(f"/api/tasks/{task['id']}").json()
    assert [a["actor"] for a in detail["approvals"]] == [reviewer.username, approver.username]
    made = AuditEvent.objects.get(subject_id=task["id"], action="decision.made")
    assert made.details["quorum"] == {"approvals": 2, "required": 2, "met": True}
    assert AuditEvent.objects.filter(subject_id=task["id"], action="decision.recorded").count() == 1


def test_a_single_rejection_rejects_a_quorum_task(personas):
    thread = thread_start(personas["operator"], "four_eyes", {"subject": "wire", "amount": 5000})
    [task] = pending_tasks(personas["reviewer"], thread["id"])
    assert api_decide(personas["approver"], task).status_code == 201
    rejected = api_decide(personas["reviewer"], task, "reject", reason="beneficiary not verified")
    assert rejected.status_code == 201
    assert rejected.json()["meaning"] == "rejected"
    done = thread_settled(personas["reviewer"], thread["id"])
    assert done["values"]["answers"] == ["reject:5000"]


def test_the_thread_starter_cannot_give_the_final_approval(personas):
    admin = personas["admin"]  # may both start threads and decide
    thread = thread_start(admin, "four_eyes", {"subject": "self-dealing", "amount": 5000})
    [task] = pending_tasks(admin, thread["id"])
    assert api_decide(personas["approver"], task).status_code == 201
    refused = api_decide(admin, task)
    assert refused.status_code == 403
    assert "started this thread" in refused.json()["error"]["message"]
    assert _refusals(task["id"])[-1]["rule"] == "separation_of_duties.starter"
    assert Decision.objects.filter(task_id=task["id"]).count() == 1
    assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"
    # The same refusal through /lg/ is audited too: the run and its decision share a transaction, whose
    # rollback took the refusal's record with it.
    resume = {"assistant_id": "four_eyes", "command": {"resume": {"decision": "approve"}}}
    through_lg = admin.client.post(f"/lg/threads/{thread['id']}/runs", resume)
    assert through_lg.status_code == 403, through_lg.content
    assert [r["rule"] for r in _refusals(task["id"])] == ["separation_of_duties.starter"] * 2
    assert Decision.objects.filter(task_id=task["id"]).count() == 1


def test_under_separation_of_duties_an_edit_is_a_proposal_another_approver_completes(personas):
    thread = thread_start(personas["operator"], "four_eyes", {"subject": "wire", "amount": 5000})
    [task] = pending_tasks(personas["reviewer"], thread["id"])
    proposal = api_decide(personas["approver"], task, "edit", reason="cap it", edits={"amount": 4000})
    assert proposal.status_code == 201 and proposal.json()["meaning"] == "reviewed"
    assert api_decide(personas["reviewer"], task).status_code == 201  # 1 of 2
    assert api_decide(personas["approver"], task).status_code == 409  # the editor signed already
    assert api_decide(personas["approver2"], task).status_code == 201  # 2 of 2, not the editor
    done = thread_settled(personas["reviewer"], thread["id"])
    assert done["values"]["answers"] == ["approve:4000"]  # the gate re-ran with the proposed edit


def test_a_decision_is_bound_to_the_evidence_its_signer_saw(personas):
    reviewer = personas["reviewer"]
    thread = thread_start(personas["operator"], "four_eyes", {"subject": "small", "amount": 10})
    [task] = pending_tasks(reviewer, thread["id"])
    detail = reviewer.client.get(f"/api/tasks/{task['id']}").json()
    stale = api_decide(reviewer, task, evidence_digest="0" * 64)
    assert stale.status_code == 409 and stale.json()["error"]["field"] == "evidence_digest"
    ok = api_decide(reviewer, task, evidence_digest=detail["evidence_digest"])
    assert ok.status_code == 201
    assert Decision.objects.get(pk=ok.json()["id"]).evidence_digest == detail["evidence_digest"]


def _kyc_task(personas):
    applicant = {"name": "Rosalind Franklin", "country": "GB", "date_of_birth": "1920-07-25"}
    documents = [{"type": "passport", "number": "P1234567", "status": "received"}]
    thread = thread_start(personas["operator"], "kyc_onboarding", {"applicant": applicant, "documents": documents})
    [task] = pending_tasks(personas["reviewer"], thread["id"])
    return thread, task


def test_sensitive_fields_are_masked_for_reviewers_and_reveals_are_audited(personas):
    thread, task = _kyc_task(personas)
    seen = personas["reviewer"].client.get(f"/api/tasks/{task['id']}").json()
    assert seen["state"]["applicant"]["date_of_birth"] == MASK
    assert seen["state"]["documents"][0]["number"] == MASK
    assert seen["payload"]["details"]["documents"][0]["number"] == MASK
    assert seen["state"]["applicant"]["name"] == "Rosalind Franklin"
    thread_view = personas["reviewer"].client.get(f"/api/threads/{thread['id']}").json()
    assert thread_view["values"]["applicant"]["date_of_birth"] == MASK
    history = personas["reviewer"].client.get(f"/api/threads/{thread['id']}/history").json()
    assert all(MASK in str(h["values"]) for h in history if "applicant" in h["values"])
    assert "1920-07-25" not in str(history)
    assert not AuditEvent.objects.filter(thread_id=thread["id"], action="sensitive.revealed").exists()

    unmasked = personas["approver"].client.get(f"/api/tasks/{task['id']}").json()
    assert unmasked["state"]["applicant"]["date_of_birth"] == "1920-07-25"
    assert unmasked["evidence_digest"] != seen["evidence_digest"]  # different redaction, different evidence
    reveals = AuditEvent.objects.filter(thread_id=thread["id"], action="sensitive.revealed")
    assert {r.actor_label for r in reveals} == {personas["approver"].username}
    revealed = {path for r in reveals for path in r.details["paths"]}
    assert {"applicant.date_of_birth", "documents[0].number", "details.documents[0].number"} <= revealed


def test_one_thread_read_shows_one_set_of_values_and_audits_one_reveal(personas):
    """``GET /api/threads/{id}`` answers with the checkpoint's values: only that reveal is audited (the
    listing snapshot it used to guard too, and then replace, was never shown)."""
    thread, _ = _kyc_task(personas)
    reveals = AuditEvent.objects.filter(thread_id=thread["id"], action="sensitive.revealed")
    before = reveals.count()
    shown = personas["approver"].client.get(f"/api/threads/{thread['id']}").json()
    assert shown["values"]["applicant"]["date_of_birth"] == "1920-07-25"
    [reveal] = reveals.order_by("-id")[: reveals.count() - before]
    assert reveal.subject_type == "checkpoint" and reveal.subject_id == shown["checkpoint_id"]
    assert "applicant.date_of_birth" in reveal.details["paths"]


def test_a_start_that_waits_audits_one_reveal_for_the_state_it_answers_with(personas):
    applicant = {"name": "Rosalind Franklin", "country": "GB", "date_of_birth": "1920-07-25"}
    body = {"graph": "kyc_onboarding", "input": {"applicant": applicant, "documents": []}}
    admin = personas["admin"].client
    response = admin.client.post(
        f"/api/threads?wait_for=interrupted,failed&timeout={api_wait(30)}",
        json.dumps(body),
        content_type="application/json",
        headers=admin.headers,
    )
    assert response.status_code == 201, response.content
    shown = response.json()
    assert shown["status"] == "interrupted" and shown["values"]["applicant"]["date_of_birth"] == "1920-07-25"
    [reveal] = AuditEvent.objects.filter(thread_id=shown["id"], action="sensitive.revealed")
    assert reveal.subject_type == "checkpoint" and reveal.subject_id == shown["checkpoint_id"]


def test_audit_details_are_masked_for_a_reader_without_the_sensitive_permission(personas):
    thread, _ = _kyc_task(personas)
    reader = User.objects.create_user(f"audit-reader-{thread['id'][:6]}")
    reader.user_permissions.add(
        Permission.objects.get(codename="view_audit"), Permission.objects.get(codename="view_all_graphs")
    )
    from approvals.tokens import token_issue

    client = ApiClient(token_issue(user=reader))
    events = client.get("/api/audit", thread=thread["id"], action="thread.started").json()
    assert events[0]["details"]["input"]["applicant"]["date_of_birth"] == MASK
    full = personas["auditor"].client.get("/api/audit", thread=thread["id"], action="thread.started").json()
    assert full[0]["details"]["input"]["applicant"]["date_of_birth"] == "1920-07-25"


def test_a_stale_sign_in_must_reenter_the_password_to_sign(personas):
    reviewer = personas["reviewer"]
    thread = thread_start(personas["operator"], "four_eyes", {"subject": "reauth", "amount": 10})
    [task] = pending_tasks(reviewer, thread["id"])
    browser = Client()
    browser.force_login(reviewer.user)
    session = browser.session
    session[SESSION_AUTH_AT] = (timezone.now() - timedelta(hours=2)).isoformat()
    session.save()
    url = f"/api/tasks/{task['id']}/decision"

    missing = browser.post(url, {"decision": "approve"}, content_type="application/json")
    assert missing.status_code == 403 and missing.json()["error"]["field"] == "password"
    wrong = browser.post(url, {"decision": "approve", "password": "nope"}, content_type="application/json")
    assert wrong.status_code == 403
    assert [r["rule"] for r in _refusals(task["id"])] == [
        "signature.reauthentication_required",
        "signature.reauthentication_failed",
    ]
    signed = browser.post(url, {"decision": "approve", "password": "gatehouse"}, content_type="application/json")
    assert signed.status_code == 201, signed.content
    decision = Decision.objects.get(pk=signed.json()["id"])
    assert decision.reauthenticated_at is not None
    assert decision.signer_name == reviewer.username and decision.meaning == "approved"
    thread_settled(reviewer, thread["id"])


def test_a_one_time_code_can_sign_instead_of_the_password(personas):
    from django_otp.oath import totp
    from django_otp.plugins.otp_totp.models import TOTPDevice

    approver = personas["approver2"]
    device, _ = TOTPDevice.objects.get_or_create(user=approver.user, name="phone", defaults={"confirmed": True})
    thread = thread_start(personas["operator"], "four_eyes", {"subject": "otp", "amount": 10})
    [task] = pending_tasks(approver, thread["id"])
    browser = Client()
    browser.force_login(approver.user)
    session = browser.session
    session[SESSION_AUTH_AT] = (timezone.now() - timedelta(hours=2)).isoformat()
    session.save()
    url = f"/api/tasks/{task['id']}/decision"

    bad = browser.post(url, {"decision": "approve", "otp": "000000"}, content_type="application/json")
    assert bad.status_code == 403 and bad.json()["error"]["field"] == "otp"
    code = f"{totp(device.bin_key, device.step, device.t0, device.digits, device.drift):06d}"
    signed = browser.post(url, {"decision": "approve", "otp": code}, content_type="application/json")
    assert signed.status_code == 201, signed.content
    assert Decision.objects.get(pk=signed.json()["id"]).reauthenticated_at is not None
    thread_settled(approver, thread["id"])


def test_a_redacted_value_sent_back_as_an_edit_keeps_the_real_one(personas):
    """The reviewer edits the name in a form that shows the date of birth masked and sends the mask back:
    the real date is kept (never overwritten by the mask, never erased), and still hidden from them."""
    thread, task = _kyc_task(personas)
    # identity_check allows approve/reject only; answer it, then edit at the compliance gate.
    api_decide(personas["reviewer"], task)
    [compliance] = pending_tasks(personas["reviewer"], thread["id"])
    response = api_decide(
        personas["reviewer"],
        compliance,
        "edit",
        reason="fix name",
        edits={"applicant": {"name": "R. Franklin", "country": "GB", "date_of_birth": MASK}},
    )
    assert response.status_code == 201, response.content
    assert response.json()["state_patch"]["applicant"]["date_of_birth"] == MASK
    stored = Decision.objects.get(task_id=compliance["id"]).state_patch
    assert stored == {"applicant": {"name": "R. Franklin", "country": "GB", "date_of_birth": "1920-07-25"}}
    done = thread_settled(personas["admin"], thread["id"])
    assert done["values"]["applicant"]["date_of_birth"] == "1920-07-25"


def test_reading_sensitive_audit_details_is_itself_audited(personas):
    thread, _ = _kyc_task(personas)
    personas["auditor"].client.get("/api/audit", thread=thread["id"], action="thread.started")
    reveal = AuditEvent.objects.filter(thread_id=thread["id"], action="sensitive.revealed", subject_type="audit")
    assert reveal.filter(actor_label=personas["auditor"].username).exists()


def test_a_gate_may_require_several_rejections(personas):
    thread = thread_start(personas["operator"], "four_eyes", {"subject": "huge", "amount": 2_000_000})
    [task] = pending_tasks(personas["reviewer"], thread["id"])
    body = {"decision": "reject", "reason": "too big"}
    first = api_decide(personas["reviewer"], task, None, **body)
    assert first.status_code == 201 and first.json()["meaning"] == "rejected"
    assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"  # one veto of two
    assert api_decide(personas["approver"], task, None, **body).status_code == 201
    done = thread_settled(personas["reviewer"], thread["id"])
    assert done["values"]["answers"] == ["reject:2000000"]


# --- writes into a thread's state by someone who sees values masked (update_state, fork, a run's input) ---


def _admin_values(personas, thread_id: str) -> dict:
    return personas["admin"].client.get(f"/api/threads/{thread_id}").json()["values"]


def _closed_kyc_thread(personas) -> str:
    thread, task = _kyc_task(personas)
    assert api_decide(personas["reviewer"], task).status_code == 201
    [compliance] = pending_tasks(personas["reviewer"], thread["id"])
    assert api_decide(personas["reviewer"], compliance, "reject", reason="closing it").status_code == 201
    thread_settled(personas["admin"], thread["id"])
    return thread["id"]


def test_update_state_by_a_masked_operator_keeps_what_they_cannot_see(personas):
    """``update_state`` replaces a key's whole value: an operator who sees the date of birth masked erased it
    by leaving it out, stored the mask by sending it back, and overwrote it by sending a value."""
    operator = personas["operator"]
    thread_id = _closed_kyc_thread(personas)
    url = f"/lg/threads/{thread_id}/state"
    left_out = operator.client.post(url, {"values": {"applicant": {"name": "R. Franklin", "country": "GB"}}})
    assert left_out.status_code == 200, left_out.content
    assert _admin_values(personas, thread_id)["applicant"] == {
        "name": "R. Franklin",
        "country": "GB",
        "date_of_birth": "1920-07-25",
    }
    sent_back = {"applicant": {"name": "Rosalind", "country": "GB", "date_of_birth": MASK}}
    assert operator.client.post(url, {"values": sent_back}).status_code == 200
    assert _admin_values(personas, thread_id)["applicant"]["date_of_birth"] == "1920-07-25"
    overwrite = {"applicant": {"name": "Rosalind", "country": "GB", "date_of_birth": "1999-01-01"}}
    refused = operator.client.post(url, {"values": overwrite})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "values.applicant.date_of_birth"
    assert _admin_values(personas, thread_id)["applicant"]["date_of_birth"] == "1920-07-25"
    # The hidden value itself, guessed right, was a 200 (a no-op write): every guess was answered
    history = len(operator.client.post(f"/lg/threads/{thread_id}/history", {"limit": 100}).json())
    guessed = {"applicant": {"name": "Rosalind", "country": "GB", "date_of_birth": "1920-07-25"}}
    right = operator.client.post(url, {"values": guessed})
    assert (right.status_code, right.json()) == (refused.status_code, refused.json())
    assert len(operator.client.post(f"/lg/threads/{thread_id}/history", {"limit": 100}).json()) == history
    # Someone who sees the value may change it; nobody may store the mask itself.
    assert personas["admin"].client.post(url, {"values": overwrite}).status_code == 200
    assert _admin_values(personas, thread_id)["applicant"]["date_of_birth"] == "1999-01-01"
    masked = personas["admin"].client.post(url, {"values": sent_back})
    assert masked.status_code == 422 and masked.json()["error"]["field"] == "values.applicant.date_of_birth"


def test_a_fork_by_a_masked_operator_keeps_the_hidden_values_of_its_checkpoint(personas):
    operator = personas["operator"]
    thread, task = _kyc_task(personas)
    checkpoint = str(ApprovalTask.objects.get(pk=task["id"]).checkpoint_id)
    url = f"/api/threads/{thread['id']}/fork"
    forged = {"documents": [{"type": "passport", "number": "FORGED", "status": "received"}]}
    refused = operator.client.post(url, {"checkpoint_id": checkpoint, "values": forged, "reason": "relabel"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "values.documents[0].number"
    assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"  # nothing forked, nothing superseded
    relabel = {"documents": [{"type": "id card", "number": MASK, "status": "received"}]}
    forked = operator.client.post(url, {"checkpoint_id": checkpoint, "values": relabel, "reason": "relabel"})
    assert forked.status_code == 201, forked.content
    assert _admin_values(personas, thread["id"])["documents"] == [
        {"type": "id card", "number": "P1234567", "status": "received"}
    ]


def test_a_new_runs_input_on_a_thread_with_state_is_held_to_the_same_rule(personas):
    operator = personas["operator"]
    thread_id = _closed_kyc_thread(personas)
    url = f"/lg/threads/{thread_id}/runs"
    overwrite = {"applicant": {"name": "R", "country": "GB", "date_of_birth": "1999-01-01"}}
    refused = operator.client.post(url, {"assistant_id": "kyc_onboarding", "input": overwrite})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "input.applicant.date_of_birth"
    left_out = {"applicant": {"name": "R", "country": "GB"}}
    started = operator.client.post(url, {"assistant_id": "kyc_onboarding", "input": left_out})
    assert started.status_code == 200, started.content
    run = Run.objects.get(pk=started.json()["run_id"])
    assert run.input["applicant"]["date_of_birth"] == "1920-07-25"
