"""User administration services (approvals.users): the policy, the audit trail, the last-admin rule,
what deactivation takes away, and effective permissions computed by the one permission policy.

The tests run inside a rolled-back transaction (``django_db``) so they may deactivate every other
admin to stage "the last admin"; the race between two admins is in test_users_race.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client

from approvals import permissions, users
from approvals.errors import Conflict, Forbidden, InvalidInput, NotFound
from approvals.models import ApiToken, AuditEvent, GraphAssignment
from approvals.tokens import token_authenticate, token_issue


def _name(prefix: str = "u") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _admin(**kwargs: Any) -> User:
    return users.user_create(actor=users.CLI, username=_name("adm"), roles=["admin"], password=None, **kwargs)


def _sign_in(client: Client, username: str, password: str) -> bool:
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return response.status_code == 302


def _events(user: User, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(subject_type="user", subject_id=str(user.pk), action=action).order_by("id"))


pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("audit_quiet")]


def test_an_admin_creates_a_user_and_the_creation_is_audited_with_who_and_what(personas):
    admin = personas["admin"].user
    user = users.user_create(
        actor=admin,
        username=_name("rev"),
        email="rev@example.org",
        roles=["reviewer"],
        assignments=[users.Assignment("loan_approval"), users.Assignment("kyc_onboarding", "compliance_review")],
    )
    assert users.user_roles(user) == ["reviewer"]
    assert [str(a) for a in users.user_assignments(user)] == ["kyc_onboarding:compliance_review", "loan_approval"]
    assert not user.has_usable_password()
    [event] = _events(user, "user.created")
    assert event.actor_id == admin.pk and event.actor_label == admin.username
    assert event.details["after"] == {
        "active": True,
        "roles": ["reviewer"],
        "assignments": ["kyc_onboarding:compliance_review", "loan_approval"],
    }


@pytest.mark.parametrize("role", ["reviewer", "approver", "auditor", "operator", "outsider"])
def test_only_the_admin_role_may_administer_users(personas, role):
    actor = personas[role].user
    target = users.user_create(actor=users.CLI, username=_name())
    before = AuditEvent.objects.count()
    calls = [
        lambda: users.user_create(actor=actor, username=_name()),
        lambda: users.user_roles_set(actor=actor, user_id=target.pk, roles=["admin"]),
        lambda: users.user_assignments_set(actor=actor, user_id=target.pk, assignments=[users.Assignment("*")]),
        lambda: users.user_deactivate(actor=actor, user_id=target.pk),
        lambda: users.user_password_reset(actor=actor, user_id=target.pk),
        lambda: users.user_otp_reset(actor=actor, user_id=target.pk),
        lambda: users.users_list(actor=actor),
        lambda: users.user_effective_permissions(actor=actor, user_id=target.pk),
    ]
    for call in calls:
        with pytest.raises(Forbidden):
            call()
    assert AuditEvent.objects.count() == before
    assert users.user_roles(User.objects.get(pk=target.pk)) == []


def test_a_token_narrowed_to_read_cannot_administer_users(personas):
    admin = personas["admin"].user
    user = token_authenticate(token_issue(user=admin, actions=["read"]))
    with pytest.raises(Forbidden):
        users.user_create(actor=user, username=_name())
    full = token_authenticate(token_issue(user=admin, actions=["admin"]))
    assert users.user_create(actor=full, username=_name()).pk


def test_role_and_assignment_changes_are_audited_with_before_and_after(personas):
    admin = personas["admin"].user
    user = users.user_create(actor=admin, username=_name(), roles=["reviewer"], assignments=[users.Assignment("*")])
    users.user_roles_set(actor=admin, user_id=user.pk, roles=["approver", "operator"])
    users.user_assignments_set(
        actor=admin, user_id=user.pk, assignments=[users.Assignment("loan_approval", "human_review")]
    )
    first, second = _events(user, "user.access_changed")
    assert first.actor_label == admin.username
    assert first.details["before"]["roles"] == ["reviewer"]
    assert first.details["after"]["roles"] == ["approver", "operator"]
    assert second.details["before"]["assignments"] == ["*"]
    assert second.details["after"]["assignments"] == ["loan_approval:human_review"]


def test_a_change_that_changes_nothing_writes_nothing(personas):
    admin = personas["admin"].user
    user = users.user_create(actor=admin, username=_name(), roles=["reviewer"])
    users.user_roles_set(actor=admin, user_id=user.pk, roles=["reviewer"])
    assert _events(user, "user.access_changed") == []


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"username": ""}, "username"),
        ({"username": "has space"}, "username"),
        ({"username": "x" * 151}, "username"),
        ({"username": "webhook:sneaky"}, "username"),
        ({"email": "not-an-email"}, "email"),
        ({"roles": ["superhero"]}, "roles"),
        ({"roles": ["service"]}, "roles"),  # webhook principals only
        ({"assignments": [users.Assignment("no_such_graph")]}, "assignments[0].graph"),
        ({"assignments": [users.Assignment("*", "human_review")]}, "assignments[0].gate"),
        ({"assignments": [users.Assignment("external:Not A Slug")]}, "assignments[0].graph"),
        ({"assignments": [users.Assignment("external:")]}, "assignments[0].graph"),
        (
            {"assignments": [users.Assignment("loan_approval"), users.Assignment("loan_approval", "nope")]},
            "assignments[1].gate",
        ),
        ({"password": "short"}, "password"),
        ({"password": "ok-but-\x00-nul-123"}, "password"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(personas, kwargs, field):
    before_users, before_events = User.objects.count(), AuditEvent.objects.count()
    with pytest.raises(InvalidInput) as refused:
        users.user_create(actor=personas["admin"].user, **{"username": _name(), **kwargs})
    assert refused.value.field == field, refused.value.message
    assert (User.objects.count(), AuditEvent.objects.count()) == (before_users, before_events)


def test_an_external_engines_source_may_be_assigned_as_its_docs_ask(personas):
    # docs/external-tasks.md: the engine principal and its reviewers are assigned to external:<source>;
    # every surface refused it as an unknown graph.
    engine = users.user_create(
        actor=users.CLI, username=_name(), roles=["operator"], assignments=[users.Assignment("external:payments")]
    )
    assert [str(a) for a in users.user_assignments(engine)] == ["external:payments"]
    assert permissions.graphs_visible(engine) == {"external:payments"}


@pytest.mark.parametrize(
    ("text", "graph", "gate"),
    [
        ("loan_approval", "loan_approval", ""),
        ("loan_approval:human_review", "loan_approval", "human_review"),
        ("external:payments", "external:payments", ""),
        ("external:payments:sign_off", "external:payments", "sign_off"),
    ],
)
def test_a_form_s_assignment_keeps_an_external_source_whole(text, graph, gate):
    """A form's checkbox (or a command's --gate) "external:payments" was read as graph "external", gate
    "payments"."""
    assert users.Assignment.parse(text) == users.Assignment(graph, gate)
    assert str(users.Assignment.parse(text)) == text


def test_a_taken_username_is_a_conflict(personas):
    name = _name()
    users.user_create(actor=users.CLI, username=name)
    with pytest.raises(Conflict) as refused:
        users.user_create(actor=personas["admin"].user, username=name.upper())
    assert refused.value.field == "username"


def test_users_that_do_not_exist_or_are_webhook_principals_are_not_found(personas):
    admin = personas["admin"].user
    principal = User.objects.create_user(f"webhook:{_name()}")
    for user_id in (principal.pk, 2**31, 2**63, -1, "abc"):
        with pytest.raises(NotFound):
            users.user_roles_set(actor=admin, user_id=user_id, roles=["admin"])


# --- the last active admin -------------------------------------------------------------------


def _only_admin() -> User:
    me = _admin()
    User.objects.exclude(pk=me.pk).update(is_active=False)  # rolled back with the test
    assert list(users.admins_active()) == [me]
    return me


def test_the_last_active_admin_cannot_remove_their_own_admin_role():
    me = _only_admin()
    with pytest.raises(Conflict) as refused:
        users.user_roles_set(actor=me, user_id=me.pk, roles=["reviewer"])
    assert "last active admin" in refused.value.message and refused.value.field == "roles"
    assert users.user_roles(User.objects.get(pk=me.pk)) == ["admin"]
    assert _events(me, "user.access_changed") == []


def test_the_last_active_admin_cannot_be_deactivated_nor_revoked_from_the_command_line():
    me = _only_admin()
    with pytest.raises(Conflict):
        users.user_deactivate(actor=me, user_id=me.pk)
    with pytest.raises(Conflict):
        users.user_revoke(actor=users.CLI, user_id=me.pk, roles=["admin"])
    assert User.objects.get(pk=me.pk).is_active


def test_an_admin_may_step_down_once_another_admin_exists():
    me = _only_admin()
    other = _admin()
    users.user_roles_set(actor=me, user_id=me.pk, roles=["auditor"])
    assert list(users.admins_active()) == [other]


# --- deactivation ----------------------------------------------------------------------------


def test_deactivation_revokes_api_tokens_ends_sessions_and_is_audited(personas):
    admin = personas["admin"].user
    user = users.user_create(actor=admin, username=_name(), roles=["reviewer"], password="a-long-passphrase-42")
    secret = token_issue(user=user)
    browser = Client()
    assert _sign_in(browser, user.username, "a-long-passphrase-42")
    assert browser.get("/").status_code == 200
    other = Client()
    other.force_login(personas["reviewer"].user)  # someone else's session survives

    users.user_deactivate(actor=admin, user_id=user.pk, reason="left the team")

    assert token_authenticate(secret) is None
    assert ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() == 0
    assert browser.get("/").status_code == 302  # signed out
    assert other.get("/").status_code == 200
    assert not any(str(s.get_decoded().get("_auth_user_id")) == str(user.pk) for s in Session.objects.all())
    [event] = _events(user, "user.deactivated")
    assert event.details["sessions_ended"] == 1
    assert event.details["tokens_revoked"] == [secret[:10]]
    assert event.details["reason"] == "left the team"
    assert event.details["before"]["active"] is True and event.details["after"]["active"] is False
    effective = users.user_effective_permissions(actor=admin, user_id=user.pk)
    assert not effective.active and not any(g.visible for g in effective.graphs)

    users.user_reactivate(actor=admin, user_id=user.pk)
    assert token_authenticate(secret) is None  # revoked tokens stay revoked
    assert len(_events(user, "user.reactivated")) == 1


def test_a_password_reset_voids_the_old_password_and_its_sessions(personas):
    admin = personas["admin"].user
    user = users.user_create(actor=admin, username=_name(), roles=["reviewer"], password="a-long-passphrase-42")
    browser = Client()
    assert _sign_in(browser, user.username, "a-long-passphrase-42")
    setup = users.user_password_reset(actor=admin, user_id=user.pk)
    assert setup is not None and setup.token
    assert browser.get("/").status_code == 302
    assert not _sign_in(Client(), user.username, "a-long-passphrase-42")
    [event] = _events(user, "user.password_reset")
    assert setup.token not in str(event.details)


def test_an_otp_reset_removes_every_device(personas):
    from django_otp.plugins.otp_totp.models import TOTPDevice

    admin = personas["admin"].user
    user = users.user_create(actor=admin, username=_name())
    TOTPDevice.objects.create(user=user, name="phone", confirmed=True)
    TOTPDevice.objects.create(user=user, name="spare", confirmed=False)
    assert users.user_otp_reset(actor=admin, user_id=user.pk) == 2
    assert not TOTPDevice.objects.filter(user=user).exists()
    [event] = _events(user, "user.otp_reset")
    assert sorted(event.details["devices_removed"]) == ["TOTPDevice:phone", "TOTPDevice:spare"]


# --- effective permissions ------------------------------------------------------------------


def test_effective_permissions_come_from_the_permission_policy(personas):
    admin = personas["admin"].user
    gate_reviewer = users.user_create(
        actor=admin,
        username=_name(),
        roles=["reviewer"],
        assignments=[users.Assignment("kyc_onboarding", "compliance_review"), users.Assignment("loan_approval")],
    )
    e = users.user_effective_permissions(actor=admin, user_id=gate_reviewer.pk)
    by_graph = {g.graph: g for g in e.graphs}
    kyc, loan, flaky = by_graph["kyc_onboarding"], by_graph["loan_approval"], by_graph["flaky"]
    assert kyc.visible and kyc.view_tasks and not kyc.start and not kyc.view_sensitive
    assert {g.gate: g.can_decide for g in kyc.gates}["compliance_review"] is True
    assert {g.gate: g.can_decide for g in kyc.gates}["identity_check"] is False
    assert loan.decide and all(g.can_decide for g in loan.gates)
    assert not flaky.visible and not flaky.decide
    assert not e.view_audit and not e.manage_users

    auditor = users.user_effective_permissions(actor=admin, user_id=personas["auditor"].user.pk)
    assert auditor.view_audit and all(g.visible and not g.decide and g.view_sensitive for g in auditor.graphs)


def test_an_assignment_to_an_unregistered_graph_can_still_be_removed(personas):
    admin = personas["admin"].user
    user = users.user_create(actor=admin, username=_name(), roles=["reviewer"])
    GraphAssignment.objects.create(user=user, graph="retired_graph")
    users.user_assignments_set(actor=admin, user_id=user.pk, assignments=[users.Assignment("retired_graph")])
    users.user_assignments_set(actor=admin, user_id=user.pk, assignments=[])
    assert users.user_assignments(user) == []
    with pytest.raises(InvalidInput):
        users.user_assignments_set(actor=admin, user_id=user.pk, assignments=[users.Assignment("retired_graph")])


# --- the SSO claim mapping ---------------------------------------------------------------------


def test_the_sso_mapping_grants_the_union_of_matching_claim_values():
    mapping = users.sso_mapping_parse(
        "groups",
        {
            "rev": {"roles": ["reviewer"], "graphs": ["loan_approval"]},
            "kyc": {"roles": ["reviewer"], "gates": ["kyc_onboarding:compliance_review"]},
            "graphs-only": {"graphs": ["*"]},
        },
    )
    grant = mapping.grant_for({"groups": ["rev", "kyc", "other"]})
    assert grant.roles == {"reviewer"}
    assert {str(a) for a in grant.assignments} == {"loan_approval", "kyc_onboarding:compliance_review"}
    assert mapping.grant_for({"groups": "rev"}).roles == {"reviewer"}
    assert mapping.grant_for({"groups": ["graphs-only"]}) == users.SsoGrant(frozenset(), frozenset())
    assert mapping.grant_for({}) == users.SsoGrant(frozenset(), frozenset())
    assert mapping.grant_for({"groups": {"rev": True}}) == users.SsoGrant(frozenset(), frozenset())


@pytest.mark.parametrize(
    "raw,field",
    [
        ({"x": {"roles": ["wizard"]}}, "GATEHOUSE_OIDC_MAPPING['x'].roles"),
        ({"x": {"roles": ["reviewer"], "graphs": ["nope"]}}, "GATEHOUSE_OIDC_MAPPING['x'].graphs"),
        ({"x": {"roles": ["reviewer"], "gates": ["loan_approval"]}}, "GATEHOUSE_OIDC_MAPPING['x'].gates"),
        ({"x": {"roles": "reviewer"}}, "GATEHOUSE_OIDC_MAPPING['x'].roles"),
        ({"x": ["reviewer"]}, "GATEHOUSE_OIDC_MAPPING['x']"),
        ({"x": {"role": ["reviewer"]}}, "GATEHOUSE_OIDC_MAPPING['x']"),
    ],
)
def test_a_bad_sso_mapping_names_the_entry(raw, field):
    with pytest.raises(InvalidInput) as refused:
        users.sso_mapping_parse("groups", raw)
    assert refused.value.field == field


def test_gate_assignments_covered_by_a_whole_graph_are_dropped():
    user = users.user_create(
        actor=users.CLI,
        username=_name(),
        assignments=[users.Assignment("loan_approval"), users.Assignment("loan_approval", "human_review")],
    )
    assert [str(a) for a in users.user_assignments(user)] == ["loan_approval"]
    users.user_grant(actor=users.CLI, user_id=user.pk, assignments=[users.Assignment("*")])
    gate = users.Assignment("kyc_onboarding", "compliance_review")
    users.user_grant(actor=users.CLI, user_id=user.pk, assignments=[gate])
    assert [str(a) for a in users.user_assignments(user)] == ["*", "loan_approval"]
