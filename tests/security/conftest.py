"""Servers for edge tests: daphne on the session's PostgreSQL database, and daphne on a fresh SQLite one.

Both are real ``console.asgi`` processes, so bad input travels the same path as in
production (ASGI, middleware, both NinjaAPIs) and a 500 shows in the server's log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.fakebank import BankServer
from tests.conftest import ROOT, Persona, daphne_start, process_group_stop, scaled, wait_for, worker_env
from tests.sqlite_probe import sqlite_migrated_copy

_SERVER_VARS = ("DATABASE_URL", "REDIS_URL", "GATEHOUSE_QUEUE", "GATEHOUSE_GRAPHS", "SECRET_KEY", "GATEHOUSE_VAR_DIR")

# One process sets up the SQLite side: schema, demo users, an admin token, and a paused
# task to decide (opened through the services by tests.factories: no worker is needed to fuzz it).
_SQLITE_SETUP = """
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth import get_user_model
from approvals.models import GraphAssignment
from approvals.roles import roles_ensure
from approvals.tokens import token_issue
from approvals.inbound.webhooks import webhook_endpoint_create
from runtime.gatekeeper import gate_payload
from tests.factories import task_make
call_command("migrate", verbosity=0, interactive=False)
admin = get_user_model().objects.create_user("fuzz-admin")  # no password: a token is all it needs
admin.groups.add(roles_ensure()["admin"])
GraphAssignment.objects.create(user=admin, graph="*")
payload = gate_payload(title="Loan", summary="fuzz", proposed_action={"name": "disburse", "args": {"amount": 1}},
                       editable=["amount"], sla_seconds=3600, details={})
task = task_make(payload=payload)
endpoint = webhook_endpoint_create(actor=None, name="fuzz", graph="loan_approval", gates=["human_review"])
print(token_issue(user=admin), task.thread_id, task.id, endpoint.secrets[0])
"""


@dataclass
class Server:
    backend: str
    base: str
    token: str
    log: Path
    thread_id: str
    task_id: str
    endpoint: str  # a signed webhook endpoint, and its secret
    secret: str
    database: Path | None = None  # the SQLite file, to count rows from outside the server
    # The only user the fuzz may act on by id: the PostgreSQL server shares the session's database, and
    # an admin's fuzz that deactivated or re-roled a persona broke every later test (401s). "" = none.
    user_id: str = ""

    def client(self, *, token: str | None = None, auth: bool = True) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.token}"} if auth else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=scaled(30))

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _serving(proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            return httpx.get(f"{base}/api/openapi.json", timeout=scaled(2)).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, timeout=40, what="daphne")


def _serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc, base = daphne_start(env, log)
    try:
        _serving(proc, base, log)
    except BaseException:
        process_group_stop(proc)
        raise
    return proc, base


def _stop(proc: subprocess.Popen[bytes]) -> None:
    # Nothing to drain: a graceful daphne shutdown only costs the suite seconds.
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=scaled(10))


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SERVER_VARS and not k.startswith("PYTEST")}
    env.update(DJANGO_SETTINGS_MODULE="console.settings", PYTHONUNBUFFERED="1", GATEHOUSE_PLATFORM_WAIT_SECONDS="1")
    return env


@pytest.fixture(scope="session")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """daphne in embedded mode (SQLite, SQLite broker, no worker) with an admin and a paused task."""
    workdir = tmp_path_factory.mktemp("sqlite-edge")
    env = {
        **_base_env(),
        "GATEHOUSE_VAR_DIR": str(workdir / "var"),
        "GATEHOUSE_GRAPHS": os.environ["GATEHOUSE_GRAPHS"],
        "SECRET_KEY": f"edge-tests-{uuid.uuid4().hex}",  # two processes start at once: no key file to race for
    }
    sqlite_migrated_copy(workdir / "var")  # its setup's migrate then has nothing to do
    setup = subprocess.Popen(
        [sys.executable, "-c", _SQLITE_SETUP],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc, base = daphne_start(env, workdir / "daphne.log")  # imports while the schema is migrated
    try:
        out, err = setup.communicate(timeout=scaled(180))
        assert setup.returncode == 0, err[-3000:]
        _serving(proc, base, workdir / "daphne.log")
    except BaseException:
        process_group_stop(proc)
        raise
    token, thread_id, task_id, secret = out.split()[-4:]
    database = workdir / "var" / "gatehouse.sqlite3"
    yield Server("sqlite", base, token, workdir / "daphne.log", thread_id, task_id, "fuzz", secret, database)
    _stop(proc)


@pytest.fixture(scope="session")
def postgres_server(
    personas: dict[str, Persona], bank: BankServer, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """daphne on this session's PostgreSQL test database, as the admin persona, with a paused task."""
    from django.contrib.auth import get_user_model

    from approvals.inbound.webhooks import webhook_endpoint_create
    from tests.factories import task_make

    env = {**worker_env(bank), "GATEHOUSE_PLATFORM_WAIT_SECONDS": "1"}
    with django_db_blocker.unblock():
        task = task_make()
        endpoint = webhook_endpoint_create(
            actor=None, name=f"fuzz-{uuid.uuid4().hex[:8]}", graph="loan_approval", gates=["human_review"]
        )
        victim = get_user_model().objects.create_user(f"fuzz-victim-{uuid.uuid4().hex[:6]}")
    workdir = tmp_path_factory.mktemp("postgres-edge")
    proc, base = _serve(env, workdir / "daphne.log")
    yield Server(
        "postgres",
        base,
        personas["admin"].token,
        workdir / "daphne.log",
        str(task.thread_id),
        str(task.id),
        endpoint.name,
        endpoint.secrets[0],
        user_id=str(victim.pk),
    )
    _stop(proc)
