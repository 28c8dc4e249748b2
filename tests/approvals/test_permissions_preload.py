"""``permissions.can`` reads a user's permissions and assignments in one query: the same sets Django
(ModelBackend) and ``_assignments`` read in three, for every way a user gets them."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals import permissions
from approvals.models import GraphAssignment
from approvals.roles import roles_ensure

pytestmark = pytest.mark.django_db


def _user(*, role: str | None = None, own: list[str] = (), graphs: list[tuple[str, str]] = ()) -> User:
    user = User.objects.create_user(f"preload-{uuid.uuid4().hex[:8]}")
    if role:
        user.groups.add(roles_ensure()[role])
    for codename in own:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    for graph, gate in graphs:
        GraphAssignment.objects.create(user=user, graph=graph, gate=gate)
    return user


def _fresh(user: User) -> User:
    return User.objects.get(pk=user.pk)


@pytest.mark.parametrize(
    "role,own,graphs",
    [
        ("reviewer", [], [("loan_approval", ""), ("kyc", "risk_gate")]),
        ("operator", ["view_audit"], [("*", "")]),
        (None, ["decide_task", "view_thread"], []),
        (None, [], []),
        ("admin", [], []),
    ],
)
def test_the_preloaded_sets_are_djangos_and_the_assignments(role, own, graphs):
    user = _user(role=role, own=own, graphs=graphs)
    extra = Group.objects.create(name=f"extra-{uuid.uuid4().hex[:8]}")
    extra.permissions.add(Permission.objects.get(codename="view_dashboard"))
    user.groups.add(extra)

    expected_perms = ModelBackend().get_all_permissions(_fresh(user))
    expected_assignments = sorted(GraphAssignment.objects.filter(user=user).values_list("graph", "gate"))

    preloaded = _fresh(user)
    with CaptureQueriesContext(connection) as ctx:
        permissions.can(preloaded, "approvals.view_approvaltask")
    assert len(ctx) == 1
    assert preloaded._perm_cache == expected_perms
    assert sorted(permissions._assignments(preloaded)) == expected_assignments
    asked = ("approvals.decide_task", "runtime.start_thread", "approvals.view_dashboard")
    expected = [_fresh(user).has_perm(perm) for perm in asked]
    with CaptureQueriesContext(connection) as again:  # everything after comes from the caches
        answers = [permissions.can(preloaded, perm) for perm in asked]
        permissions.graphs_visible(preloaded)
    assert answers == expected
    assert len(again) == 0


def test_an_inactive_user_reads_nothing_and_may_do_nothing():
    user = _user(role="admin", graphs=[("*", "")])
    User.objects.filter(pk=user.pk).update(is_active=False)
    inactive = _fresh(user)
    with CaptureQueriesContext(connection) as ctx:
        assert permissions.can(inactive, "approvals.decide_task") is False
    assert len(ctx) == 0


@pytest.mark.parametrize(
    "role,own,graphs",
    [
        ("reviewer", [], [("loan_approval", ""), ("kyc", "risk_gate")]),
        ("operator", ["view_audit"], [("*", "")]),
        (None, ["decide_task"], []),
        (None, [], []),
    ],
)
def test_a_token_reads_its_users_access_with_the_token_in_one_statement(role, own, graphs):
    """Every API request authenticates by token and then checks permissions: on PostgreSQL the token's
    statement reads the user's access too, and the checks that follow make no statement of their own."""
    from approvals.tokens import token_authenticate, token_issue

    user = _user(role=role, own=own, graphs=graphs)
    secret = token_issue(user=user)
    token_authenticate(secret)  # the throttled last-used stamp, written once a minute, happens here
    expected_perms = ModelBackend().get_all_permissions(_fresh(user))
    expected_assignments = sorted(GraphAssignment.objects.filter(user=user).values_list("graph", "gate"))

    with CaptureQueriesContext(connection) as ctx:
        authenticated = token_authenticate(secret)
        asked = ("approvals.view_approvaltask", "approvals.decide_task", "runtime.start_thread", "approvals.view_audit")
        answers = [permissions.can(authenticated, perm) for perm in asked]
        visible = permissions.graphs_visible(authenticated)
    expected_statements = 1 if connection.vendor == "postgresql" else 2
    assert len(ctx) == expected_statements, [q["sql"] for q in ctx.captured_queries]
    assert authenticated._perm_cache == expected_perms
    assert sorted(permissions._assignments(authenticated)) == expected_assignments
    assert answers == [_fresh(user).has_perm(perm) for perm in asked]
    assert visible == permissions.graphs_visible(_fresh(user))


def test_a_permission_withdrawn_is_withdrawn_at_the_tokens_next_request():
    """The access read with the token is the request's own: nothing is kept between requests."""
    from approvals.tokens import token_authenticate, token_issue

    user = _user(own=["decide_task", "view_approvaltask"], graphs=[("loan_approval", "")])
    secret = token_issue(user=user)
    assert permissions.can(token_authenticate(secret), "approvals.decide_task")
    user.user_permissions.remove(Permission.objects.get(codename="decide_task"))
    GraphAssignment.objects.filter(user=user).delete()
    later = token_authenticate(secret)
    assert not permissions.can(later, "approvals.decide_task")
    assert permissions.graphs_visible(later) == set()
