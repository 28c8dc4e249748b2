"""Helpers for the hand-off tests: fresh people per test (an away setting or a claim on a shared
persona would change other tests' outcomes), tasks made without a worker, API clients."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import Group, User
from django.utils import timezone

from approvals.models import GraphAssignment
from approvals.payloads import DecisionRequest
from approvals.roles import roles_ensure
from approvals.services import Signer, task_decide
from approvals.tokens import token_issue
from tests.conftest import ApiClient


def person(role: str | None = "reviewer", graphs: tuple[str, ...] = ("*",), gate: str = "") -> User:
    user = User.objects.create_user(f"ho-{role or 'none'}-{uuid.uuid4().hex[:8]}", password="gatehouse")
    if role:
        user.groups.add(roles_ensure()[role])
    for graph in graphs:
        GraphAssignment.objects.create(user=user, graph=graph, gate=gate)
    return user


def team(*members: User) -> Group:
    group = Group.objects.create(name=f"team-{uuid.uuid4().hex[:8]}")
    group.user_set.add(*members)
    return group


def api(user: User) -> ApiClient:
    return ApiClient(token_issue(user=user))


def sign(user: User, task: Any, outcome: str = "approve", **fields: Any) -> Any:
    """A real decision through the service (a fresh sign-in, so no re-authentication is asked)."""
    request = DecisionRequest(outcome=outcome, reason=fields.pop("reason", "handoff test"), **fields)
    return task_decide(actor=user, task_id=task.pk, request=request, signer=Signer(authenticated_at=timezone.now()))


def put(client: ApiClient, path: str, body: Any) -> Any:
    import json

    return client.client.put(path, json.dumps(body), content_type="application/json", headers=client.headers)


def delete(client: ApiClient, path: str) -> Any:
    return client.client.delete(path, headers=client.headers)
