"""On a terminal, a command's success is not styled as an error: ``audit_export`` wrote its summary, and
``user_create`` its "created …" line, with stderr's own style, ERROR (bold red), so a good export or the
first admin's creation looked like a failure. Refusals stay red."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, scaled
from tests.embedded.conftest import embedded_env
from tests.sqlite_probe import sqlite_migrated_copy

pytestmark = pytest.mark.slow

RED = "\x1b[31;1m"  # django.core.management.color: ERROR


def _on_a_terminal(env: dict[str, str], *args: str) -> tuple[int, str]:
    """Run ``manage.py`` with stdout and stderr on a pseudo-terminal (Django colours only when stdout is one):
    (exit status, what the terminal shows)."""
    main, secondary = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            stdout=secondary,
            stderr=secondary,
            timeout=scaled(120),
        )
        os.close(secondary)
        shown = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other end is closed and everything was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main)
    return done.returncode, shown.decode(errors="replace")


def test_audit_export_summary_is_not_red_on_a_terminal_and_its_refusal_is(tmp_path: Path) -> None:
    env = embedded_env(tmp_path / "var", DJANGO_SETTINGS_MODULE="console.settings", TERM="xterm")
    sqlite_migrated_copy(tmp_path / "var")  # the commands' output is the subject, not a first migrate
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=scaled(300),
    )
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    status, shown = _on_a_terminal(env, "audit_export", "--output", str(tmp_path / "audit.jsonl"), "--no-progress")
    assert status == 0, shown
    [summary] = [line for line in shown.splitlines() if "exported " in line]
    assert RED not in summary, repr(summary)
    status, shown = _on_a_terminal(env, "audit_export", "--no-progress")
    assert status == 1 and RED + "CommandError: --output FILE is required" in shown, repr(shown)
    status, shown = _on_a_terminal(env, "user_create", "first", "--role", "admin")
    assert status == 0, shown
    [created] = [line for line in shown.splitlines() if "created first" in line]
    assert RED not in created, repr(created)
    status, shown = _on_a_terminal(
        env, "webhook_endpoint_create", "kyc-vendor", "--graph", "kyc_onboarding", "--gate", "identity_check"
    )
    assert status == 0, shown
    [endpoint] = [line for line in shown.splitlines() if "endpoint kyc-vendor" in line]
    assert RED not in endpoint, repr(endpoint)
