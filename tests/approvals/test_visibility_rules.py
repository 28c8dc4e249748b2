"""The hot paths' visibility checks say what the visibility querysets say.

``permissions.thread_get_for`` reads the thread with fixed SQL, and the gateway re-checks a row
already read in memory (``thread_visible`` / ``task_visible``) instead of re-reading it. Each must
answer exactly as ``threads_visible`` / ``tasks_visible`` (the rule the rest of the code filters
with) for every kind of principal: a reader who may not see a row must get the same 404. In-process,
one transaction per test, rolled back.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from approvals import permissions
from approvals.errors import NotFound
from tests.approvals.guards import user_make, via_token
from tests.factories import task_make, thread_make

pytestmark = pytest.mark.django_db

LOAN, OTHER = "loan_approval", "four_eyes"


def _principals() -> dict[str, Any]:
    admin = user_make("admin", "*")
    return {
        "superuser": get_user_model().objects.create_superuser("vis-root", password=None),
        "admin": admin,
        "reviewer of loan": user_make("reviewer", LOAN),
        "reviewer of the other graph": user_make("reviewer", OTHER),
        "reviewer of every graph": user_make("reviewer", "*"),
        "auditor": user_make("auditor"),
        "no role, assigned to loan": user_make(None, LOAN),
        "inactive reviewer of loan": user_make("reviewer", LOAN, active=False),
        "admin's token narrowed to the other graph": via_token(admin, graphs=[OTHER]),
        "anonymous": AnonymousUser(),
    }


def _thread_found(user: Any, thread_id: Any) -> bool:
    try:
        permissions.thread_get_for(user, thread_id)
    except NotFound:
        return False
    return True


def test_the_thread_lookup_and_the_in_memory_check_follow_threads_visible():
    threads = {"loan": thread_make(graph=LOAN), "other": thread_make(graph=OTHER), "unbound": thread_make(graph="")}
    seen: dict[str, set[str]] = {}
    for who, user in _principals().items():
        rule = set(permissions.threads_visible(user).filter(pk__in=[t.pk for t in threads.values()]))
        expected = {name for name, t in threads.items() if t in rule}
        found = {name for name, t in threads.items() if _thread_found(user, t.pk)}
        in_memory = {name for name, t in threads.items() if permissions.thread_visible(user, t)}
        assert found == expected, who
        assert in_memory == expected, who
        seen[who] = expected
    # The rule itself, so the comparison above cannot pass on two empty answers.
    assert seen["superuser"] == seen["admin"] == {"loan", "other", "unbound"}
    assert seen["reviewer of loan"] == {"loan"}
    assert seen["admin's token narrowed to the other graph"] == {"other"}
    assert seen["no role, assigned to loan"] == seen["inactive reviewer of loan"] == seen["anonymous"] == set()


def test_the_in_memory_task_check_follows_tasks_visible():
    tasks = {"loan": task_make(graph=LOAN), "other": task_make(graph=OTHER)}
    seen: dict[str, set[str]] = {}
    for who, user in _principals().items():
        rule = set(permissions.tasks_visible(user).filter(pk__in=[t.pk for t in tasks.values()]))
        expected = {name for name, t in tasks.items() if t in rule}
        in_memory = {name for name, t in tasks.items() if permissions.task_visible(user, t)}
        assert in_memory == expected, who
        for name, task in tasks.items():
            if name not in expected:
                with pytest.raises(NotFound):
                    permissions.task_require_visible(user, task)
        seen[who] = expected
    assert seen["reviewer of loan"] == {"loan"}
    assert seen["admin's token narrowed to the other graph"] == {"other"}
    assert seen["anonymous"] == set()
