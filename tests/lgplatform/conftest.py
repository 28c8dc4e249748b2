"""Helpers for the /lg/ tests: a thread run to its first pause (or end) through ``runs/wait``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import Persona


def lg_run_wait(persona: Persona, graph: str, graph_input: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A new thread, and what ``runs.wait`` returned for its first run on ``graph`` with ``graph_input``."""
    thread = persona.client.post("/lg/threads", {}).json()["thread_id"]
    response = persona.client.post(f"/lg/threads/{thread}/runs/wait", {"assistant_id": graph, "input": graph_input})
    assert response.status_code == 200, response.content
    return thread, response.json()


@pytest.fixture
def loan_operator(personas: dict[str, Persona]) -> Persona:
    """An operator assigned to ``loan_approval`` only: what it may not see or do on other graphs' threads."""
    from django.contrib.auth import get_user_model

    from approvals.models import GraphAssignment
    from approvals.roles import roles_ensure
    from approvals.tokens import token_issue

    user = get_user_model().objects.create_user(f"loan-operator-{uuid.uuid4().hex[:8]}")
    user.groups.add(roles_ensure()["operator"])
    GraphAssignment.objects.create(user=user, graph="loan_approval")
    return Persona(user.username, "operator", token_issue(user=user), user)


@pytest.fixture
def fanned_out(operator: Persona) -> tuple[str, dict[str, Any]]:
    """A ``fan_out_review`` thread paused with one interrupt per Send branch (items a and b)."""
    return lg_run_wait(operator, "fan_out_review", {"items": ["a", "b"]})
