"""A worker's database sessions end when they sit idle inside a transaction (runtime/sessions.py).

A worker cut off from PostgreSQL mid-transaction otherwise holds its locks (the thread row of a fenced
checkpoint write, an audit chain's lock) against the worker that takes its run over, until the server
notices the dead peer. Each process kind is started as its own interpreter, as ``celery worker`` and
daphne start them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import scaled, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("live_db")]

ROOT = Path(__file__).resolve().parents[2]

WORKER_START = (
    "import django\n"
    "django.setup()\n"  # what the worker's Django fixup has done by worker_init
    "from console.celery import app\n"
    "app.finalize()\n"
    "from celery.signals import worker_init\n"
    "for receiver, result in worker_init.send(sender=None):\n"
    "    assert not isinstance(result, Exception), (receiver, result)\n"
)
SHOW = (
    "from django.db import connection\n"
    "from runtime.checkpointer import checkpointer_pool\n"
    "with connection.cursor() as c:\n"
    "    c.execute('SHOW idle_in_transaction_session_timeout')\n"
    "    print('django', c.fetchone()[0])\n"
    "with checkpointer_pool().connection() as conn:\n"
    "    print('checkpointer', conn.execute('SHOW idle_in_transaction_session_timeout').fetchone()['idle_in_transaction_session_timeout'])\n"  # noqa: E501
)


def _start(code: str, **env: str) -> subprocess.Popen[str]:
    db = connection.settings_dict
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
            **env,
        },
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _shown(code: str, **env: str) -> dict[str, str]:
    proc = _start(code, **env)
    out, err = proc.communicate(timeout=scaled(60))
    assert proc.returncode == 0, err[-2000:]
    return dict(line.split(" ", 1) for line in out.strip().splitlines()[-2:])


def test_a_workers_sessions_and_its_checkpointers_carry_the_limit():
    shown = _shown(WORKER_START + SHOW, GATEHOUSE_WORKER_IDLE_IN_TRANSACTION_SECONDS="7")
    assert shown == {"django": "7s", "checkpointer": "7s"}


def test_the_web_process_streams_exports_in_transactions_without_the_limit():
    assert _shown("import console.asgi\n" + SHOW) == {"django": "0", "checkpointer": "0"}


def test_postgresql_ends_a_worker_session_left_idle_in_a_transaction():
    code = WORKER_START + (
        "import sys\n"
        "from django.db import connection, transaction\n"
        "with transaction.atomic():\n"
        "    with connection.cursor() as c:\n"
        "        c.execute('SELECT pg_backend_pid()')\n"
        "        print(c.fetchone()[0], flush=True)\n"
        "    sys.stdin.readline()\n"  # a worker cut off mid-transaction: nothing more comes from it
    )
    proc = _start(code, GATEHOUSE_WORKER_IDLE_IN_TRANSACTION_SECONDS="0.5")
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())

        def session_gone() -> bool:
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
                return cursor.fetchone()[0] == 0

        wait_for(session_gone, timeout=30, what="PostgreSQL to end the session idle in its transaction")
    finally:
        proc.kill()
        proc.communicate(timeout=scaled(30))
