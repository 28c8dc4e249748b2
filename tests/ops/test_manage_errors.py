"""``manage.py`` says what went wrong with the database in one line: what SQLite said of the embedded database
("no such table", "database is locked", a read-only file), and "cannot be reached" only when no database
answered (PostgreSQL unreachable: tests/test_deploy_settings.py). Every SQLite error was reported as "the
database cannot be reached", sending an operator to look for a server embedded mode does not have."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, scaled
from tests.embedded.conftest import embedded_env

pytestmark = pytest.mark.slow


def test_an_embedded_database_with_no_tables_says_what_sqlite_said(tmp_path: Path) -> None:
    var = tmp_path / "var"  # never migrated: the file is created empty as the command opens it
    done = subprocess.run(
        [sys.executable, "manage.py", "user_list"],
        cwd=ROOT,
        env=embedded_env(var),
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("CommandError")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"CommandError: the SQLite database {var / 'gatehouse.sqlite3'} answered: no such table: "
    )
    assert "cannot be reached" not in done.stderr
