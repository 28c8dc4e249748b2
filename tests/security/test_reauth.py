"""Threat: signing a decision without proving, in this session, who you are.

The electronic-signature rule: a session whose proof (sign-in or re-authentication) is
older than GATEHOUSE_REAUTH_SECONDS must re-enter its password (or a one-time code) to
sign. The window belongs to the session, not to the user, and only a token that
authenticated the request counts as a fresh proof.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals.models import Decision, GraphAssignment
from approvals.roles import roles_ensure
from approvals.security import SESSION_AUTH_AT
from approvals.tokens import token_issue
from tests.conftest import ApiClient, api_decide, loan_input, pending_tasks, thread_start
from tests.console.conftest import console_decide

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

PASSWORD = "correct horse battery staple"
LONG_AGO = timedelta(hours=2)


@pytest.fixture
def signer() -> User:
    """A reviewer of its own, so moving its sign-in times cannot disturb other tests."""
    user = User.objects.create_user(f"signer-{uuid.uuid4().hex[:8]}", password=PASSWORD)
    user.groups.add(roles_ensure()["reviewer"])
    GraphAssignment.objects.create(user=user, graph="loan_approval")
    return user


def _loan_task(personas: dict[str, Any]) -> dict[str, Any]:
    thread = thread_start(personas["operator"], "loan_approval", loan_input())
    [task] = pending_tasks(personas["admin"], thread["id"])
    return task


def _browser(user: User) -> Client:
    """A browser that signed in for real (the login form), then went quiet for two hours."""
    browser = Client()
    response = browser.post("/accounts/login/", {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302, response.content
    session = browser.session
    session[SESSION_AUTH_AT] = (timezone.now() - LONG_AGO).isoformat()
    session.save()
    return browser


def _console_sign(browser: Client, task: dict[str, Any], **extra: str) -> Any:
    return console_decide(browser, task, decision="approve", reason="looks fine", **extra)


def _signed(task: dict[str, Any]) -> bool:
    return Decision.objects.filter(task_id=task["id"]).exists()


def test_a_junk_bearer_header_does_not_make_an_old_session_fresh(personas, signer):
    task = _loan_task(personas)
    browser = _browser(signer)

    response = browser.post(
        f"/api/tasks/{task['id']}/decision",
        {"decision": "approve"},
        content_type="application/json",
        headers={"Authorization": "Bearer x"},
    )

    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["field"] == "password" and "re-enter your password" in error["message"]
    assert not _signed(task)


def test_a_sign_in_from_a_second_browser_does_not_refresh_an_old_session(personas, signer):
    task = _loan_task(personas)
    old_browser = _browser(signer)
    User.objects.filter(pk=signer.pk).update(last_login=timezone.now() - LONG_AGO)
    # The same person (or someone with their password) signs in elsewhere, just now.
    elsewhere = Client().post("/accounts/login/", {"username": signer.username, "password": PASSWORD})
    assert elsewhere.status_code == 302

    response = _console_sign(old_browser, task)

    assert response.status_code == 403, response.content
    assert "re-enter your password" in response.content.decode()
    assert not _signed(task)


def test_a_re_authentication_refreshes_only_the_session_that_made_it(personas, signer):
    first, second, third = (_loan_task(personas) for _ in range(3))
    session_a, session_b = _browser(signer), _browser(signer)
    User.objects.filter(pk=signer.pk).update(last_login=timezone.now() - LONG_AGO)

    assert _console_sign(session_a, first, password=PASSWORD).status_code == 201
    assert Decision.objects.get(task_id=first["id"]).reauthenticated_at is not None
    # Session A has just proved itself: it signs again within the window without the password...
    again = _console_sign(session_a, second)
    assert again.status_code == 201, again.content
    assert Decision.objects.get(task_id=second["id"]).reauthenticated_at is None
    # ...while session B, untouched, still must.
    refused = _console_sign(session_b, third)
    assert refused.status_code == 403, refused.content
    assert not _signed(third)


def test_a_session_re_authenticated_through_the_api_stays_fresh_there_only(personas, signer):
    first, second, third = (_loan_task(personas) for _ in range(3))
    session_a, session_b = _browser(signer), _browser(signer)

    def sign(browser: Client, task: dict[str, Any], **extra: str) -> Any:
        body = {"decision": "approve", **extra}
        return browser.post(f"/api/tasks/{task['id']}/decision", body, content_type="application/json")

    assert sign(session_a, first, password=PASSWORD).status_code == 201
    assert sign(session_a, second).status_code == 201
    assert sign(session_b, third).status_code == 403
    assert not _signed(third)


def test_a_real_api_token_still_signs_without_a_password(personas, signer):
    task = _loan_task(personas)
    User.objects.filter(pk=signer.pk).update(last_login=timezone.now() - LONG_AGO)

    response = api_decide(ApiClient(token_issue(user=signer)), task)

    assert response.status_code == 201, response.content
    assert Decision.objects.get(task_id=task["id"]).reauthenticated_at is None
