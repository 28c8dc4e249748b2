"""Long commands draw progress on a terminal, stay quiet in logs, and exit non-zero when they report errors."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import uuid

import pytest
from django.db import connection, transaction

from approvals.audit import audit_record
from tests.conftest import ROOT, scaled, worker_env
from tests.storage.test_retention import _thread_with_history

pytestmark = pytest.mark.usefixtures("live_db")


def _env(bank) -> dict[str, str]:
    return {**worker_env(bank), "COLUMNS": "100"}


def _run(env: dict[str, str], *args: str, tty: bool) -> tuple[int, str, str]:
    """``manage.py args``: (exit status, stdout, stderr), stderr on a pseudo-terminal when ``tty``."""
    command = [sys.executable, "manage.py", *args]
    if not tty:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120))
        return result.returncode, result.stdout, result.stderr
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a terminal has a size
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], scaled(120))
        if not ready:
            proc.kill()
            raise AssertionError(f"no output for {scaled(120):g} s")
        try:
            data = os.read(leader, 4096)
        except OSError:  # the follower side closed: the command exited
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    proc.wait(timeout=scaled(30))
    return proc.returncode, stdout, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_audit_export_draws_progress_only_on_a_terminal(bank, tmp_path):
    env = _env(bank)
    target = tmp_path / "audit.jsonl"

    status, _, logged = _run(env, "audit_export", "--output", str(target), tty=False)
    assert status == 0, logged
    assert "\r" not in logged and "%" not in logged  # no bar in a log
    assert logged.startswith("exported ")  # the one summary line stays

    status, _, terminal = _run(env, "audit_export", "--output", str(target), tty=True)
    assert status == 0, terminal
    assert "exporting" in terminal and "event" in terminal and "100%" in terminal


@pytest.mark.slow
def test_checkpoints_prune_draws_progress_only_on_a_terminal(bank):
    thread, _ = _thread_with_history()
    env = _env(bank)

    status, out, logged = _run(env, "checkpoints_prune", "--dry-run", "--graph", thread.graph, tty=False)
    assert status == 0 and logged == "", logged  # no bar in a log
    assert "would delete" in out

    status, out, terminal = _run(env, "checkpoints_prune", "--dry-run", "--graph", thread.graph, tty=True)
    assert status == 0, terminal
    assert "pruning" in terminal and "1/1" in terminal


@pytest.mark.slow
def test_checkpoints_prune_exits_non_zero_when_a_thread_fails(bank):
    thread, _ = _thread_with_history()
    doomed = str(thread.pk)
    trigger = f"ops_refuse_{uuid.uuid4().hex[:8]}"
    # The database refuses to delete this thread's checkpoints, as a revoked privilege or a lock timeout would.
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE FUNCTION {trigger}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF OLD.thread_id = '{doomed}' THEN RAISE EXCEPTION 'refused by test'; END IF; RETURN OLD; END $$"
        )
        cursor.execute(
            f"CREATE TRIGGER {trigger} BEFORE DELETE ON checkpoints FOR EACH ROW EXECUTE FUNCTION {trigger}()"
        )
    try:
        status, out, err = _run(_env(bank), "checkpoints_prune", "--graph", thread.graph, tty=False)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER {trigger} ON checkpoints")
            cursor.execute(f"DROP FUNCTION {trigger}()")

    assert status == 1, out + err
    assert f"failed: {doomed}" in err
    assert "1 thread(s) could not be pruned" in err


@pytest.mark.slow
def test_audit_verify_exits_non_zero_on_a_break_and_shows_progress_on_a_terminal(bank):
    env = _env(bank)
    status, out, terminal = _run(env, "audit_verify", tty=True)
    assert status == 0, terminal
    assert "intact" in out
    assert "verifying" in terminal

    with transaction.atomic():
        event = audit_record(actor=None, actor_label="ops", action="test.event", subject_type="test", subject_id="ops")
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")  # a superuser switching the trigger off
        cursor.execute("UPDATE approvals_auditevent SET details = %s WHERE id = %s", ['{"forged": 1}', event.pk])
        cursor.execute("SET session_replication_role = origin")
    try:
        status, out, err = _run(env, "audit_verify", tty=False)
        assert status == 1
        assert f"BROKEN at event #{event.pk}" in err
        assert "verifying" not in err
    finally:
        # Later tests need an intact chain again: put the original contents back.
        with connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = replica")
            cursor.execute("UPDATE approvals_auditevent SET details = %s WHERE id = %s", ["{}", event.pk])
            cursor.execute("SET session_replication_role = origin")
    assert _run(env, "audit_verify", tty=False)[0] == 0
