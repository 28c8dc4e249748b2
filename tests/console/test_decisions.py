"""Decision history for auditors: who may see it, its filters and keyset pages, and each decision's evidence."""

from __future__ import annotations

import uuid
from datetime import timedelta
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from approvals.models import Decision
from runtime.models import Effect, EffectStatus, Run, RunKind, RunStatus
from tests.approvals.handoffs import person
from tests.conftest import api_decide, pending_tasks, thread_settled, thread_start
from tests.console.conftest import console_client
from tests.factories import decision_make, loan_gate, task_make

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def recorded(personas, made_up_gates):
    """Three decisions on fresh tasks of a gate unique to the test, so filters count only these."""
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    now = timezone.now()
    loan = task_make(node=gate)
    kyc = task_make(graph="kyc_onboarding", node=gate)
    # Under separation of duties an edit is a proposal another signer approves: "reviewed", not "approved".
    other = task_make(node=gate, payload={**loan_gate(), "separation_of_duties": True})
    return gate, {
        "approved": decision_make(loan, personas["approver"].user, reason="fine", at=now - timedelta(hours=3)),
        "rejected": decision_make(
            kyc, personas["reviewer"].user, "reject", reason="bad docs", at=now - timedelta(hours=2)
        ),
        "reviewed": decision_make(
            other,
            personas["reviewer2"].user,
            "edit",
            reason="smaller",
            state_patch={"amount": 1},
            at=now - timedelta(hours=1),
        ),
    }


def _ids(response) -> set[str]:
    html = response.content.decode()
    return {part.split('"', 1)[0] for part in html.split('data-decision-id="')[1:]}


@pytest.mark.parametrize(
    "role,expected",
    [
        ("auditor", 200),
        ("admin", 200),
        ("reviewer", 403),
        ("approver", 403),
        ("operator", 403),
        ("outsider", 403),
    ],
)
def test_only_audit_readers_see_the_decision_history(role, expected, personas, recorded):
    client = console_client(personas[role])
    assert client.get("/decisions/").status_code == expected
    assert client.get(f"/decisions/{recorded[1]['approved'].pk}/").status_code == expected


def test_the_nav_links_to_decisions_for_auditors_only(personas):
    assert 'href="/decisions/"' in console_client(personas["auditor"]).get("/").content.decode()
    assert 'href="/decisions/"' not in console_client(personas["reviewer"]).get("/").content.decode()


@pytest.mark.parametrize(
    "params,expect",
    [
        ({}, {"approved", "rejected", "reviewed"}),
        ({"graph": "kyc_onboarding"}, {"rejected"}),
        ({"outcome": "reject"}, {"rejected"}),
        ({"meaning": "reviewed"}, {"reviewed"}),
        ({"outcome": "approve"}, {"approved"}),
    ],
)
def test_filters_by_graph_outcome_and_meaning(params, expect, personas, recorded):
    gate, decisions = recorded
    response = console_client(personas["auditor"]).get("/decisions/", {"node": gate, **params})
    assert _ids(response) == {str(decisions[name].pk) for name in expect}


def test_filters_by_actor_and_time_range(personas, recorded):
    gate, decisions = recorded
    client = console_client(personas["auditor"])
    by_actor = client.get("/decisions/", {"node": gate, "actor": personas["reviewer2"].username})
    assert _ids(by_actor) == {str(decisions["reviewed"].pk)}
    since = (timezone.now() - timedelta(hours=2, minutes=30)).strftime("%Y-%m-%dT%H:%M")
    until = (timezone.now() - timedelta(hours=1, minutes=30)).strftime("%Y-%m-%dT%H:%M")
    ranged = client.get("/decisions/", {"node": gate, "since": since, "until": until})
    assert _ids(ranged) == {str(decisions["rejected"].pk)}


def test_the_filter_form_gets_only_the_results_partial(personas, recorded):
    gate, _ = recorded
    response = console_client(personas["auditor"]).get(
        "/decisions/", {"node": gate}, headers={"HX-Request": "true", "HX-Target": "decision-results"}
    )
    html = response.content.decode()
    assert html.startswith('<section id="decision-results"') and "<html" not in html


