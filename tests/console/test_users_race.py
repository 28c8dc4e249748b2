"""Two admins demoting each other at the same moment must not leave the installation without an admin.

Committed rows and two real database connections (threads): the rule is kept by a lock, and only a
race shows it.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models.signals import m2m_changed

from approvals import users
from approvals.errors import Conflict
from tests.conftest import scaled


def _admin() -> User:
    return users.user_create(actor=users.CLI, username=f"adm-{uuid.uuid4().hex[:8]}", roles=["admin"])


@pytest.fixture
def two_only_admins(live_db, django_db_blocker):
    """Two committed admins and no other active admin; everything restored afterwards."""
    a, b = _admin(), _admin()
    others = list(users.admins_active().exclude(pk__in=[a.pk, b.pk]).values_list("pk", flat=True))
    User.objects.filter(pk__in=others).update(is_active=False)
    try:
        yield a, b
    finally:
        User.objects.filter(pk__in=others).update(is_active=True)
        User.objects.filter(pk__in=[a.pk, b.pk]).update(is_active=False)


@pytest.mark.usefixtures("live_db")
def test_two_admins_demoting_each_other_at_once_leave_one_admin(two_only_admins):
    a, b = two_only_admins
    # Both transactions pause right after removing the role, before their last-admin check, until
    # both are there (or the barrier gives up: serialised transactions never meet there).
    barrier = threading.Barrier(2, timeout=scaled(3))

    def meet(sender: Any, instance: Any, action: str, **kwargs: Any) -> None:
        if action == "post_remove" and isinstance(instance, User) and instance.pk in (a.pk, b.pk):
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()

    outcomes: dict[str, str] = {}

    def demote(name: str, actor: User, target: User) -> None:
        try:
            users.user_roles_set(actor=actor, user_id=target.pk, roles=["reviewer"])
            outcomes[name] = "done"
        except Conflict:
            outcomes[name] = "refused"
        finally:
            connection.close()

    m2m_changed.connect(meet, sender=User.groups.through, weak=False)
    try:
        threads = [
            threading.Thread(target=demote, args=("a demotes b", a, b)),
            threading.Thread(target=demote, args=("b demotes a", b, a)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=scaled(30))
    finally:
        m2m_changed.disconnect(meet, sender=User.groups.through)
    assert sorted(outcomes.values()) == ["done", "refused"], outcomes
    assert users.admins_active().filter(pk__in=[a.pk, b.pk]).count() == 1
