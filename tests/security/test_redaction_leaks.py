"""Redaction abuse cases: a principal without "view sensitive" tries to read or infer a masked value.

Each test is a threat, named as such. The KYC graph declares
``applicant.date_of_birth`` and ``documents[*].number`` sensitive; a reviewer
may decide KYC tasks but never sees those values, in any form: not as a
value, not as a search result count, not as a digest it could brute-force.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from approvals.audit import canonical
from approvals.redaction import MASK
from tests.conftest import Persona, api_decide, pending_tasks, thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

DOB = "1931-05-17"
EDITED_DOB = "1931-05-18"
RESUME_DOB = "1931-05-19"
PASSPORT = "P1357913"


def _applicant(name: str, dob: str = DOB) -> dict[str, Any]:
    return {"name": name, "country": "GB", "date_of_birth": dob}


def _kyc_start(personas: dict[str, Persona], name: str) -> dict[str, Any]:
    graph_input = {
        "applicant": _applicant(name),
        "documents": [{"type": "passport", "number": PASSPORT, "status": "received"}],
    }
    return thread_start(personas["operator"], "kyc_onboarding", graph_input)


def _to_compliance(personas: dict[str, Persona], thread_id: str) -> dict[str, Any]:
    """Approve the identity check; the compliance review task that follows."""
    [identity] = pending_tasks(personas["approver"], thread_id)
    ok = api_decide(personas["approver"], identity)
    assert ok.status_code == 201, ok.content
    return next(t for t in pending_tasks(personas["approver"], thread_id) if t["id"] != identity["id"])


@pytest.fixture(scope="module")
def edited(personas: dict[str, Persona], worker: Any, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """A KYC thread whose compliance task an admin decided with an edit of ``applicant`` (a new date of
    birth in the state patch) and a resume value quoting another one."""
    with django_db_blocker.unblock():
        name = f"Edited {uuid.uuid4().hex[:6]}"
        thread = _kyc_start(personas, name)
        compliance = _to_compliance(personas, thread["id"])
        decided = api_decide(
            personas["admin"],
            compliance,
            "edit",
            reason="corrected date of birth",
            edits={"applicant": _applicant(name, EDITED_DOB)},
            resume={
                "decision": "edit",
                "reason": "corrected date of birth",
                "action_args": {"tier": "standard"},
                "data": {"applicant": {"date_of_birth": RESUME_DOB}},
            },
        )
        assert decided.status_code == 201, decided.content
        assert thread_settled(personas["admin"], thread["id"], timeout=30)["status"] == "completed"
        yield {"thread": thread["id"], "task": compliance["id"], "name": name}


def _reviewer_task(personas: dict[str, Persona], task_id: str) -> dict[str, Any]:
    response = personas["reviewer"].client.get(f"/api/tasks/{task_id}")
    assert response.status_code == 200, response.content
    return response.json()


def test_a_reviewer_cannot_read_a_redacted_value_from_a_decisions_state_patch(personas, edited):
    [decision] = _reviewer_task(personas, edited["task"])["approvals"]
    assert decision["state_patch"]["applicant"]["date_of_birth"] == MASK
    assert decision["state_patch"]["applicant"]["name"] == edited["name"]  # only the declared path is masked


def test_a_reviewer_cannot_read_a_redacted_value_from_a_decisions_resume_value(personas, edited):
    [decision] = _reviewer_task(personas, edited["task"])["approvals"]
    assert decision["resume_value"]["data"]["applicant"]["date_of_birth"] == MASK
    assert RESUME_DOB not in str(decision) and EDITED_DOB not in str(decision)


def test_a_permitted_reader_sees_the_decisions_values_and_the_reveal_is_audited(personas, edited):
    from approvals.models import AuditEvent

    before = AuditEvent.objects.filter(action="sensitive.revealed", actor=personas["auditor"].user).count()
    body = personas["auditor"].client.get(f"/api/tasks/{edited['task']}").json()
    [decision] = body["approvals"]
    assert decision["state_patch"]["applicant"]["date_of_birth"] == EDITED_DOB
    assert decision["resume_value"]["data"]["applicant"]["date_of_birth"] == RESUME_DOB
    assert AuditEvent.objects.filter(action="sensitive.revealed", actor=personas["auditor"].user).count() > before


def test_a_masked_editor_cannot_erase_a_hidden_value_by_cutting_its_list_short(personas, edited):
    """An outside tester, as operator, sent ``update_state`` with ``{"documents": []}``: 200, and the passport
    number they had only ever seen masked was gone."""
    thread = edited["thread"]
    before = personas["admin"].client.get(f"/lg/threads/{thread}/state").json()
    response = personas["operator"].client.post(f"/lg/threads/{thread}/state", {"values": {"documents": []}})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "values.documents[0].number"
    after = personas["admin"].client.get(f"/lg/threads/{thread}/state").json()
    assert after["checkpoint"] == before["checkpoint"] and after["values"]["documents"][0]["number"] == PASSPORT


def test_an_audit_reader_without_reveal_rights_cannot_read_a_response_on_the_decision_page(personas):
    # A gate that takes a response (the demo's do not: their graphs decline whatever is not approved),
    # with the applicant's date of birth sensitive.
    name = f"Respond {uuid.uuid4().hex[:6]}"
    applicant = {"name": name, "date_of_birth": DOB}
    thread = thread_start(personas["operator"], "chatty_review", {"applicant": applicant})
    [gate] = pending_tasks(personas["approver"], thread["id"])
    responded = api_decide(
        personas["admin"],
        gate,
        "respond",
        resume={
            "decision": "respond",
            "message": "see data",
            "data": {"applicant": {"date_of_birth": RESUME_DOB}},
        },
    )
    assert responded.status_code == 201, responded.content
    reader = _audit_reader()
    html = reader.get(f"/decisions/{responded.json()['id']}/").content.decode()
    assert "Response" in html and MASK in html
    assert RESUME_DOB not in html


def _audit_reader() -> Client:
    from django.contrib.auth.models import User

    user = User.objects.create_user(f"audit-reader-{uuid.uuid4().hex[:6]}")
    # An auditor's rights without "view sensitive" (a custom role: the built-in auditor may reveal).
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_audit", "view_all_graphs", "view_approvaltask", "view_thread"])
    )
    client = Client()
    client.force_login(user)
    return client


# --- search is no oracle ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def waiting(personas: dict[str, Persona], worker: Any, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """A KYC thread paused at its identity check: its values hold the applicant and the passport number."""
    with django_db_blocker.unblock():
        name = f"Search {uuid.uuid4().hex[:6]}"
        thread = _kyc_start(personas, name)
        pending_tasks(personas["reviewer"], thread["id"])
        yield {"thread": thread["id"], "name": name}


def _search(persona: Persona, values: dict[str, Any], thread_id: str) -> list[str]:
    response = persona.client.post("/lg/threads/search", {"values": values, "ids": [thread_id]})
    assert response.status_code == 200, response.content
    return [t["thread_id"] for t in response.json()]


def test_searching_on_a_redacted_path_is_no_oracle(personas, waiting):
    reviewer, name = personas["reviewer"], waiting["name"]
    # The brute force of the issue: the right date of birth would give 1 result, a wrong one 0.
    right = _search(reviewer, {"applicant": _applicant(name, DOB)}, waiting["thread"])
    wrong = _search(reviewer, {"applicant": _applicant(name, "1931-05-16")}, waiting["thread"])
    assert right == wrong == []
    passport = [{"type": "passport", "number": PASSPORT, "status": "received"}]
    assert _search(reviewer, {"documents": passport}, waiting["thread"]) == []


def test_searching_on_a_redacted_path_matches_the_mask_as_the_reader_sees_it(personas, waiting):
    reviewer, name = personas["reviewer"], waiting["name"]
    assert _search(reviewer, {"applicant": _applicant(name, MASK)}, waiting["thread"]) == [waiting["thread"]]
    masked_docs = [{"type": "passport", "number": MASK, "status": "received"}]
    assert _search(reviewer, {"documents": masked_docs}, waiting["thread"]) == [waiting["thread"]]
    # The rest of the value still has to match.
    assert _search(reviewer, {"applicant": _applicant("Someone Else", MASK)}, waiting["thread"]) == []


def test_a_permitted_reader_searches_on_the_real_values(personas, waiting):
    auditor, name = personas["auditor"], waiting["name"]
    assert _search(auditor, {"applicant": _applicant(name, DOB)}, waiting["thread"]) == [waiting["thread"]]
    assert _search(auditor, {"applicant": _applicant(name, MASK)}, waiting["thread"]) == []


def _count(persona: Persona, values: dict[str, Any]) -> int:
    response = persona.client.post("/lg/threads/count", {"values": values})
    assert response.status_code == 200, response.content
    return int(response.json())


def test_counting_on_a_redacted_path_is_no_oracle(personas, waiting):
    """threads.count filters as threads.search does: a count of 1 for the right date of birth would tell it."""
    reviewer, auditor, name = personas["reviewer"], personas["auditor"], waiting["name"]
    right = _count(reviewer, {"applicant": _applicant(name, DOB)})
    wrong = _count(reviewer, {"applicant": _applicant(name, "1931-05-16")})
    assert right == wrong == 0
    assert _count(reviewer, {"applicant": _applicant(name, MASK)}) == 1
    assert _count(auditor, {"applicant": _applicant(name, DOB)}) == 1


# --- digests are no oracle ---------------------------------------------------------------------------


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def _substitute(value: Any, candidate: str) -> Any:
    if value == MASK:
        return candidate
    if isinstance(value, dict):
        return {k: _substitute(v, candidate) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, candidate) for v in value]
    return value


def test_a_reviewer_cannot_brute_force_a_redacted_value_from_the_task_digests(personas):
    thread = _kyc_start(personas, f"Digest {uuid.uuid4().hex[:6]}")
    compliance = _to_compliance(personas, thread["id"])
    task = _reviewer_task(personas, compliance["id"])
    assert MASK in str(task["payload"])
    # Every date in a century: the reviewer fills the masked field with each and hashes what it got.
    start = date(1900, 1, 1)
    candidates = [(start + timedelta(days=n)).isoformat() for n in range(36_600)]
    redaction = ["applicant.date_of_birth", "documents[*].number"]
    found = []
    for candidate in candidates:
        payload_digest = _digest(_substitute(task["payload"], candidate))
        evidence = _digest({"payload": payload_digest, "checkpoint": task["checkpoint_id"], "redaction": redaction})
        if payload_digest == task["payload_digest"] or evidence == task["evidence_digest"]:
            found.append(candidate)
    assert found == []
    # The digests still bind the decision to what the reviewer saw.
    decided = api_decide(personas["reviewer"], compliance, evidence_digest=task["evidence_digest"])
    assert decided.status_code == 201, decided.content
