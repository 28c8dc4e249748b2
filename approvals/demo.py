"""Demo users and paused demo threads for embedded mode (never in production)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from approvals import services
from approvals.models import GraphAssignment
from approvals.roles import roles_ensure
from runtime.models import Thread

DEMO_PASSWORD = "gatehouse"
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


@transaction.atomic
def demo_setup() -> list[str]:
    roles = roles_ensure()
    User = get_user_model()
    done = []
    for username, (role, graphs) in DEMO_USERS.items():
        user, created = User.objects.get_or_create(username=username)
        if created:
            user.set_password(DEMO_PASSWORD)
            user.is_staff = role == "admin"
            user.is_superuser = role == "admin"
            user.save()
            done.append(f"user {username} ({role})")
        user.groups.add(roles[role])
        for graph in graphs:
            GraphAssignment.objects.get_or_create(user=user, graph=graph)
    operator = User.objects.get(username="operator")
    for graph, graph_input, metadata in DEMO_THREADS:
        if Thread.objects.filter(graph=graph, metadata__case=metadata["case"]).exists():
            continue
        thread, _ = services.thread_start(actor=operator, graph=graph, input=graph_input, metadata=metadata)
        done.append(f"thread {thread.id} ({graph}, case {metadata['case']})")
    return done
