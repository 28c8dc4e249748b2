"""Console pages and partials: who sees what (table-driven), filters, pagination, CSRF, form errors."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from html import unescape

import pytest
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.utils import timezone

from approvals import services
from approvals.errors import InvalidInput
from approvals.inbox_filter import InboxFilter
from approvals.inputs import MAX_METADATA_BYTES
from approvals.models import AuditEvent, Decision, TaskClaim
from console.selectors import inbox_list
from runtime.models import Thread
from tests.conftest import loan_input
from tests.console.conftest import console_client, console_decide
from tests.external.conftest import create, engine_persona, task_body
from tests.factories import task_decided, task_make

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def loan_task():
    return task_make(metadata={"case": f"C-{uuid.uuid4().hex[:6]}", "applicant": "Ada Lovelace"})


@pytest.fixture
def kyc_task():
    return task_make(graph="kyc_onboarding", node="compliance_review")


PAGES = ["inbox", "loan_task", "kyc_task", "loan_thread", "threads", "audit", "start"]

# role → status per page, in PAGES order:
#                 inbox loan_task kyc_task loan_thread threads audit start
EXPECTED = {
    "reviewer": (200, 200, 200, 200, 200, 403, 403),
    "loan_reviewer": (200, 200, 404, 200, 200, 403, 403),
    "auditor": (200, 200, 200, 200, 200, 200, 403),
    "operator": (200, 200, 200, 200, 200, 403, 200),
    "admin": (200, 200, 200, 200, 200, 200, 200),
    "outsider": (403, 404, 404, 404, 403, 403, 403),
}


def _url(page: str, loan_task, kyc_task) -> str:
    return {
        "inbox": "/",
        "loan_task": f"/tasks/{loan_task.pk}/",
        "kyc_task": f"/tasks/{kyc_task.pk}/",
        "loan_thread": f"/threads/{loan_task.thread_id}/",
        "threads": "/threads/",
        "audit": "/audit/",
        "start": "/threads/new",
    }[page]


@pytest.mark.parametrize("role", list(EXPECTED))
def test_each_role_gets_exactly_its_pages(role, personas, loan_task, kyc_task):
    client = console_client(personas[role])
    got = {page: client.get(_url(page, loan_task, kyc_task)).status_code for page in PAGES}
    assert got == dict(zip(PAGES, EXPECTED[role], strict=True))


@pytest.mark.parametrize("page", PAGES)
def test_anonymous_users_are_sent_to_sign_in(page, loan_task, kyc_task):
    response = Client().get(_url(page, loan_task, kyc_task))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_an_expired_session_on_an_htmx_request_reloads_to_sign_in():
    response = Client().get("/", headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/?graph=x"})
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=%2F%3Fgraph%3Dx"


@contextmanager
def _signed_out_while_it_runs(client: Client) -> Iterator[None]:
    """The client's session is deleted (a sign-out in another tab) just after its request has loaded it: on
    the request's next query, so the view runs signed in and the session middleware then finds it gone."""
    key = client.cookies["sessionid"].value
    state = {"loaded": False, "deleted": False}

    def sign_out_after_load(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        result = execute(sql, params, many, context)
        if "django_session" in sql and sql.lstrip().upper().startswith("SELECT"):
            state["loaded"] = True
        elif state["loaded"] and not state["deleted"]:
            state["deleted"] = True
            Session.objects.filter(session_key=key).delete()
        return result

    with connection.execute_wrapper(sign_out_after_load):
        yield
    assert state["deleted"], "the session was never deleted mid-request: the test proved nothing"


def test_a_read_whose_session_ends_while_it_runs_is_answered_as_signed_out(personas, loan_task):
    """A filter answered while another tab signed out got Django's bare 400 ("the request's session was deleted
    before the request completed"), and htmx swapped it over the inbox's results: every later filter change
    found no target and did nothing, not even go to the sign-in page."""
    client = console_client(personas["reviewer"])
    htmx = {"HX-Request": "true", "HX-Target": "inbox-results", "HX-Current-URL": "http://testserver/?due=soon"}
    with _signed_out_while_it_runs(client):
        response = client.get("/?due=soon", headers=htmx)
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=%2F%3Fdue%3Dsoon"
    client = console_client(personas["reviewer"])
    with _signed_out_while_it_runs(client):
        page = client.get("/?due=soon")
    assert page.status_code == 302 and page["Location"] == "/accounts/login/?next=/%3Fdue%3Dsoon"


def test_a_write_whose_session_ends_while_it_runs_is_not_called_unrecorded(personas, loan_task):
    """The write ran signed in, so it was recorded: the notice says it may have been, not that it was not."""
    client = console_client(personas["reviewer"])
    htmx = {"HX-Request": "true", "HX-Current-URL": f"http://testserver/tasks/{loan_task.pk}/"}
    with _signed_out_while_it_runs(client):
        response = client.post(f"/tasks/{loan_task.pk}/claim", headers=htmx)
    assert response.status_code == 401
    assert response["HX-Retarget"] == "#session-notice"
    body = response.content.decode()
    assert "may have been recorded" in body and "nothing was recorded" not in body
    assert f"next=%2Ftasks%2F{loan_task.pk}%2F" in body
    assert TaskClaim.objects.filter(task=loan_task).exists()


def test_sign_in_and_sign_out(personas):
    client = Client(enforce_csrf_checks=True)
    page = client.get("/accounts/login/")
    assert b'name="username"' in page.content and b'for="id_username"' in page.content
    token = page.cookies["csrftoken"].value
    bad = client.post(
        "/accounts/login/",
        {"username": personas["reviewer"].username, "password": "nope", "csrfmiddlewaretoken": token},
    )
    assert b"did not match" in bad.content
    good = client.post(
        "/accounts/login/",
        {"username": personas["reviewer"].username, "password": "gatehouse", "csrfmiddlewaretoken": token},
    )
    assert good.status_code == 302
    assert client.get("/").status_code == 200
    token = client.cookies["csrftoken"].value
    assert client.post("/accounts/logout/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert client.get("/").status_code == 302


def test_auditors_get_no_decision_controls_and_the_endpoint_refuses_them(personas, loan_task):
    client = console_client(personas["auditor"])
    page = client.get(f"/tasks/{loan_task.pk}/").content.decode()
    assert 'id="read-only-note"' in page
    assert "decide-button" not in page and "claim-button" not in page
    response = console_decide(client, loan_task, htmx=False, decision="approve", reason="x")
    assert response.status_code == 403
    assert client.post(f"/tasks/{loan_task.pk}/claim").status_code == 403
    assert not Decision.objects.filter(task=loan_task).exists()


def test_the_task_page_renders_the_gate_payload_and_a_typed_edit_form(personas, loan_task):
    page = console_client(personas["reviewer"]).get(f"/tasks/{loan_task.pk}/").content.decode()
    assert "Proposed action" in page and "disburse" in page
    assert 'name="edits.amount"' in page and 'inputmode="numeric"' in page and 'name="edits.term_months"' in page
    assert 'name="action_args.amount"' not in page  # one input per value: the state field the action reads
    assert "also the disburse argument" in page
    assert 'name="edits.applicant"' not in page  # not editable at this gate
    assert f'name="checkpoint_id" value="{loan_task.checkpoint_id}"' in page
    assert 'ws-connect="/ws/tasks/' in page
    assert "<script>" not in page  # external scripts only (CSP-ready)


@pytest.mark.parametrize(
    "payload,expect",
    [
        (
            {
                "action_requests": [{"name": "send_email", "args": {"to": "a@b.c"}, "description": "Send it"}],
                "review_configs": [{"action_name": "send_email", "allowed_decisions": ["approve", "edit", "reject"]}],
            },
            ['name="decisions[0].type"', 'name="decisions[0].args.to"', "send_email"],
        ),
        (
            [
                {
                    "action_request": {"action": "refund", "args": {"amount": 12.5}},
                    "description": "Refund?",
                    "config": {"allow_accept": True, "allow_edit": True, "allow_respond": False, "allow_ignore": True},
                }
            ],
            ['name="action_args.amount"', 'inputmode="decimal"', "Refund?", 'value="approve"', 'value="reject"'],
        ),
        (
            {"question": "Anything else?", "nested": {"deep": [1, 2, {"x": True}]}},
            ['class="json-tree"', "Anything else?", 'value="respond"'],
        ),
    ],
)
def test_each_payload_kind_renders_its_own_form(personas, payload, expect):
    task = task_make(payload=payload)
    page = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    for fragment in expect:
        assert fragment in page, fragment


# --- decisions refused: the error next to the field, nothing saved -------------------------


def test_a_value_of_the_wrong_type_is_shown_next_to_its_field(personas, loan_task):
    response = console_decide(
        console_client(personas["reviewer"]),
        loan_task,
        **{"decision": "approve", "reason": "ok", "edits.amount": "lots"},
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert 'id="f-edits-amount-err"' in html and "must be a whole number" in html
    assert 'value="lots"' in html  # what the reviewer typed is kept
    assert not Decision.objects.filter(task=loan_task).exists()


@pytest.mark.parametrize("typed", ["\u0661\u0662\u0663", "\uff11\uff15\uff10\uff10\uff10", "15_000", "1_5"])
def test_a_number_edit_in_another_script_or_python_syntax_is_refused_not_paid(personas, loan_task, typed):
    """An edit of amount "١٢٣" (Arabic-Indic digits) was approved and paid as 123."""
    response = console_decide(
        console_client(personas["reviewer"]),
        loan_task,
        **{"decision": "approve", "reason": "ok", "edits.amount": typed},
    )
    assert response.status_code == 422
    html = response.content.decode()
    error = html.split('id="f-edits-amount-err"', 1)[1].split("</p>", 1)[0]
    assert "must be a whole number" in error
    assert not Decision.objects.filter(task=loan_task).exists()


def test_a_start_amount_in_another_script_is_refused_naming_the_field(personas):
    before = Thread.objects.count()
    response = console_client(personas["operator"]).post(
        "/threads/new",
        {
            "graph": "loan_approval",
            "input.amount": "\u0661\u0668\u0660\u0660\u0660",
            "input.applicant": "A",
            "input.income": "5",
        },
    )
    assert response.status_code == 422
    assert "must be a whole number" in response.content.decode().split('id="f-input-amount-err"', 1)[1].split("</p>")[0]
    assert Thread.objects.count() == before


def test_a_reject_without_a_reason_is_refused_at_the_reason_field(personas, loan_task):
    response = console_decide(console_client(personas["reviewer"]), loan_task, decision="reject", reason="  ")
    assert response.status_code == 422
    assert 'id="f-reason-err"' in response.content.decode()
    assert not Decision.objects.filter(task=loan_task).exists()


def test_a_missing_outcome_is_refused(personas, loan_task):
    response = console_decide(console_client(personas["reviewer"]), loan_task, reason="hm")
    assert response.status_code == 422
    assert 'id="decision-err"' in response.content.decode()


def test_a_stale_view_is_refused_with_a_refresh_offer(personas, loan_task):
    response = console_decide(
        console_client(personas["reviewer"]),
        loan_task,
        decision="approve",
        reason="ok",
        checkpoint_id="an-older-checkpoint",
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert 'id="stale-notice"' in html and "Refresh the task" in html
    assert not Decision.objects.filter(task=loan_task).exists()


def test_invalid_raw_json_edits_are_refused(personas, loan_task):
    response = console_decide(
        console_client(personas["reviewer"]), loan_task, decision="edit", reason="r", edits_json="{not json"
    )
    assert response.status_code == 422
    assert "not valid JSON" in response.content.decode()


# --- claims ------------------------------------------------------------------------------------


def test_a_claimed_task_cannot_be_decided_or_claimed_by_someone_else(personas, loan_task):
    holder, other = console_client(personas["reviewer"]), console_client(personas["reviewer2"])
    assert holder.post(f"/tasks/{loan_task.pk}/claim", headers={"HX-Request": "true"}).status_code == 200
    claim = TaskClaim.objects.get(task=loan_task)
    assert claim.user == personas["reviewer"].user and claim.expires_at > timezone.now()
    assert AuditEvent.objects.filter(subject_id=str(loan_task.pk), action="task.claimed").exists()

    refused = other.post(f"/tasks/{loan_task.pk}/claim", headers={"HX-Request": "true"})
    assert refused.status_code == 409 and "has claimed this task" in refused.content.decode()
    decided = console_decide(other, loan_task, decision="approve", reason="mine now")
    assert decided.status_code == 409
    assert 'id="claim-error"' in decided.content.decode()
    assert not Decision.objects.filter(task=loan_task).exists()
    # The inbox shows who holds it.
    inbox = other.get("/", {"q": loan_task.thread.metadata["case"]}).content.decode()
    assert personas["reviewer"].username in inbox


def test_only_the_holder_or_an_admin_can_release_a_claim(personas, loan_task):
    console_client(personas["reviewer"]).post(f"/tasks/{loan_task.pk}/claim")
    assert console_client(personas["reviewer2"]).post(f"/tasks/{loan_task.pk}/release").status_code == 403
    assert TaskClaim.objects.filter(task=loan_task).exists()
    response = console_client(personas["admin"]).post(f"/tasks/{loan_task.pk}/release", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert not TaskClaim.objects.filter(task=loan_task).exists()


def test_an_expired_claim_no_longer_blocks_others(personas, loan_task):
    console_client(personas["reviewer"]).post(f"/tasks/{loan_task.pk}/claim")
    TaskClaim.objects.filter(task=loan_task).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = console_client(personas["reviewer2"]).post(
        f"/tasks/{loan_task.pk}/claim", headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert TaskClaim.objects.get(task=loan_task).user == personas["reviewer2"].user


# --- CSRF ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["claim", "release", "decide"])
def test_posts_without_a_csrf_token_are_refused(personas, loan_task, path):
    client = console_client(personas["reviewer"], enforce_csrf=True)
    assert client.post(f"/tasks/{loan_task.pk}/{path}", {"decision": "approve"}).status_code == 403
    assert not TaskClaim.objects.filter(task=loan_task).exists()


@pytest.mark.parametrize("htmx", [False, True])
def test_a_refused_csrf_check_is_the_consoles_error_page_saying_nothing_was_recorded(personas, loan_task, htmx):
    """An outside QA's find: a console form refused by the CSRF check got Django's bare default page."""
    client = console_client(personas["reviewer"], enforce_csrf=True)
    headers = {"HX-Request": "true"} if htmx else {}
    response = client.post(f"/tasks/{loan_task.pk}/decide", {"decision": "approve"}, headers=headers)
    html = response.content.decode()
    assert response.status_code == 403
    assert 'id="error-403"' in html and "Nothing was recorded: reload the page" in html, html[:500]
    assert ("<nav" in html) is not htmx  # a whole console page, or the fragment htmx swaps in
    assert "CSRF verification failed" not in html  # not Django's page


def test_htmx_requests_carry_the_token_from_the_page(personas, loan_task):
    client = console_client(personas["reviewer"], enforce_csrf=True)
    page = client.get(f"/tasks/{loan_task.pk}/").content.decode()
    token = page.split('hx-headers=\'{"X-CSRFToken": "', 1)[1].split('"', 1)[0]
    response = client.post(f"/tasks/{loan_task.pk}/claim", headers={"HX-Request": "true", "X-CSRFToken": token})
    assert response.status_code == 200


def test_starting_a_thread_needs_a_csrf_token(personas):
    client = console_client(personas["operator"], enforce_csrf=True)
    assert client.post("/threads/new", {"graph": "loan_approval"}).status_code == 403


# --- inbox filters, search, pagination ---------------------------------------------------------------


def test_inbox_filters_and_search(personas):
    marker = uuid.uuid4().hex[:8]
    a = task_make(metadata={"case": f"{marker}-A", "applicant": "Grace Hopper"})
    b = task_make(graph="kyc_onboarding", node="identity_check", metadata={"case": f"{marker}-B"})
    c = task_decided(by=personas["reviewer"].user, metadata={"case": f"{marker}-C"})
    client = console_client(personas["reviewer"])

    def ids(**params):
        html = client.get("/", {"q": marker, **params}).content.decode()
        return {t for t in (a, b, c) if f'data-task-id="{t.pk}"' in html}

    assert ids() == {a, b}  # pending by default
    assert ids(status="all") == {a, b, c}
    assert ids(status="decided") == {c}
    assert ids(graph="kyc_onboarding") == {b}
    assert ids(node="identity_check") == {b}
    assert ids(q="grace hop") == {a}
    by_thread = client.get("/", {"q": str(b.thread_id)}).content.decode()
    assert {t for t in (a, b, c) if f'data-task-id="{t.pk}"' in by_thread} == {b}
    console_client(personas["reviewer"]).post(f"/tasks/{a.pk}/claim")
    assert ids(claimed="mine") == {a}
    assert ids(claimed="unclaimed") == {b}
    other = console_client(personas["reviewer2"]).get("/", {"q": marker, "claimed": "others"}).content.decode()
    assert f'data-task-id="{a.pk}"' in other and f'data-task-id="{b.pk}"' not in other


def test_the_filter_form_gets_just_the_results_partial(personas):
    htmx = {"HX-Request": "true", "HX-Target": "inbox-results"}
    response = console_client(personas["reviewer"]).get("/", {"q": "x"}, headers=htmx)
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="inbox-results"') and "<html" not in html
    # With the live socket on the filters just applied, out of band: the page's socket, on the filters the
    # page was loaded with, is replaced (closed) as the list is, so its renders cannot undo the filter.
    reader = personas["reviewer"].user.pk
    assert (
        f'<div id="inbox-socket" hx-ext="ws" ws-connect="/ws/inbox/?q=x&amp;reader={reader}" hx-swap-oob="true" hidden>'
        in html
    )


def test_the_gate_menu_keeps_the_gate_the_list_is_filtered_by_while_its_menu_is_cached(personas):
    """The gate menu is cached for a minute (and capped): a gate newer than the cache was missing from it, so
    the form's next submit (Enter in a column filter) dropped the gate, and with it the gate's columns."""
    client = console_client(personas["reviewer"])
    client.get("/")  # the menus are cached now
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    task_make(node=gate)
    html = client.get("/", {"node": gate}).content.decode()
    assert f'<option value="{gate}" selected>{gate}</option>' in html


def test_a_loan_reviewer_never_sees_other_graphs_in_search(personas):
    marker = uuid.uuid4().hex[:8]
    task_make(graph="kyc_onboarding", metadata={"case": marker})
    html = console_client(personas["loan_reviewer"]).get("/", {"q": marker}).content.decode()
    assert "data-task-id" not in html


@pytest.mark.parametrize("sort", ["newest", "oldest", "due"])
def test_keyset_pages_cover_every_task_once_in_order(personas, sort):
    marker = uuid.uuid4().hex[:8]
    base = timezone.now() - timedelta(hours=1)
    made = [
        task_make(
            metadata={"case": marker},
            created_at=base + timedelta(seconds=i // 2),  # ties on created_at
            due_at=(base + timedelta(hours=i % 3)) if i % 4 else None,
        )
        for i in range(9)
    ]
    seen, cursor = [], ""
    for _ in range(10):
        page = inbox_list(
            user=personas["reviewer"].user, filter=InboxFilter(q=marker), sort=sort, cursor=cursor, limit=4
        )
        seen.extend(page.items)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert sorted(t.pk for t in seen) == sorted(t.pk for t in made)
    assert len(seen) == len(made)
    if sort == "newest":
        assert [t.created_at for t in seen] == sorted((t.created_at for t in seen), reverse=True)
    if sort == "due":
        dues = [t.due_at for t in seen if t.due_at]
        assert dues == sorted(dues) and all(t.due_at is None for t in seen[len(dues) :])


def test_a_broken_cursor_is_a_clear_error_not_a_crash(personas):
    html = console_client(personas["reviewer"]).get("/", {"cursor": "garbage"}).content.decode()
    assert "this page link is broken" in html


def test_the_next_page_link_keeps_the_filters(personas):
    marker = uuid.uuid4().hex[:8]
    for _ in range(51):
        task_make(metadata={"case": marker})
    html = console_client(personas["reviewer"]).get("/", {"q": marker, "graph": "loan_approval"}).content.decode()
    assert 'rel="next"' in html
    link = html.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0].replace("&amp;", "&")
    assert f"q={marker}" in link and "graph=loan_approval" in link and "cursor=" in link
    page2 = console_client(personas["reviewer"]).get("/" + link).content.decode()
    assert page2.count("data-task-id=") == 1


# --- audit, threads, start -------------------------------------------------------------------------


def test_an_audit_window_the_wrong_way_round_says_why_and_offers_no_export(personas):
    """/audit/?since=…&until=… with since after until showed an empty trail without a word."""
    client = console_client(personas["auditor"])
    html = unescape(client.get("/audit/", {"since": "2026-12-10T00:00", "until": "2026-12-01T00:00"}).content.decode())
    assert "since: must be before until" in html
    # The export reads the same filter: refused before streaming, naming since.
    export = personas["auditor"].client.get("/api/audit/export", since="2026-12-10T00:00", until="2026-12-01T00:00")
    assert export.status_code == 422 and export.json()["error"]["field"] == "since"


def test_the_audit_page_filters_by_action_and_links_to_subjects(personas, loan_task):
    console_client(personas["reviewer"]).post(f"/tasks/{loan_task.pk}/claim")
    client = console_client(personas["auditor"])
    html = client.get("/audit/", {"action": "task.claimed", "thread": str(loan_task.thread_id)}).content.decode()
    assert "task.claimed" in html and f'href="/tasks/{loan_task.pk}/"' in html
    assert personas["reviewer"].username in html
    none = client.get("/audit/", {"actor": "nobody-" + uuid.uuid4().hex}).content.decode()
    assert "No events match" in none
    bad = client.get("/audit/", {"thread": "not-a-uuid"})
    assert "Enter a valid UUID" in bad.content.decode()


def test_the_audit_export_links_follow_a_filter_applied_in_place(personas):
    """Filter swaps the results in place: the export links outside them kept exporting the whole trail."""
    client = console_client(personas["auditor"])
    htmx = {"HX-Request": "true", "HX-Target": "audit-results"}
    partial = client.get("/audit/", {"action": "decision.made", "actor": "reviewer"}, headers=htmx).content.decode()
    assert partial.lstrip().startswith('<section id="audit-results">')
    links = [a for a in partial.split('href="')[1:] if a.startswith("/api/audit/export")]
    assert len(links) == 2
    assert all("action=decision.made" in a and "actor=reviewer" in a for a in links)


@pytest.mark.parametrize("htmx", [{}, {"HX-Request": "true", "HX-Target": "audit-results"}])
def test_an_invalid_audit_filter_offers_no_export(personas, htmx):
    """The links led to the export's raw 422 JSON; the page already says what is wrong with the filter."""
    client = console_client(personas["auditor"])
    html = client.get("/audit/", {"thread": "notauuid", "since": "garbage"}, headers=htmx).content.decode()
    assert "Enter a valid UUID" in html
    assert "/api/audit/export" not in html and "export-links" not in html
    valid = client.get("/audit/", {"action": "decision.made"}, headers=htmx).content.decode()
    assert valid.count('href="/api/audit/export') == 2


def test_the_start_form_is_generated_from_the_input_schema_and_validates(personas):
    client = console_client(personas["operator"])
    page = client.get("/threads/new", {"graph": "loan_approval"}).content.decode()
    assert 'name="input.amount"' in page and 'name="input.applicant"' in page
    # The graph's own working state (its risk score, route, review) is not asked of whoever starts it.
    for internal in ("risk_score", "route", "review", "disbursement", "status"):
        assert f'name="input.{internal}"' not in page
    response = client.post("/threads/new", {"graph": "loan_approval", "input.amount": "many"})
    assert response.status_code == 422
    assert "must be a whole number" in response.content.decode()
    htmx = {"HX-Request": "true", "HX-Target": "start-fields"}
    partial = client.get("/threads/new", {"graph": "kyc_onboarding"}, headers=htmx)
    assert partial.content.decode().lstrip().startswith('<fieldset id="start-fields"')


@pytest.mark.parametrize("graph", ["loan_aproval", "", "x" * 500])
def test_a_start_on_a_graph_not_offered_starts_nothing(personas, graph):
    # It used to start a thread on the first graph of the menu (a kyc_onboarding run for a typo).
    client = console_client(personas["operator"])
    before = Thread.objects.count()
    response = client.post("/threads/new", {"graph": graph, "input.amount": "5"})
    assert response.status_code == 422
    assert "unknown graph" in response.content.decode()
    assert Thread.objects.count() == before


@pytest.mark.parametrize("typed", ["[1,2]", "{bad"])
def test_bad_start_metadata_json_shows_its_message_open_and_keeps_the_text(personas, typed):
    client = console_client(personas["operator"])
    response = client.post("/threads/new", {"graph": "loan_approval", "metadata_json": typed})
    assert response.status_code == 422
    html = response.content.decode()
    assert "<details open><summary>More metadata as JSON" in html  # the message is not hidden in a closed box
    assert 'id="s-meta-json-error"' in html
    textarea = html.split('id="s-meta-json"', 1)[1].split("</textarea>", 1)[0]
    assert textarea.endswith(">" + typed.replace('"', "&quot;"))


@pytest.mark.parametrize(
    "metadata",
    [
        {"meta.case": "C" * 20_000},  # one of the graph's named metadata inputs
        {"metadata_json": json.dumps({"note": "N" * 20_000})},
        {"meta.case": "C" * 9_000, "metadata_json": json.dumps({"note": "N" * 9_000})},  # together over the limit
    ],
    ids=["named", "json", "together"],
)
def test_start_metadata_over_the_apis_limit_is_refused_naming_metadata_and_starts_nothing(personas, metadata):
    """POST /api/threads refused metadata over 16 KiB (ThreadMetadata); the console's form skipped the rule."""
    client = console_client(personas["operator"])
    before = Thread.objects.count()
    body = {"graph": "loan_approval", "input_json": json.dumps(loan_input()), **metadata}
    response = client.post("/threads/new", body)
    assert response.status_code == 422
    error = unescape(response.content.decode().split('id="s-meta-error"', 1)[1].split("</p>", 1)[0])
    assert error.split(">", 1)[1].startswith("metadata: is ") and f"metadata is at most {MAX_METADATA_BYTES}" in error
    assert Thread.objects.count() == before


def test_the_domain_start_path_bounds_metadata_for_every_caller(personas):
    with pytest.raises(InvalidInput) as refused:
        services.thread_start(
            actor=personas["operator"].user, graph="loan_approval", input=loan_input(), metadata={"n": "N" * 20_000}
        )
    assert refused.value.field == "metadata" and f"at most {MAX_METADATA_BYTES}" in refused.value.message


def test_a_reviewer_cannot_start_threads(personas):
    assert console_client(personas["reviewer"]).post("/threads/new", {"graph": "loan_approval"}).status_code == 403


@pytest.mark.parametrize(
    "graph,node,hint",
    [
        ("loan_approval", "human_review", "required to edit or reject"),  # the demo graphs' strict policy
        ("gate_policy_review", "legal", "required to approve"),  # a gate's own rule
        ("hitl_agent", "model", None),  # no policy: a reason is never required
    ],
)
def test_the_reason_field_says_what_this_gates_policy_requires(personas, graph, node, hint):
    task = task_make(graph=graph, node=node)
    page = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    assert "recorded in the audit trail" in page
    if hint:
        assert hint in page
    else:
        assert "required to" not in page


# --- the task page's header, decision panel and timeline --------------------------------------------


def test_a_closed_tasks_header_gives_its_due_date_once(personas):
    due = timezone.now() + timedelta(days=2)
    task = task_decided(by=personas["reviewer"].user, due_at=due)
    html = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    head = html.split('id="task-head"', 1)[1].split("</p>", 1)[0]
    assert head.count(due.strftime("%Y-%m-%d %H:%M")) == 1
    open_task = task_make(due_at=due)
    head = console_client(personas["reviewer"]).get(f"/tasks/{open_task.pk}/").content.decode()
    head = head.split('id="task-head"', 1)[1].split("</p>", 1)[0]
    assert f"Due {due:%Y-%m-%d %H:%M} UTC" in head and "data-due-badge" in head  # date, and the countdown


def test_a_task_page_gives_one_due_time_the_one_in_force(personas):
    """The payload's facts said "Due within 1 h" (the gate's SLA) while the header said "overdue 14 min"
    (the langgraph.json deadline, which wins): the page contradicted itself."""
    task = task_make(due_at=timezone.now() - timedelta(minutes=14))  # the loan gate's payload: sla 1 h
    html = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    assert "overdue" in html and "Due within" not in html


def test_deciding_a_task_someone_else_decided_says_so_once(personas, loan_task):
    client = console_client(personas["reviewer2"])
    page = client.get(f"/tasks/{loan_task.pk}/")  # the form is open while another reviewer decides
    assert page.status_code == 200
    console_decide(console_client(personas["reviewer"]), loan_task, decision="approve")
    html = console_decide(client, loan_task, decision="approve").content.decode()
    assert html.lower().count("no longer be decided") == 1, html
    assert 'id="closed-note"' in html and 'role="alert"' in html
    # The loser learns who won the race and how, not only that the task is closed.
    note = html.split('id="closed-note"', 1)[1].split("</p>", 1)[0]
    winner = personas["reviewer"].user.get_username()
    assert "Your decision was not recorded" in note and f"approved by {winner}" in note
    assert "UTC</time>" in note


def test_relative_times_on_the_task_page_keep_counting_and_the_timeline_gives_date_and_zone(personas, loan_task):
    html = console_client(personas["reviewer"]).get(f"/tasks/{loan_task.pk}/").content.decode()
    opened = html.split("Opened <time", 1)[1].split(">", 1)[0]
    assert "data-ago" in opened and f"{loan_task.created_at:%Y-%m-%d %H:%M:%S} UTC" in opened
    timeline = html.split('id="task-timeline"', 1)[1]
    assert f"{loan_task.created_at:%Y-%m-%d} " in timeline and " UTC</time>" in timeline


def test_the_start_form_and_thread_list_use_the_graphs_own_naming_metadata(personas, monkeypatch):
    """A graph whose threads are found by order and customer was offered the demo's Case and Applicant,
    and its threads showed an empty Case column."""
    from runtime.registry import graph_get

    monkeypatch.setitem(graph_get("flaky").options, "search_metadata", ("order", "customer"))
    client = console_client(personas["operator"])
    page = client.get("/threads/new", {"graph": "flaky"}).content.decode()
    assert 'name="meta.order"' in page and 'name="meta.customer"' in page
    assert 'name="meta.case"' not in page
    order = f"O-{uuid.uuid4().hex[:6]}"
    started = client.post(
        "/threads/new", {"graph": "flaky", "input.subject": "x", "meta.order": order, "meta.customer": "ACME"}
    )
    assert started.status_code == 302, started.content.decode()[-2000:]
    thread = Thread.objects.get(metadata__order=order)
    assert thread.metadata == {"order": order, "customer": "ACME"}
    listed = client.get("/threads/", {"q": order}).content.decode()
    row = listed.split(f'data-thread-id="{thread.pk}"', 1)[1].split("</tr>", 1)[0]
    assert order in row and "ACME" in row


def test_a_hand_typed_inbox_sort_that_is_not_valid_is_named_and_ignored(personas):
    """`/?sort=bogus` said "sort: Select a valid choice…" and "No tasks match" under a menu reading "Newest first"."""
    case = f"S-{uuid.uuid4().hex[:6]}"
    task = task_make(metadata={"case": case})
    html = unescape(console_client(personas["reviewer"]).get("/", {"q": case, "sort": "bogus"}).content.decode())
    assert "sort: 'bogus' is not a valid choice; ignored" in html
    assert f'data-task-id="{task.pk}"' in html and "No tasks match" not in html  # listed as the menu says: newest
    menu = html.split('id="f-sort"')[1].split("</select>")[0]
    assert menu.split("<option ")[1].startswith('value="newest"') and "selected" not in menu  # shows its first
    # No link carries it on; the live socket does, so that its renders name it too (test_inbox_notes_live).
    assert not [href for href in re.findall(r'href="([^"]*)"', html) if "sort=bogus" in href]
    assert re.search(r'ws-connect="[^"]*sort=bogus', html)


@pytest.fixture
def column_gate() -> str:
    """A gate of loan_approval whose tasks declare one inbox column, amount."""
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    columns = [{"key": "amount", "path": "/amount", "type": "number"}]
    task_make(node=gate, payload={"title": "t", "amount": 5, "columns": columns})
    return gate


@pytest.mark.parametrize(
    "query,said",
    [
        # A gate chosen: "this gate has no column 'amount' (choose a gate first)" was untrue.
        ({"node": "human_review", "c.amount": ">=5"}, "c.amount: the gate 'human_review' has no column 'amount'"),
        (
            {"node": "{gate}", "c.amout": "5"},
            "c.amout: the gate '{gate}' has no column 'amout' to filter by (its columns: amount)",
        ),
        (
            {"node": "{gate}", "sort": "col:amout"},
            "sort: the gate '{gate}' has no column 'amout' to sort by (its columns: amount)",
        ),
        # ?c.amount>=5 is the parameter "c.amount>" set to "5": say how a column filter is written.
        ({"node": "{gate}", "c.amount>": "5"}, "a column filter is c.<key>=<filter>, e.g. c.amount=>=1000"),
        ({"c.amount": "5"}, "c.amount: columns belong to a gate: choose a gate to filter by 'amount'"),
        # The API's thread filter, which the page does not take, was dropped without a word.
        (
            {"thread": "notauuid"},
            "thread: the inbox does not filter by thread; a thread's tasks are listed on its page ('notauuid' ignored)",
        ),
    ],
    ids=["no such column", "a typo", "sort typo", "filter syntax", "no gate", "thread"],
)
def test_inbox_filter_notes_say_what_is_true_naming_the_parameter(personas, column_gate, query, said):
    query = {k: v.replace("{gate}", column_gate) for k, v in query.items()}
    html = unescape(console_client(personas["reviewer"]).get("/", query).content.decode())
    assert said.replace("{gate}", column_gate) in html
    assert "choose a gate first" not in html


def test_a_hand_typed_thread_status_that_is_not_valid_is_named_not_silently_ignored(personas):
    html = unescape(console_client(personas["operator"]).get("/threads/", {"status": "bogus"}).content.decode())
    assert "status: 'bogus' is not a valid choice; ignored" in html
    assert (
        re.search(r'<option value="">Any</option>', html)
        and " selected>" not in html.split('id="t-status"')[1].split("</select>")[0]
    )


@pytest.mark.parametrize("param", ["cursor", "before"])
def test_a_broken_thread_list_page_link_says_so_beside_the_list_with_a_way_back(personas, param):
    """cursor=bad was a bare 422 page ("Cannot do that: cursor is not one this API returned") with no list
    and no link; before=bad (the list pages forward only) was ignored without a word. As the inbox says it."""
    case = f"broken-{uuid.uuid4().hex[:6]}"
    task_make(metadata={"case": case})
    response = console_client(personas["operator"]).get("/threads/", {"q": case, param: "bad"})
    assert response.status_code == 200
    html = unescape(response.content.decode())
    error = html.split('id="threads-error"', 1)[1].split("</p>", 1)[0]
    assert f"{param}: this page link is broken; start again from the first page" in error
    first = html.split("« Newest threads", 1)[0].rsplit('href="', 1)[1].split('"', 1)[0]
    assert first == f"?q={case}"  # the same filter, from its first page
    assert 'id="t-status"' in html  # the list page, its filters and all, not an error page
    assert "data-thread-id=" in console_client(personas["operator"]).get("/threads/" + first).content.decode()


def _graph_menu(html: str) -> list[str]:
    menu = html.split('id="t-graph"', 1)[1].split("</select>", 1)[0]
    return re.findall(r'<option value="([^"]*)"', menu)


def test_the_threads_graph_filter_offers_the_external_sources_its_threads_have(personas):
    """/threads/ listed external:payments threads, but its Graph filter had no option for them."""
    engine = engine_persona(f"pay-{uuid.uuid4().hex[:8]}")
    source = engine.username.removeprefix("engine-")
    assert create(engine.client, task_body(source)).status_code == 201
    graph = f"external:{source}"
    for who in ("operator", "auditor"):  # every graph: by an assignment to "*", and by role
        page = console_client(personas[who]).get("/threads/").content.decode()
        assert graph in _graph_menu(page), who
        assert "loan_approval" in _graph_menu(page), who
    own = console_client(engine).get("/threads/").content.decode()
    assert _graph_menu(own) == ["", graph]  # assigned to the source alone: its graph, and "All graphs"
    narrow = console_client(personas["loan_reviewer"]).get("/threads/").content.decode()
    assert graph not in _graph_menu(narrow)  # a graph nobody assigned them is not named to them
    filtered = console_client(personas["operator"]).get("/threads/", {"graph": graph}).content.decode()
    assert f'<option value="{graph}" selected>' in filtered


def test_a_completed_thread_s_row_says_when_it_was_last_updated(personas):
    case = f"L-{uuid.uuid4().hex[:6]}"
    task = task_decided(by=personas["approver"].user, metadata={"case": case, "applicant": "Ada Lovelace"})
    Thread.objects.filter(pk=task.thread_id).update(
        status="completed", updated_at=timezone.now() - timedelta(minutes=3)
    )
    page = console_client(personas["operator"]).get("/threads/", {"q": case}).content.decode()
    row = page.split(f'data-thread-id="{task.thread_id}"', 1)[1].split("</tr>", 1)[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert "Completed" in cells[3] and cells[-1].strip() == "3 min ago"


def test_the_audit_pages_export_links_say_whether_they_carry_chain_hashes(personas):
    """A reader who sees values masked gets no chain hashes (they cover the masked values): the links said
    "with chain hashes" to them too."""
    from django.contrib.auth.models import Permission, User
    from django.db import transaction
    from django.test import Client

    from approvals.audit import audit_record

    reader = User.objects.create_user(f"audit-masked-{uuid.uuid4().hex[:6]}")
    reader.user_permissions.add(*Permission.objects.filter(codename__in=["view_audit", "view_all_graphs"]))
    with transaction.atomic():  # a row to show, whatever else this database holds
        audit_record(actor=None, actor_label="test", action="test.hashes", subject_type="test", subject_id="1")
    client = Client()
    client.force_login(reader)
    masked = client.get("/audit/").content.decode()
    assert "without chain hashes: they cover values masked for you" in masked and "hash withheld" in masked
    seeing = console_client(personas["auditor"]).get("/audit/").content.decode()
    assert "with chain hashes" in seeing and "without chain hashes" not in seeing
