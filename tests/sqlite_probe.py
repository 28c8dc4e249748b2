"""Run a script on an embedded (SQLite) Gatehouse in a subprocess, for the code paths that differ by database.

The suite's own process is configured for PostgreSQL (settings are read once per process); a probe
gets a ``GATEHOUSE_VAR_DIR`` of its own, whose SQLite database starts as a copy of one migrated once per
test process (``sqlite_migrated``: migrating from nothing costs a loaded machine ~6 s of CPU, and the
suite did it for every probe and embedded stack). A probe still runs ``migrate`` itself, which then finds
nothing to do; it prints its findings as JSON on its last line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import scaled

ROOT = Path(__file__).resolve().parent.parent
_migrated: list[Path] = []  # this test process's migrated database, once made


def _sqlite_env(var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(GATEHOUSE_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="console.settings", PYTHONPATH=str(ROOT))
    return env


def sqlite_migrated() -> Path:
    """An embedded database that ``manage.py migrate`` brought up to date, made afresh by this test process
    the first time it is asked for (in the session's var dir: never one an older checkout left there)."""
    if not _migrated:
        var = Path(os.environ["GATEHOUSE_VAR_DIR"]) / "sqlite-migrated"
        shutil.rmtree(var, ignore_errors=True)
        var.mkdir(parents=True)
        sqlite_manage(var, "migrate", "--no-input", timeout=scaled(300))
        _migrated.append(var / "gatehouse.sqlite3")
    return _migrated[0]


def sqlite_manage(var_dir: Path, *args: str, timeout: float | None = None) -> str:
    """``manage.py *args`` on ``var_dir``'s embedded database; its standard output. A failure is the test's.
    ``timeout``: already scaled (default ``scaled(120)``)."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_sqlite_env(var_dir),
        capture_output=True,
        text=True,
        timeout=scaled(120) if timeout is None else timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def sqlite_migrated_copy(var_dir: Path) -> None:
    """Start ``var_dir``'s embedded database as a copy of ``sqlite_migrated()``; the checkpoints, the store
    and the secret key stay the var dir's own (made when its processes first need them)."""
    migrated = sqlite_migrated()
    var_dir.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):  # a WAL the migrating process left, if any, with its database
        source = migrated.with_name(migrated.name + suffix)
        if source.exists():
            shutil.copy2(source, var_dir / source.name)  # its mode too: 0600, as the console makes it


def sqlite_probe(script: str, var_dir: Path) -> Any:
    """What ``script`` printed last, parsed as JSON; the probe's failure is the test's, with its stderr."""
    sqlite_migrated_copy(var_dir)
    env = _sqlite_env(var_dir)
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(180),
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# The opening of a probe that calls the API as an admin: the fresh database migrated, Django's test ``Client``
# imported, and ``headers`` carrying an admin's API token.
ADMIN_PROBE = """
import json
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from django.test import Client
from approvals.roles import roles_ensure
from approvals.tokens import token_issue

admin = get_user_model().objects.create_user("admin")
admin.groups.add(roles_ensure()["admin"])
headers = {"Authorization": "Bearer " + token_issue(user=admin)}
"""
