"""The user_* management commands: same services, audited as the command line, refusals as errors."""

from __future__ import annotations

import io
import json
import sys
import uuid

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command, load_command_class

from approvals import users
from approvals.models import AuditEvent
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db


def _name() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def _run(*args: str, stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", ["user_create", "user_grant", "user_revoke", "user_deactivate", "user_list"])
def test_every_command_has_help(command):
    text = load_command_class("approvals", command).create_parser("manage.py", command).format_help()
    assert text.startswith(f"usage: manage.py {command}")
    assert len(text.split("\n\n")[1]) > 40  # a description, not just the usage line


def test_user_create_prints_a_generated_password_that_signs_in(client):
    name = _name()
    out, err = _run(
        "user_create",
        name,
        "--email",
        f"{name}@example.org",
        "--role",
        "reviewer",
        "--graph",
        "loan_approval",
        "--gate",
        "kyc_onboarding:compliance_review",
    )
    password = out.strip()
    assert len(password) >= 20 and "\n" not in password
    assert "roles: reviewer" in err
    user = User.objects.get(username=name)
    assert [str(a) for a in users.user_assignments(user)] == ["kyc_onboarding:compliance_review", "loan_approval"]
    assert client.post("/accounts/login/", {"username": name, "password": password}).status_code == 302
    event = AuditEvent.objects.get(action="user.created", subject_id=str(user.pk))
    assert event.actor_id is None and event.actor_label == "cli"


def test_user_create_reads_the_password_from_stdin(monkeypatch, client):
    name = _name()
    out, _ = _run(
        "user_create",
        name,
        "--role",
        "admin",
        "--password-stdin",
        stdin="a-long-passphrase-42\n",
        monkeypatch=monkeypatch,
    )
    assert out == ""
    assert client.post("/accounts/login/", {"username": name, "password": "a-long-passphrase-42"}).status_code == 302


@pytest.mark.parametrize(
    "args,message",
    [
        (["--role", "wizard"], "roles: unknown role 'wizard'"),
        (["--graph", "nope"], "--graph 'nope': unknown graph 'nope'"),
        (["--gate", "loan_approval"], "give GRAPH:NODE"),
        (["--gate", "loan_approval:nope"], "--gate 'loan_approval:nope': 'nope' is not a gate of 'loan_approval'"),
        (["--email", "x"], "email:"),
    ],
)
def test_user_create_refuses_bad_input_and_creates_nothing(args, message):
    name = _name()
    with pytest.raises(CommandError, match=message):
        _run("user_create", name, *args)
    assert not User.objects.filter(username=name).exists()


def test_grant_revoke_deactivate_and_list():
    name = _name()
    _run("user_create", name, "--role", "reviewer")
    out, _ = _run(
        "user_grant", name, "--role", "approver", "--graph", "loan_approval", "--gate", "kyc_onboarding:identity_check"
    )
    assert "roles: approver, reviewer; graphs: kyc_onboarding:identity_check, loan_approval" in out
    out, _ = _run("user_revoke", name, "--role", "reviewer", "--graph", "loan_approval")
    assert "roles: approver; graphs: kyc_onboarding:identity_check" in out
    out, _ = _run("user_revoke", name, "--gate", "kyc_onboarding:identity_check")
    assert "graphs: no graph" in out
    out, _ = _run("user_deactivate", name, "--reason", "left")
    assert f"{name}: deactivated" in out
    rows = [json.loads(line) for line in _run("user_list", "--json", "--inactive")[0].splitlines()]
    assert any(r["username"] == name and r["active"] is False for r in rows)
    table = _run("user_list")[0]
    assert table.splitlines()[0].split() == ["USERNAME", "STATE", "ROLES", "GRAPHS", "LAST", "SIGN-IN"]
    assert _run("user_deactivate", name, "--reactivate")[0].startswith(f"{name}: active")
    user = User.objects.get(username=name)
    labels = set(
        AuditEvent.objects.filter(subject_type="user", subject_id=str(user.pk), action__startswith="user.").values_list(
            "actor_label", flat=True
        )
    )
    assert labels == {"cli"}


def test_a_command_for_an_unknown_user_fails():
    with pytest.raises(CommandError, match="no user named"):
        _run("user_grant", "nobody-" + uuid.uuid4().hex, "--role", "reviewer")
    with pytest.raises(CommandError, match="at least one"):
        _run("user_grant", "whoever")


def test_the_command_line_cannot_remove_the_last_admin():
    name = _name()
    _run("user_create", name, "--role", "admin")
    me = User.objects.get(username=name)
    User.objects.exclude(pk=me.pk).update(is_active=False)  # rolled back with the test
    with pytest.raises(CommandError, match="last active admin"):
        _run("user_revoke", name, "--role", "admin")
    with pytest.raises(CommandError, match="last active admin"):
        _run("user_deactivate", name)


# --- Django's own account commands: audited, or refused (issue 10: no second, unaudited door) ----------


def test_createsuperuser_is_refused_and_points_at_the_audited_command():
    before = User.objects.count()

    with pytest.raises(CommandError) as refused:
        call_command("createsuperuser", "--noinput", "--username", "root", "--email", "root@example.org")

    assert "user_create --role admin root" in str(refused.value)
    assert User.objects.count() == before
    assert load_command_class("approvals.auth_commands", "createsuperuser").help.startswith("Refused")
    for doc in ("docs/deploy.md", "docker-compose.yml"):  # the set-up steps name the audited command
        text = (ROOT / doc).read_text()
        assert "createsuperuser" not in text and "user_create --role admin" in text, doc


def test_changepassword_sets_the_password_through_the_audited_service(monkeypatch, client):
    name = _name()
    users.user_create(actor=users.CLI, username=name, roles=["reviewer"], password="an-old-passphrase-17")
    answers = iter(["a-new-passphrase-42", "a-new-passphrase-42"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))

    out, _ = _run("changepassword", name)

    assert f"Password changed successfully for user '{name}'" in out
    assert client.post("/accounts/login/", {"username": name, "password": "a-new-passphrase-42"}).status_code == 302
    user = User.objects.get(username=name)
    event = AuditEvent.objects.get(action="user.password_reset", subject_id=str(user.pk))
    assert event.actor_id is None and event.actor_label == "cli"


def test_changepassword_reads_stdin_and_refuses_a_weak_password_without_changing_it(monkeypatch, client):
    name = _name()
    user = users.user_create(actor=users.CLI, username=name, password="an-old-passphrase-17")

    with pytest.raises(CommandError, match="password"):
        _run("changepassword", name, "--password-stdin", stdin="12345\n", monkeypatch=monkeypatch)

    assert client.post("/accounts/login/", {"username": name, "password": "an-old-passphrase-17"}).status_code == 302
    assert not AuditEvent.objects.filter(action="user.password_reset", subject_id=str(user.pk)).exists()


def test_issue_token_refuses_a_deactivated_user_and_issues_nothing():
    """It printed a token that answered 401, listed as live on the user's page, for a reactivation to wake."""
    name = _name()
    user = users.user_create(actor=users.CLI, username=name, roles=["reviewer"])
    users.user_deactivate(actor=users.CLI, user_id=user.pk, reason="left")
    with pytest.raises(CommandError, match=rf"user '{name}' is deactivated"):
        _run("issue_token", name)
    assert not user.api_tokens.exists()
    users.user_reactivate(actor=users.CLI, user_id=user.pk)
    out, _ = _run("issue_token", name)
    assert out.strip().startswith("gh_") and user.api_tokens.count() == 1


def test_issue_token_refuses_an_unknown_graph_and_issues_nothing():
    name = _name()
    user = users.user_create(actor=users.CLI, username=name, roles=["reviewer"])

    with pytest.raises(CommandError, match=r"unknown graph 'nosuch'.*loan_approval"):
        _run("issue_token", name, "--graphs", "loan_approval,nosuch")

    assert not user.api_tokens.exists()
    # "external:" with a source no engine may name is refused as a user's assignment to it is.
    for bad in ("external:", "external:Pay ments"):
        with pytest.raises(CommandError, match="unknown graph"):
            _run("issue_token", name, "--graphs", f"loan_approval,{bad}")
    assert not user.api_tokens.exists()
    out, _ = _run("issue_token", name, "--graphs", "loan_approval,external:payments")  # an engine's tasks
    assert out.strip()
    assert list(user.api_tokens.values_list("graphs", flat=True)) == [["loan_approval", "external:payments"]]


def test_user_grant_refuses_a_gate_the_graph_does_not_have_and_grants_nothing():
    name = _name()
    _run("user_create", name, "--role", "reviewer")
    with pytest.raises(CommandError, match=r"--gate 'loan_approval:nope': 'nope' is not a gate of 'loan_approval'"):
        _run("user_grant", name, "--graph", "kyc_onboarding", "--gate", "loan_approval:nope")
    assert users.user_assignments(User.objects.get(username=name)) == []


def test_user_grant_keeps_accepting_a_gate_the_user_already_holds():
    name = _name()
    _run("user_create", name, "--role", "reviewer", "--gate", "loan_approval:human_review")
    _run("user_grant", name, "--gate", "loan_approval:human_review", "--gate", "loan_approval:disburse")
    held = {str(a) for a in users.user_assignments(User.objects.get(username=name))}
    assert held == {"loan_approval:human_review", "loan_approval:disburse"}


@pytest.mark.parametrize(
    "args,message",
    [
        (["--graph", "loan_aproval"], "--graph 'loan_aproval': {name} holds no graph 'loan_aproval'"),
        (["--gate", "spend:gat"], "--gate 'spend:gat': {name} does not hold the gate 'spend:gat'"),
        (
            ["--gate", "loan_approval:finance_review"],
            "--gate 'loan_approval:finance_review': {name} holds the whole graph 'loan_approval', not the gate",
        ),
        (["--role", "reviewer", "--graph", "nope"], "--graph 'nope': {name} holds no graph 'nope'"),
    ],
)
def test_revoking_what_the_user_does_not_hold_is_refused_and_changes_nothing(args, message):
    """A typo (``--graph loan_aproval``) exited 0 printing the unchanged access, as if revoked."""
    name = _name()
    _run(
        "user_create", name, "--role", "reviewer", "--graph", "loan_approval", "--gate", "kyc_onboarding:identity_check"
    )
    user = User.objects.get(username=name)
    before = users.access_snapshot(user)
    with pytest.raises(CommandError, match="^" + message.format(name=name).replace("(", r"\(")):
        _run("user_revoke", name, *args)
    assert users.access_snapshot(user) == before
    assert not AuditEvent.objects.filter(action="user.access_changed", subject_id=str(user.pk)).exists()
