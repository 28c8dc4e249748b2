"""An engine's service principal: a token scoped to one external source, allowed to start and read."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ApiClient, Persona, daphne_serving, worker_env


def engine_persona(source: str, *, actions: tuple[str, ...] = ("start", "read")) -> Persona:
    from django.contrib.auth import get_user_model

    from approvals.models import GraphAssignment
    from approvals.roles import roles_ensure
    from approvals.tokens import token_issue

    user = get_user_model().objects.create_user(f"engine-{source}")
    user.groups.add(roles_ensure()["operator"])
    GraphAssignment.objects.create(user=user, graph=f"external:{source}")
    token = token_issue(user=user, graphs=[f"external:{source}"], actions=list(actions))
    return Persona(user.username, "operator", token, user)


@pytest.fixture
def source(live_db: None) -> str:
    return f"pay-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def engine(source: str) -> Persona:
    return engine_persona(source)


def task_body(source: str, key: str = "k1", **extra: Any) -> dict[str, Any]:
    return {
        "source": source,
        "key": key,
        "title": "Release wire 42",
        "payload": {"amount": 12000, "applicant": {"name": "Ada", "ssn": "123-45-6789"}},
        **extra,
    }


def create(client: ApiClient, body: dict[str, Any]) -> Any:
    return client.post("/api/external-tasks", body)


@pytest.fixture(scope="module")
def gatehouse_url(django_db_setup: None, bank: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """daphne serving the API on a free port, with the test database (what an engine's worker talks to)."""
    log_path = tmp_path_factory.mktemp("daphne") / "daphne.log"
    unknown = f"/api/external-tasks/{uuid.uuid4()}"
    serving = daphne_serving(worker_env(bank), log_path, ready=unknown, status=401, what="daphne to serve /api/")
    with serving as (_, base):
        yield base
