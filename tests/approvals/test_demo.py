"""The demo set-up works with whatever graphs are registered (``GATEHOUSE_GRAPHS`` pointing at your own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from approvals.models import GraphAssignment
from demo.seed import DEMO_USERS, demo_setup, demo_users_signing_in
from runtime.models import Thread
from runtime.registry import registry_load
from tests.embedded.conftest import SOAK_GRAPHS

pytestmark = pytest.mark.django_db


@pytest.fixture
def own_graphs() -> Iterator[None]:
    registry_load(SOAK_GRAPHS)
    yield
    registry_load()


def test_with_your_own_graphs_the_demo_users_exist_and_no_demo_thread_starts(own_graphs: None) -> None:
    started = timezone.now()  # threads other tests left in this database are not the demo's
    created = demo_setup()
    users = get_user_model().objects.filter(username__in=DEMO_USERS)
    assert sorted(u.username for u in users) == sorted(DEMO_USERS)
    assert not Thread.objects.filter(graph__in=["loan_approval", "kyc_onboarding"], created_at__gte=started).exists()
    assert not [line for line in created if line.startswith("thread")]
    graphs = {a.user.username: a.graph for a in GraphAssignment.objects.select_related("user").filter(user__in=users)}
    assert graphs["reviewer"] == "*"
    # The loan-only reviewer has no loan graph to review: it gets one registered graph instead.
    assert graphs["reviewer2"] == "soak_review"


def test_with_the_demo_graphs_registered_the_demo_threads_start() -> None:
    demo_setup()
    cases = set(Thread.objects.values_list("graph", "metadata__case"))
    assert {("loan_approval", "L-1001"), ("loan_approval", "L-1002"), ("kyc_onboarding", "K-2001")} <= cases
    assert GraphAssignment.objects.get(user__username="reviewer2").graph == "loan_approval"


def test_the_demo_admin_holds_its_rights_by_role_alone_and_a_restart_keeps_changes() -> None:
    from approvals import users
    from approvals.users import CLI

    demo_setup()
    admin = get_user_model().objects.get(username="admin")
    assert not admin.is_superuser and not admin.is_staff  # docs/users.md: no superusers
    assert users.user_roles(admin) == ["admin"]
    # Demoted, it keeps no admin right (as a superuser it kept them all, and counted as an admin).
    users.user_create(actor=CLI, username="second-admin", roles=["admin"])
    users.user_roles_set(actor=CLI, user_id=admin.pk, roles=["reviewer"])
    assert admin.pk not in set(users.admins_active().values_list("pk", flat=True))
    # `make run` again: the demo set-up does not give it back what an admin took away.
    demo_setup()
    assert users.user_roles(get_user_model().objects.get(username="admin")) == ["reviewer"]


def test_a_demo_database_from_before_is_mended_its_admin_no_longer_a_superuser() -> None:
    demo_setup()
    get_user_model().objects.filter(username="admin").update(is_superuser=True, is_staff=True)
    demo_setup()
    assert not get_user_model().objects.get(username="admin").is_superuser


def _demo_setup_output() -> list[str]:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("demo_setup", "--force", stdout=out)
    return out.getvalue().splitlines()


def test_the_demo_password_line_names_only_the_users_who_can_still_sign_in_with_it() -> None:
    """It said "password for all: gatehouse" on every restart, also after an admin had deactivated
    ``auditor`` and changed another demo user's password."""
    first = _demo_setup_output()
    assert first[-1] == "demo sign-in: reviewer, reviewer2, auditor, operator, admin (password: gatehouse)"

    User = get_user_model()
    User.objects.filter(username="auditor").update(is_active=False)
    reviewer2 = User.objects.get(username="reviewer2")
    reviewer2.set_password("changed by an admin")
    reviewer2.save()
    again = _demo_setup_output()
    assert again == ["demo sign-in: reviewer, operator, admin (password: gatehouse)"]


def test_no_demo_password_line_once_no_demo_user_has_it() -> None:
    demo_setup()
    User = get_user_model()
    for user in User.objects.filter(username__in=DEMO_USERS):
        user.set_password("not the demo one")
        user.save()
    assert not [line for line in _demo_setup_output() if "gatehouse" in line or "password" in line]


def test_a_restart_hashes_the_demo_password_once_not_once_per_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each demo user had a hash of its own, and each restart checked all five: ~2 s before the console
    answered. They share one now (the password is public), so a restart checks it once."""
    from django.contrib.auth.hashers import get_hasher

    demo_setup()
    User = get_user_model()
    users = list(User.objects.filter(username__in=DEMO_USERS))
    assert len({u.password for u in users}) == 1 and all(u.check_password("gatehouse") for u in users)

    hasher = type(get_hasher())
    verified: list[str] = []
    verify = hasher.verify
    monkeypatch.setattr(
        hasher, "verify", lambda self, password, encoded: verified.append(encoded) or verify(self, password, encoded)
    )
    assert demo_users_signing_in() == list(DEMO_USERS)
    assert len(verified) == 1