def _signer_cell(html: str, decision: Decision) -> str:
    row = html.split(f'data-decision-id="{decision.pk}"', 1)[1].split("</tr>", 1)[0]
    return unescape(row.split("<td>")[6].split("</td>", 1)[0])


def test_the_signer_is_named_once_when_it_is_the_account(personas, recorded):
    """It read "reviewer / reviewer": the account beside the signer's name only says something when they differ."""
    gate, decisions = recorded
    named = person("approver")
    named.first_name, named.last_name = "Ada", "Lovelace"
    named.save(update_fields=["first_name", "last_name"])
    full = decision_make(task_make(node=gate), named)
    html = console_client(personas["auditor"]).get("/decisions/", {"node": gate}).content.decode()
    plain = decisions["rejected"]
    assert plain.signer_name == plain.actor.get_username()
    assert _signer_cell(html, plain).strip() == plain.actor.get_username()
    assert _signer_cell(html, full) == f'Ada Lovelace <span class="muted small">{named.get_username()}</span>'


def test_keyset_pages_cover_every_decision_once_newest_first(personas, monkeypatch, made_up_gates):
    from console.views import decisions as view

    monkeypatch.setattr(view, "PAGE_SIZE", 2)
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    now = timezone.now()
    made = [
        decision_make(task_make(node=gate), personas["approver"].user, at=now - timedelta(minutes=i)) for i in range(5)
    ]
    client = console_client(personas["auditor"])
    seen: list[str] = []
    params = {"node": gate}
    for _ in range(5):
        html = client.get("/decisions/", params).content.decode()
        seen += [p.split('"', 1)[0] for p in html.split('data-decision-id="')[1:]]
        if 'rel="next"' not in html:
            break
        link = html.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0]
        params = {"node": gate, "cursor": parse_qs(urlsplit(unescape(link)).query)["cursor"][0]}
    assert seen == [str(d.pk) for d in made]


def test_a_broken_cursor_is_a_clear_error(personas):
    response = console_client(personas["auditor"]).get("/decisions/", {"cursor": "garbage"})
    assert response.status_code == 200 and "page link is broken" in response.content.decode()


@pytest.mark.parametrize(
    "params,said",
    [
        ({"since": "2026-12-10T00:00", "until": "2026-12-01T00:00"}, "since: must be before until"),
        ({"since": "2026-12-01T00:00", "until": "2026-12-01T00:00"}, "since: must be before until"),
        ({"graph": "nope"}, "graph 'nope' not found"),
    ],
)
def test_a_filter_that_can_match_nothing_says_why_as_the_dashboard_does(personas, params, said):
    """An empty list without a word read as "no decisions then"; the dashboard refuses both."""
    response = console_client(personas["auditor"]).get("/decisions/", params)
    assert response.status_code == 200
    assert said in unescape(response.content.decode())


def test_a_decision_whose_checkpoint_is_gone_still_shows_its_signature(personas, recorded):
    decision = recorded[1]["rejected"]
    html = console_client(personas["auditor"]).get(f"/decisions/{decision.pk}/").content.decode()
    assert "no longer stored" in html
    assert "Rejected" in html and "bad docs" in html and "0 of 1 approval" in html


def test_a_decision_shows_what_the_retries_of_its_failed_resume_paid(personas):
    """It said "Resume run Failed … performed no recorded effects" when an operator's retry had then paid."""
    task = task_make()
    decision = decision_make(task, personas["approver"].user)
    Run.objects.filter(pk=decision.run_id).update(status=RunStatus.FAILED, error="bank timed out")
    later = timezone.now() + timedelta(seconds=1)
    retry = Run.objects.create(
        thread=task.thread, kind=RunKind.RETRY, status=RunStatus.SUCCEEDED, created_by=personas["operator"].user
    )
    Run.objects.filter(pk=retry.pk).update(created_at=later)
    paid = Effect.objects.create(
        key=f"gh:{task.thread_id}:disburse:{uuid.uuid4().hex[:6]}",
        name="disburse",
        thread=task.thread,
        run=retry,
        status=EffectStatus.DONE,
        result={"transfer": "T-1", "amount": 20000},
    )
    # The next decision's resume, and what it did, belong to that decision.
    resume = Run.objects.create(thread=task.thread, kind=RunKind.RESUME, status=RunStatus.SUCCEEDED)
    Run.objects.filter(pk=resume.pk).update(created_at=later + timedelta(seconds=1))
    notified = Effect.objects.create(
        key=f"gh:{task.thread_id}:notify:{uuid.uuid4().hex[:6]}",
        name="notify",
        thread=task.thread,
        run=resume,
        status=EffectStatus.DONE,
    )

    html = console_client(personas["auditor"]).get(f"/decisions/{decision.pk}/").content.decode()
    effects = html.split('id="effects"')[1].split("</section>")[0]
    assert "bank timed out" in effects  # the resume run, as it ended
    assert f"then retry run by {personas['operator'].username}" in effects and "Succeeded" in effects
    assert paid.key in effects and "no recorded effects" not in effects
    assert notified.key not in effects


