"""Run a script on an embedded (SQLite) Gatehouse in a subprocess, for the code paths that differ by database.

The suite's own process is configured for PostgreSQL (settings are read once per process); a probe
gets a fresh ``GATEHOUSE_VAR_DIR`` (so a new SQLite database, which it migrates itself) and prints
its findings as JSON on its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import scaled

ROOT = Path(__file__).resolve().parent.parent


def sqlite_probe(script: str, var_dir: Path) -> Any:
    """What ``script`` printed last, parsed as JSON; the probe's failure is the test's, with its stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(GATEHOUSE_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="console.settings", PYTHONPATH=str(ROOT))
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
