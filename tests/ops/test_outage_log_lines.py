"""While the database is down a command or request writes the one line the docs promise, not one per pool attempt.

``manage.py health_check --component worker`` wrote 16 lines to stderr (15 psycopg.pool warnings: "error
connecting in 'pool-1'", "reconnection attempt … failed") before its own; docs/operations.md says one line.
The database here is down for real: a port nothing listens on.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT, scaled

PASSWORD = "s3cret-never-logged"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _database_down(log_format: str, *, pool_timeout: int) -> dict[str, str]:
    """The production settings' environment, its database a port nothing listens on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        DATABASE_URL=f"postgres://gatehouse:{PASSWORD}@127.0.0.1:{_closed_port()}/gatehouse",
        GATEHOUSE_LOG_FORMAT=log_format,
        GATEHOUSE_DB_POOL_TIMEOUT=str(pool_timeout),
    )
    return env


@pytest.mark.parametrize("log_format", ["json", "plain"])
def test_health_check_writes_one_line_while_the_database_is_down(log_format):
    env = _database_down(log_format, pool_timeout=3)
    done = subprocess.run(
        [sys.executable, "manage.py", "health_check", "--component", "worker"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120),
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("CommandError: unhealthy:") and "psycopg.pool" not in done.stderr
    assert PASSWORD not in done.stderr + done.stdout


@pytest.mark.parametrize("log_format", ["json", "plain"])
def test_each_periodic_task_logs_one_line_while_the_database_is_down(log_format):
    """An outside SRE stopped PostgreSQL under the workers: every run of every sweep (and each webhook attempt)
    was logged by Celery at ERROR with a traceback. Each now logs one WARNING line and returns; beat runs it
    again. Run here as the worker runs their bodies, against a port nothing listens on."""
    env = _database_down(log_format, pool_timeout=1)
    code = (
        "import django; django.setup()\n"
        "from approvals.tasks import anchor_audit, sweep_deadlines\n"
        "from approvals.outbound.tasks import deliver_webhook, sweep_webhooks\n"
        "from runtime.tasks import prune_checkpoints, sweep_runs\n"
        "for task, args in ((sweep_runs, ()), (sweep_webhooks, ()), (sweep_deadlines, ()), (anchor_audit, ()),\n"
        "                   (prune_checkpoints, ()), (deliver_webhook, (1,))):\n"
        "    assert task(*args) is None\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 6, done.stderr
    for line, task in zip(lines, ("sweep_runs", "sweep_webhooks", "sweep_deadlines", "anchor_audit",
                                  "prune_checkpoints", "deliver_webhook"), strict=True):  # fmt: skip
        assert "WARNING" in line and f"{task} skipped, the database is unavailable" in line, line
    assert "Traceback" not in done.stderr and PASSWORD not in done.stderr + done.stdout
