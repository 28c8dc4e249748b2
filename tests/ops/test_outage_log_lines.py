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


@pytest.mark.parametrize("log_format", ["json", "plain"])
def test_health_check_writes_one_line_while_the_database_is_down(log_format):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        DATABASE_URL=f"postgres://gatehouse:{PASSWORD}@127.0.0.1:{_closed_port()}/gatehouse",
        GATEHOUSE_LOG_FORMAT=log_format,
        GATEHOUSE_DB_POOL_TIMEOUT="3",
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "health_check", "--component", "worker"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120),
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("CommandError: unhealthy:") and "psycopg.pool" not in done.stderr
    assert PASSWORD not in done.stderr + done.stdout
