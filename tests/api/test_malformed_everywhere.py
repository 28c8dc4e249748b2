"""No input makes either API or the console answer 5xx, and either API refuses it in JSON: every operation
and route walked with malformed input (tests/api/malformed_walk.py).

The walk runs in a process of its own on a database of its own (it leaves users, threads and comments
behind, made of whatever input happened to be valid); its dispatches go to a queue nobody consumes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings

from tests.conftest import ROOT, _admin_connection, _terminate_backends, scaled

pytestmark = pytest.mark.slow
ROLES = ("operator", "reviewer", "admin")  # the walk's personas (tests/api/malformed_walk.py)


@pytest.fixture(scope="module")
def walk_env() -> Iterator[dict[str, str]]:
    name = f"gatehouse_walk_{os.getpid()}"
    db = settings.DATABASES["default"]
    with _admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    queue = f"gatehouse-walk-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DATABASE_URL"))}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}",
        GATEHOUSE_QUEUE=queue,
        LOG_LEVEL="ERROR",
    )
    try:
        yield env
    finally:
        _terminate_backends(name)
        with _admin_connection() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        client.delete(queue)
        client.close()


def _walk(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.api.malformed_walk", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(600),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _routes() -> set[str]:
    from console.urls import console_patterns
    from tests.api.malformed_walk import CONSOLE_SKIPPED

    return {str(p.name) for p in console_patterns} - CONSOLE_SKIPPED


def _operations() -> set[str]:
    """Every operation both OpenAPI documents list, as this process serves them (the same routes)."""
    from django.test import Client

    client = Client(SERVER_NAME="127.0.0.1")
    found = set()
    for prefix in ("/api/", "/lg/"):
        for path, operations in client.get(f"{prefix}openapi.json").json()["paths"].items():
            found |= {f"{m.upper()} {path}" for m in operations if m in ("get", "post", "put", "patch", "delete")}
    return found


@pytest.mark.usefixtures("live_db")
# The walk's own bound (scaled(600), in _walk) and then some: pytest-timeout's default (300 s) is not scaled,
# and a loaded machine took longer than that for every operation's malformed inputs.
@pytest.mark.timeout(scaled(660))
def test_no_malformed_input_gets_a_5xx_from_any_operation(walk_env):
    summary = _walk(walk_env)
    assert summary["server_errors"] == [], "\n".join(summary["server_errors"])
    assert summary["not_json"] == [], "\n".join(summary["not_json"][:50])
    # The walk reached every operation, each several hundred ways, and every console route signed in.
    assert set(summary["operations"]) == _operations()
    assert summary["requests"] > 100 * len(summary["operations"])
    # A persona refused an operation outright skips its malformed queries and bodies (they meet only the
    # shared validation and the refusal): at least one persona took every operation's whole walk.
    refused_by_all = [op for op in summary["operations"] if all(f"{r} {op}" in summary["refused"] for r in ROLES)]
    assert refused_by_all == []
    assert set(summary["routes"]) == _routes()
    assert summary["sent_to_login"] == 0, "a signed-in walk was sent to the login page: it tested nothing"


def test_the_walk_reports_an_operation_that_fails_with_a_5xx(walk_env):
    summary = _walk(walk_env, "--only", "{assistant_id}/graph", "--break-drawing")
    assert summary["operations"] == ["GET /lg/assistants/{assistant_id}/graph"]
    assert summary["server_errors"], "the broken drawing answered without a 5xx"
    # Only the drawing's own answers: a malformed id or parameter is refused before it is drawn.
    elsewhere = [e for e in summary["server_errors"] if not e.startswith("500 ") or "/loan_approval/graph" not in e]
    assert not elsewhere, elsewhere
