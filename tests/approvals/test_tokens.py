"""API tokens: shown once, stored only as a digest; expired, revoked and inactive tokens let nobody in."""

from __future__ import annotations

import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command, get_commands, load_command_class
from django.db import connection
from django.utils import timezone

from approvals.models import ApiToken, AuditEvent
from approvals.tokens import TOKEN_ACTION_NAMES, TOKEN_PREFIX, token_authenticate, token_issue

pytestmark = pytest.mark.django_db


@pytest.fixture
def user():
    return get_user_model().objects.create_user(f"tok-{uuid.uuid4().hex[:8]}", password="x")


def test_it_returns_a_secret_it_stores_only_as_a_digest(user):
    secret = token_issue(user=user, name="ci")
    token = ApiToken.objects.get(user=user)
    assert secret.startswith(TOKEN_PREFIX) and len(secret) > 40
    assert token.digest != secret
    assert len(token.digest) == 64
    assert token.prefix == secret[:10]


def test_no_stored_row_contains_the_secret(user):
    secret = token_issue(user=user, name="ci")
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(t)::text FROM approvals_apitoken t WHERE user_id = %s", [user.pk])
        token_rows = [r[0] for r in cursor.fetchall()]
        cursor.execute("SELECT row_to_json(a)::text FROM approvals_auditevent a WHERE subject_type = 'token'")
        audit_rows = [r[0] for r in cursor.fetchall()]
    assert token_rows
    assert not [row for row in token_rows + audit_rows if secret in row or secret[10:] in row]


def test_issuing_a_token_is_audited_without_the_secret(user):
    token_issue(user=user, name="ci")
    token = ApiToken.objects.get(user=user)
    event = AuditEvent.objects.get(action="token.issued", subject_id=str(token.pk))
    assert event.details["user"] == user.username
    assert event.details["prefix"] == token.prefix
    assert event.actor_label == "cli"


def test_every_secret_is_new(user):
    assert token_issue(user=user) != token_issue(user=user)


def test_a_valid_token_authenticates_its_user(user):
    assert token_authenticate(token_issue(user=user)) == user


def test_authentication_records_the_last_use(user):
    secret = token_issue(user=user)
    token_authenticate(secret)
    assert ApiToken.objects.get(user=user).last_used_at is not None


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(
            lambda token, user: token.__class__.objects.filter(pk=token.pk).update(
                expires_at=timezone.now() - timedelta(seconds=1)
            ),
            id="expired",
        ),
        pytest.param(
            lambda token, user: token.__class__.objects.filter(pk=token.pk).update(revoked_at=timezone.now()),
            id="revoked",
        ),
        pytest.param(
            lambda token, user: user.__class__.objects.filter(pk=user.pk).update(is_active=False), id="inactive-user"
        ),
    ],
)
def test_it_lets_nobody_in_with_a_spoiled_token(user, spoil):
    secret = token_issue(user=user)
    assert token_authenticate(secret) == user
    spoil(ApiToken.objects.get(user=user), user)
    assert token_authenticate(secret) is None


def test_a_token_expiring_in_the_future_still_works(user):
    secret = token_issue(user=user, expires_at=timezone.now() + timedelta(hours=1))
    assert token_authenticate(secret) == user


@pytest.mark.parametrize("secret", ["", "gh_", "gh_not-a-real-token", "not-even-prefixed"])
def test_an_unknown_secret_authenticates_nobody(secret):
    assert token_authenticate(secret) is None


def test_a_digest_is_not_a_secret(user):
    token_issue(user=user)
    digest = ApiToken.objects.get(user=user).digest
    assert token_authenticate(digest) is None
    assert token_authenticate(TOKEN_PREFIX + digest) is None


# --- manage.py issue_token ---------------------------------------------------------------------


def test_issue_token_prints_exactly_one_line_a_working_token(user):
    out = StringIO()
    call_command("issue_token", user.username, stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert out.getvalue() == lines[0] + "\n"
    assert token_authenticate(lines[0]) == user


def test_issue_token_names_the_token_and_sets_its_expiry(user):
    out = StringIO()
    call_command("issue_token", user.username, "--name", "ci-bot", "--days", "7", stdout=out)
    token = ApiToken.objects.get(user=user)
    assert token.name == "ci-bot"
    assert timedelta(days=6, hours=23) < token.expires_at - timezone.now() <= timedelta(days=7)


def test_issue_token_refuses_an_unknown_username():
    out = StringIO()
    with pytest.raises(CommandError, match="no user named 'nobody-here'"):
        call_command("issue_token", "nobody-here", stdout=out)
    assert out.getvalue() == ""


@pytest.mark.parametrize("days", ["0", "-3"])
def test_issue_token_refuses_a_non_positive_expiry(user, days):
    with pytest.raises(CommandError, match="--days"):
        call_command("issue_token", user.username, "--days", days, stdout=StringIO())
    assert not ApiToken.objects.filter(user=user).exists()


def test_issue_token_help_lists_every_action_a_token_can_be_limited_to():
    command = load_command_class(get_commands()["issue_token"], "issue_token")
    help_text = command.create_parser("manage.py", "issue_token").format_help()
    assert "store" in TOKEN_ACTION_NAMES  # the memory store's writes (docs/memory-store.md)
    listed = " ".join(help_text.split())  # argparse wraps the line
    assert ",".join(sorted(TOKEN_ACTION_NAMES)) in listed.replace(", ", ",")
