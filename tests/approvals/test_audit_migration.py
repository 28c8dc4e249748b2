"""Upgrading to chains (migration 0019): the trail from before becomes chain 0 exactly as it was, and verifies with
what is appended after it.

A database of its own, migrated by ``manage.py`` in subprocesses: to 0018, where events are written as the code
before partitioning wrote them (one chain, the newest event overall as the head, no chain or id in the hash),
then to the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.conftest import ROOT, _admin_connection, scaled

pytestmark = pytest.mark.integration  # two full migrations in subprocesses: about a minute


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(600)
    )


def _legacy_hash(fields: dict[str, Any], prev: str) -> str:
    """The hash before partitioning, from the documented format (docs/security-audit.md)."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(f"{prev}|{text}".encode()).hexdigest()


@pytest.fixture
def fresh_database() -> Any:
    name = f"test_gatehouse_upgrade_{os.getpid()}"
    with _admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    db = connection.settings_dict
    yield name, f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
    with _admin_connection() as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_the_trail_from_before_partitioning_becomes_chain_0_unchanged_and_verifies(fresh_database):
    _name, url = fresh_database
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "GATEHOUSE_AUDIT"))}
    env.update(DJANGO_SETTINGS_MODULE="console.settings", DATABASE_URL=url, PYTHONUNBUFFERED="1")
    done = _manage(env, "migrate", "approvals", "0018_bulk_actions", "--noinput")
    assert done.returncode == 0, done.stderr[-3000:]

    with psycopg.connect(url, autocommit=True) as conn:
        columns = {r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns "
                                              "WHERE table_name = 'approvals_auditevent'")}  # fmt: skip
        assert "chain" not in columns
        # The migrations' own events (role definitions), then three more as the old code wrote them.
        prev = conn.execute("SELECT hash FROM approvals_auditevent ORDER BY id DESC LIMIT 1").fetchone()[0]
        for i in range(3):
            at = datetime(2026, 1, 1, 12, 0, i, tzinfo=UTC)
            fields = {"at": at.isoformat(), "actor": "old-code", "action": "test.legacy", "subject": f"test:{i}",
                      "thread": None, "graph": "", "details": {"n": i}}  # fmt: skip
            digest = _legacy_hash(fields, prev)
            conn.execute(
                "INSERT INTO approvals_auditevent (at, actor_label, action, subject_type, subject_id, graph, details, "
                "prev_hash, hash) VALUES (%s, 'old-code', 'test.legacy', 'test', %s, '', %s::jsonb, %s, %s)",
                [at, str(i), json.dumps({"n": i}), prev, digest],
            )
            prev = digest
        before = conn.execute("SELECT id, prev_hash, hash FROM approvals_auditevent ORDER BY id").fetchall()
        assert len(before) > 3
        head_id, head_hash = before[-1][0], before[-1][2]
        conn.execute(
            "INSERT INTO approvals_auditanchor (at, head_id, head_hash, length) VALUES (now(), %s, %s, %s)",
            [head_id, head_hash, len(before)],
        )

    done = _manage(env, "migrate", "--noinput")
    assert done.returncode == 0, done.stderr[-3000:]
    with psycopg.connect(url, autocommit=True) as conn:
        after = conn.execute("SELECT id, prev_hash, hash, chain FROM approvals_auditevent ORDER BY id").fetchall()
        anchors = conn.execute("SELECT chain, head_id FROM approvals_auditanchor").fetchall()
    assert [row[:3] for row in after] == before  # nothing rewritten
    assert {row[3] for row in after} == {0}
    assert anchors == [(0, head_id)]
    assert "intact" in _manage(env, "audit_verify").stdout

    script = (
        "from django.db import transaction\n"
        "from approvals.audit import audit_anchor, audit_record\n"
        "for i in range(3):\n"
        "    with transaction.atomic():\n"
        "        audit_record(actor=None, action='test.after', subject_type='test', subject_id=i)\n"
        "audit_anchor()\n"
    )
    done = _manage(env, "shell", "-c", script)
    assert done.returncode == 0, done.stderr[-3000:]
    verified = _manage(env, "audit_verify")
    assert verified.returncode == 0, verified.stderr
    with psycopg.connect(url, autocommit=True) as conn:
        total = conn.execute("SELECT count(*) FROM approvals_auditevent").fetchone()[0]
        assert total >= len(before) + 3 + 8  # the old trail, three events and one anchor event per chain
        assert f"{total} events in 9 chains" in verified.stdout  # chain 0 and 1..8
        pinned = conn.execute("SELECT head_id FROM approvals_auditanchor WHERE chain = 0 ORDER BY id").fetchall()
        conn.execute("SET session_replication_role = replica")  # the attacker: the old chain's newest row goes
        conn.execute("DELETE FROM approvals_auditevent WHERE id = %s", [head_id])
    assert pinned == [(head_id,), (head_id,)]  # the new round pinned chain 0's head again
    broken = _manage(env, "audit_verify")
    assert broken.returncode == 1 and "TAIL LOST" in broken.stderr and "in chain 0" in broken.stderr
