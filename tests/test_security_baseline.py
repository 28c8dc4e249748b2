"""Security baseline: CSP on pages, login throttling with audited lockouts, audited sign-in/out."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_pages_carry_a_strict_content_security_policy():
    response = Client().get("/accounts/login/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy
    assert "frame-ancestors 'none'" in policy


def test_sign_in_and_out_are_audited_and_the_session_is_invalidated():
    User.objects.create_user("signer", password="a-long-password-1")
    client = Client()
    response = client.post("/accounts/login/", {"username": "signer", "password": "a-long-password-1"})
    assert response.status_code == 302
    session_key = client.session.session_key
    client.post("/accounts/logout/")
    actions = list(AuditEvent.objects.filter(subject_type="user").order_by("id").values_list("action", flat=True))
    assert actions[-2:] == ["auth.login", "auth.logout"]
    from django.contrib.sessions.models import Session

    assert not Session.objects.filter(session_key=session_key).exists()


def test_the_sign_out_is_announced_only_once_the_session_is_gone():
    # Open pages re-check their session when they hear of a sign-out (console/consumers.py): heard
    # while the session still existed, a page was pushed once more and stayed open.
    from django.contrib.sessions.models import Session

    from approvals import events
    from approvals.models import AuditAction

    User.objects.create_user("leaver", password="a-long-password-1")
    client = Client()
    client.post("/accounts/login/", {"username": "leaver", "password": "a-long-password-1"})
    session_key = client.session.session_key
    alive_when_announced: list[bool] = []

    def heard(event: AuditEvent) -> None:
        if event.action == AuditAction.AUTH_LOGOUT:
            alive_when_announced.append(Session.objects.filter(session_key=session_key).exists())

    events.events_subscribe(heard, in_transaction=True)  # as it is recorded: before anything can publish it
    try:
        client.post("/accounts/logout/")
    finally:
        events._in_transaction.remove(heard)
    assert alive_when_announced == [False]


def test_the_sign_out_still_closes_the_sign_in_s_access_log_entry():
    from axes.models import AccessLog

    User.objects.create_user("logged", password="a-long-password-1")
    client = Client()
    client.post("/accounts/login/", {"username": "logged", "password": "a-long-password-1"})
    assert AccessLog.objects.filter(username="logged", logout_time__isnull=True).count() == 1
    client.post("/accounts/logout/")
    assert not AccessLog.objects.filter(username="logged", logout_time__isnull=True).exists()


def test_repeated_failed_sign_ins_lock_the_account_out_and_are_audited(settings):
    User.objects.create_user("target", password="the-right-password-1")
    client = Client(REMOTE_ADDR="10.9.8.7")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/accounts/login/", {"username": "target", "password": "guess"})
    locked = client.post("/accounts/login/", {"username": "target", "password": "the-right-password-1"})
    assert locked.status_code in (403, 429)
    assert "_auth_user_id" not in client.session
    audit = AuditEvent.objects.filter(subject_id="target")
    assert audit.filter(action="auth.login_failed").count() >= settings.AXES_FAILURE_LIMIT
    assert audit.filter(action="auth.locked_out").exists()


def test_role_grant_and_assignment_changes_are_audited():
    from django.contrib.auth.models import Group

    from approvals.models import GraphAssignment

    user = User.objects.create_user("promoted")
    group, _ = Group.objects.get_or_create(name="reviewer")
    user.groups.add(group)
    assignment = GraphAssignment.objects.create(user=user, graph="loan_approval")
    assignment.delete()
    user.groups.remove(group)
    events = list(
        AuditEvent.objects.filter(action__startswith="permission.", subject_type="user", subject_id=str(user.pk))
        .order_by("id")
        .values_list("action", "details")
    )
    assert [(a, d.get("change")) for a, d in events] == [
        ("permission.roles_changed", "add"),
        ("permission.assignment_changed", "added"),
        ("permission.assignment_changed", "removed"),
        ("permission.roles_changed", "remove"),
    ]
    assert events[0][1]["groups"] == ["reviewer"]


def test_the_api_docs_load_swagger_from_this_server_not_a_cdn():
    page = Client().get("/api/docs").content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in page
    # Nothing loaded from another host ("cdn" alone could turn up inside a random CSRF token).
    assert not re.search(r"""(src|href)\s*[=:]\s*["'](https?:)?//""", page), page
    assert Client().get("/static/ninja/swagger-ui-bundle.js").status_code == 200
