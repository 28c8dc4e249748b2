"""Field-level redaction in every console surface: pages, checkpoint views, diffs, the audit page, websockets.

A KYC applicant's date of birth and document number are sensitive paths of
the ``kyc_onboarding`` graph. A reviewer (no ``view_sensitive``) never gets
them in any HTML the console sends; an approver or auditor does, and each
reveal writes a ``sensitive.revealed`` audit event.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from approvals import gateway
from approvals.models import ApprovalTask, AuditEvent, Decision
from approvals.redaction import MASK
from tests.conftest import api_decide, pending_tasks, thread_settled, thread_start
from tests.console.conftest import console_client, console_decide
from tests.console.test_live import ORIGIN, Socket, _cookie, loop  # noqa: F401 - the module's event loop fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

DOB = "1920-07-25"
PASSPORT = "P7654321"
SECRETS = (DOB, PASSPORT)
CHECKPOINT_VIEW = {"HX-Request": "true", "HX-Target": "checkpoint-view"}


def _kyc_input(name: str) -> dict[str, Any]:
    return {
        "applicant": {"name": name, "country": "GB", "date_of_birth": DOB},
        "documents": [{"type": "passport", "number": PASSPORT, "status": "received"}],
    }


@pytest.fixture(scope="module")
def kyc(personas: Any, worker: Any, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """One KYC thread run to completion (identity approved, account opened), shared by the module:
    its identity task, its compliance task, and the thread id."""
    with django_db_blocker.unblock():
        name = f"Rosalind {uuid.uuid4().hex[:6]}"
        thread = thread_start(personas["operator"], "kyc_onboarding", _kyc_input(name))
        [identity] = pending_tasks(personas["reviewer"], thread["id"])
        ok = api_decide(personas["approver"], identity)
        assert ok.status_code == 201, ok.content
        compliance = next(
            t for t in pending_tasks(personas["reviewer"], thread["id"], count=1) if t["id"] != identity["id"]
        )
        ok = api_decide(personas["approver"], compliance, reason="documents in order")
        assert ok.status_code == 201, ok.content
        done = thread_settled(personas["reviewer"], thread["id"], timeout=30)
        assert done["status"] == "completed", done
        yield {"thread": thread["id"], "identity": identity["id"], "compliance": compliance["id"], "name": name}


def _reveals(thread_id: str, persona: Any) -> int:
    return AuditEvent.objects.filter(thread_id=thread_id, action="sensitive.revealed", actor=persona.user).count()


def _assert_masked(html: str) -> None:
    for secret in SECRETS:
        assert secret not in html
    assert MASK in html


def _assert_shown(html: str) -> None:
    assert DOB in html and PASSPORT in html


def _checkpoint_ids(personas: Any, thread_id: str) -> list[str]:
    return [v.checkpoint_id for v in gateway.history_for(personas["reviewer"].user, thread_id, limit=100)]


def _surfaces(personas: Any, client: Client, kyc: dict[str, Any]) -> dict[str, str]:
    """Every page the console sends about this thread: task pages, thread page, each checkpoint view and its diff."""
    pages = {
        "identity task": client.get(f"/tasks/{kyc['identity']}/").content.decode(),
        "compliance task": client.get(f"/tasks/{kyc['compliance']}/").content.decode(),
        "thread": client.get(f"/threads/{kyc['thread']}/").content.decode(),
    }
    for cp in _checkpoint_ids(personas, kyc["thread"]):
        pages[f"checkpoint {cp}"] = client.get(
            f"/threads/{kyc['thread']}/", {"checkpoint": cp}, headers=CHECKPOINT_VIEW
        ).content.decode()
    return pages


def test_a_reviewer_never_receives_a_sensitive_value_in_any_page(personas, kyc):
    client = console_client(personas["reviewer"])
    surfaces = _surfaces(personas, client, kyc)
    for where, html in surfaces.items():
        for secret in SECRETS:
            assert secret not in html, f"{secret} leaked in the {where}"
    assert kyc["name"] in surfaces["identity task"]  # not everything is masked: only the declared paths
    assert MASK in surfaces["identity task"] and MASK in surfaces["compliance task"]
    assert _reveals(kyc["thread"], personas["reviewer"]) == 0


def test_the_diff_that_introduces_the_applicant_is_masked_for_a_reviewer(personas, kyc):
    client = console_client(personas["reviewer"])
    diffs = []
    for cp in _checkpoint_ids(personas, kyc["thread"]):
        html = client.get(f"/threads/{kyc['thread']}/", {"checkpoint": cp}, headers=CHECKPOINT_VIEW).content.decode()
        diff = html.partition("Changed at this step")[2]
        if "<code>applicant</code>" in diff or "<code>documents</code>" in diff:
            diffs.append(diff)
    assert diffs, "no checkpoint diff shows the applicant being added"
    for diff in diffs:
        _assert_masked(diff)


@pytest.mark.parametrize("role", ["approver", "auditor"])
def test_a_permitted_viewer_sees_the_values_and_each_reveal_is_audited(role, personas, kyc):
    persona = personas[role]
    before = _reveals(kyc["thread"], persona)
    client = console_client(persona)
    task_page = client.get(f"/tasks/{kyc['compliance']}/").content.decode()
    _assert_shown(task_page)
    assert _reveals(kyc["thread"], persona) > before
    revealed = {
        p
        for e in AuditEvent.objects.filter(thread_id=kyc["thread"], action="sensitive.revealed", actor=persona.user)
        for p in e.details["paths"]
    }
    assert any(p.endswith("applicant.date_of_birth") for p in revealed)
    assert DOB in client.get(f"/threads/{kyc['thread']}/").content.decode()


def _audit_reader() -> User:
    reader = User.objects.create_user(f"audit-reader-{uuid.uuid4().hex[:6]}")
    reader.user_permissions.add(
        Permission.objects.get(codename="view_audit"), Permission.objects.get(codename="view_all_graphs")
    )
    return reader


def test_the_audit_page_masks_details_for_a_reader_without_the_sensitive_permission(personas, kyc):
    client = Client()
    client.force_login(_audit_reader())
    html = client.get("/audit/", {"thread": kyc["thread"], "action": "thread.started"}).content.decode()
    assert "thread.started" in html
    _assert_masked(html)
    full = console_client(personas["auditor"]).get("/audit/", {"thread": kyc["thread"], "action": "thread.started"})
    _assert_shown(full.content.decode())


def test_the_thread_socket_never_sends_a_reviewer_a_sensitive_value(personas, kyc, loop):  # noqa: F811
    socket = Socket(loop, f"/ws/threads/{kyc['thread']}/", [ORIGIN, _cookie(personas["reviewer"])])
    assert socket.connect()[0]
    fragment = socket.receive()
    socket.close()
    assert 'id="thread-live"' in fragment
    assert not any(secret in fragment for secret in SECRETS)


def test_the_task_socket_masks_the_result_for_a_reviewer_and_audits_an_approvers_reveal(personas, kyc, loop):  # noqa: F811
    url = f"/ws/tasks/{kyc['identity']}/"
    reviewer = Socket(loop, url, [ORIGIN, _cookie(personas["reviewer"])])
    assert reviewer.connect()[0]
    fragment = reviewer.receive()
    reviewer.close()
    _assert_masked(fragment)

    approver = personas["approver"]
    before = _reveals(kyc["thread"], approver)
    socket = Socket(loop, url, [ORIGIN, _cookie(approver)])
    assert socket.connect()[0]
    fragment = socket.receive()
    _assert_shown(fragment)
    # The reveal is audited once per render, and that audit event does not trigger another render (no loop).
    assert socket.nothing(0.6)
    socket.close()
    assert _reveals(kyc["thread"], approver) > before


def test_an_edit_that_sends_the_mask_back_keeps_the_real_value_and_one_that_changes_it_is_refused(personas):
    """The form's JSON box shows the applicant with the date of birth masked: sending it back with the
    country changed was refused outright ("leave redacted fields unchanged"), though the reviewer had."""
    thread = thread_start(personas["operator"], "kyc_onboarding", _kyc_input("Edit Case"))
    [identity] = pending_tasks(personas["reviewer"], thread["id"])
    approved = api_decide(personas["approver"], identity)
    assert approved.status_code == 201
    compliance = next(t for t in pending_tasks(personas["reviewer"], thread["id"]) if t["id"] != identity["id"])
    task = ApprovalTask.objects.get(pk=compliance["id"])
    real = ApprovalTask.objects.get(pk=task.pk).thread.values["applicant"]["date_of_birth"]
    client = console_client(personas["reviewer"])
    overwrite = json.dumps({"name": "Edited", "country": "GB", "date_of_birth": "1999-01-01"})
    refused = console_decide(client, task, decision="edit", reason="fix", **{"edits.applicant": overwrite})
    assert refused.status_code == 422 and "redacted for you" in refused.content.decode()
    assert ApprovalTask.objects.get(pk=task.pk).status == "pending"
    edited = json.dumps({"name": "Edited", "country": "GB", "date_of_birth": MASK})
    response = console_decide(client, task, decision="edit", reason="fix the name", **{"edits.applicant": edited})
    assert response.status_code == 201, response.content.decode()[-3000:]
    assert real not in response.content.decode()
    decision = Decision.objects.get(task_id=task.pk)
    assert decision.state_patch["applicant"] == {"name": "Edited", "country": "GB", "date_of_birth": real}


def test_a_reading_of_the_audit_trail_is_audited_as_one_reveal_naming_what_it_showed(personas, kyc):
    """Each event's details were revealed, and audited, one by one: a page of 100 events wrote up to 100
    ``sensitive.revealed`` events (an outside examiner found 960 of a trail's 2,400 came from a few page views),
    and the trail grew while it was read. A page read is one reveal, naming the events it showed unmasked."""
    since = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    # Two threads started now: the page of the graph's starts since then shows both (an earlier test's
    # threads in this database could push the module's own thread off the page).
    threads = [
        thread_start(personas["operator"], "kyc_onboarding", _kyc_input(f"Lise {uuid.uuid4().hex[:6]}"))["id"]
        for _ in range(2)
    ]
    started = {f"audit:{e.pk}" for e in AuditEvent.objects.filter(thread_id__in=threads, action="thread.started")}
    assert len(started) == 2  # two events on the page with values to reveal: one reveal each would be two
    auditor = personas["auditor"]
    reveals = AuditEvent.objects.filter(action="sensitive.revealed", actor=auditor.user)
    before = set(reveals.values_list("id", flat=True))
    query = {"graph": "kyc_onboarding", "action": "thread.started", "since": since.strftime("%Y-%m-%dT%H:%M:%S")}
    html = console_client(auditor).get("/audit/", query).content.decode()
    _assert_shown(html)
    [reveal] = reveals.exclude(id__in=before)
    assert (reveal.subject_type, reveal.subject_id) == ("audit", "page")
    assert started <= set(reveal.details["subjects"]) and reveal.details["count"] == len(reveal.details["subjects"])
    for subject in reveal.details["subjects"]:  # each names an event whose values the page showed
        details = json.dumps(AuditEvent.objects.get(pk=subject.removeprefix("audit:")).details)
        assert DOB in details or PASSPORT in details
    assert any(p.endswith("date_of_birth") for p in reveal.details["paths"])
    # Reading the page again is another reading: one more.
    console_client(auditor).get("/audit/", query)
    assert reveals.exclude(id__in=before).count() == 2
