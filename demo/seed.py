"""Demo users and paused demo threads for embedded mode (never in production): `manage.py demo_setup`.

Works with any ``GATEHOUSE_GRAPHS``: the demo users are assigned to the graphs
that are registered, and demo threads start only for demo graphs that are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password, make_password
from django.db import transaction

from approvals import services
from approvals.models import GraphAssignment
from approvals.roles import roles_ensure
from runtime.models import Thread
from runtime.registry import graph_names

DEMO_PASSWORD = "gatehouse"  # noqa: S105 - the demo's documented sign-in, created only by demo_setup
DEMO_USERS: dict[str, tuple[str, list[str]]] = {
    # username: (role, assigned graphs)
    "reviewer": ("reviewer", ["*"]),
    "reviewer2": ("reviewer", ["loan_approval"]),
    "auditor": ("auditor", []),
    "operator": ("operator", ["*"]),
    "admin": ("admin", ["*"]),
}

DEMO_THREADS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "loan_approval",
        {"applicant": "Ada Lovelace", "loan_id": "L-1001", "amount": 18000, "income": 40000, "term_months": 24},
        {"case": "L-1001", "applicant": "Ada Lovelace"},
    ),
    (
        "loan_approval",
        {"applicant": "Alan Turing", "loan_id": "L-1002", "amount": 22000, "income": 45000, "term_months": 36},
        {"case": "L-1002", "applicant": "Alan Turing"},
    ),
    (
        "kyc_onboarding",
        {
            "applicant": {"name": "Grace Hopper", "country": "US", "date_of_birth": "1906-12-09"},
            "documents": [{"type": "passport", "status": "received"}],
        },
        {"case": "K-2001", "applicant": "Grace Hopper"},
    ),
]


def _assigned(graphs: list[str], registered: list[str]) -> list[str]:
    """A demo user's graphs among the registered ones; a one-graph reviewer whose demo graph
    is not registered gets the first registered graph, so it still shows a narrower scope."""
    if graphs == ["*"] or not graphs:
        return graphs
    kept = [g for g in graphs if g in registered]
    return kept or registered[:1]


@transaction.atomic
def demo_setup() -> list[str]:
    roles = roles_ensure()
    User = get_user_model()
    registered = graph_names()
    done = []
    # Roles alone grant (docs/users.md: no superusers): a demo admin that was a superuser kept every
    # right after an admin demoted it, and counted as the last admin. Earlier demo databases are mended.
    User.objects.filter(username__in=DEMO_USERS, is_superuser=True).update(is_superuser=False, is_staff=False)
    hashed = ""  # one hash for every demo user created now (a hash costs ~0.4 s; the password is public)
    for username, (role, demo_graphs) in DEMO_USERS.items():
        user, created = User.objects.get_or_create(username=username)
        if not created:
            continue  # an admin may have changed its access since: a restart does not undo that
        hashed = hashed or make_password(DEMO_PASSWORD)
        user.password = hashed
        user.save()
        user.groups.add(roles[role])
        for graph in _assigned(demo_graphs, registered):
            GraphAssignment.objects.get_or_create(user=user, graph=graph)
        done.append(f"user {username} ({role})")
    operator = User.objects.get(username="operator")
    for graph, graph_input, metadata in DEMO_THREADS:
        if graph not in registered:
            continue
        if Thread.objects.filter(graph=graph, metadata__case=metadata["case"]).exists():
            continue
        thread, _ = services.thread_start(actor=operator, graph=graph, input=graph_input, metadata=metadata)
        done.append(f"thread {thread.id} ({graph}, case {metadata['case']})")
    return done


def demo_users_signing_in(*, known: Iterable[str] = ()) -> list[str]:
    """The active demo users whose password is still the demo password, in ``DEMO_USERS`` order.

    ``known`` are users just created with it (not checked again: a check costs a password hash, ~0.4 s).
    A deactivated user, or one whose password an admin changed, is not listed: the start-up line said
    "password for all" after that, too. The hash is only compared (``hashers.check_password``), never
    upgraded and saved: this is a read."""
    known = set(known)
    users = get_user_model().objects.filter(username__in=DEMO_USERS, is_active=True)
    passwords = dict(users.values_list("username", "password"))
    # The demo users share one hash (``demo_setup``): each distinct hash is checked once, not each user's.
    checked = {passwords[name] for name in passwords if name not in known}
    demo_hashes = {hashed: check_password(DEMO_PASSWORD, hashed) for hashed in checked}
    return [name for name in DEMO_USERS if name in passwords and (name in known or demo_hashes[passwords[name]])]