@pytest.mark.integration
@pytest.mark.usefixtures("live_worker")
def test_a_decision_shows_its_evidence_signature_quorum_and_effects(personas):
    name = f"Evidence {uuid.uuid4().hex[:6]}"
    thread = thread_start(
        personas["operator"],
        "kyc_onboarding",
        {
            "applicant": {"name": name, "country": "GB", "date_of_birth": "1931-02-03"},
            "documents": [{"type": "passport", "number": "P0000042", "status": "received"}],
        },
    )
    [identity] = pending_tasks(personas["reviewer"], thread["id"])
    assert api_decide(personas["approver"], identity).status_code == 201
    compliance = next(t for t in pending_tasks(personas["reviewer"], thread["id"]) if t["id"] != identity["id"])
    made = api_decide(personas["approver"], compliance, "edit", reason="premium customer", edits={"tier": "premium"})
    assert made.status_code == 201, made.content
    assert thread_settled(personas["reviewer"], thread["id"], timeout=30)["status"] == "completed"
    decision = Decision.objects.get(pk=made.json()["id"])
    effect = Effect.objects.get(run=decision.run)

    html = console_client(personas["auditor"]).get(f"/decisions/{decision.pk}/").content.decode()
    assert "premium customer" in html  # the reason
    assert decision.evidence_digest and decision.evidence_digest in html  # the signature
    assert decision.signer_name in html and "Approved" in html
    assert "1 of 1 approval" in html  # the quorum
    assert name in html and "1931-02-03" in html  # the state seen (the auditor may see sensitive fields)
    edits_html = html.split('id="edits"')[1].split("</section>")[0]
    assert "tier" in edits_html and "premium" in edits_html, edits_html  # the edits (as a diff against the state seen)
    assert effect.key in html and effect.status in html  # what the action then did

    listed = console_client(personas["auditor"]).get(
        "/decisions/", {"graph": "kyc_onboarding", "node": "compliance_review"}
    )
    assert str(decision.pk) in _ids(listed)


def test_a_decision_page_says_how_its_signer_proved_who_they_are(personas):
    """An outside tester's find: a decision signed with an API token read "Re-authenticated: no (signed within
    the session's window)": there was no session. Each decision keeps what proved its signer."""
    by_token = task_make()
    made = api_decide(personas["approver"], by_token, "approve", reason="token")
    assert made.status_code == 201, made.content
    by_session = task_make()
    signed = console_client(personas["approver"]).post(
        f"/tasks/{by_session.pk}/decide",
        {"decision": "approve", "reason": "session", "checkpoint_id": by_session.checkpoint_id},
    )
    assert signed.status_code in (201, 303), signed.content
    token_decision, session_decision = Decision.objects.get(task=by_token), Decision.objects.get(task=by_session)
    assert (token_decision.signed_via, session_decision.signed_via) == ("token", "session")
    auditor = console_client(personas["auditor"])
    token_page = unescape(auditor.get(f"/decisions/{token_decision.pk}/").content.decode())
    assert "signed with an API token" in token_page and "session's window" not in token_page
    session_page = unescape(auditor.get(f"/decisions/{session_decision.pk}/").content.decode())
    assert "signed within the session's window" in session_page and "API token" not in session_page
