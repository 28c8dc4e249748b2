"""Helpers of the in-process guard tests (tests/**/test_guards_*.py): principals made for one test."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from approvals.models import GraphAssignment
from approvals.tokens import token_authenticate, token_issue


def user_make(role: str | None, *graphs: str | tuple[str, str], active: bool = True, password: str = "") -> Any:
    """A fresh user with ``role`` and assignments (a graph name, or (graph, gate)), loaded afresh."""
    user = get_user_model().objects.create_user(
        f"guard-{uuid.uuid4().hex[:8]}", password=password or None, is_active=active
    )
    if role:
        user.groups.add(Group.objects.get(name=role))  # the roles migration made the groups
    for graph in graphs:
        name, gate = graph if isinstance(graph, tuple) else (graph, "")
        GraphAssignment.objects.create(user=user, graph=name, gate=gate)
    return get_user_model().objects.get(pk=user.pk)  # no cached permissions or assignments


def via_token(user: Any, *, graphs: list[str] | None = None, actions: list[str] | None = None) -> Any:
    """``user`` as a request authenticated with a token narrowed to ``graphs`` / ``actions`` sees it."""
    authenticated = token_authenticate(token_issue(user=user, graphs=graphs, actions=actions))
    assert authenticated is not None
    return authenticated
