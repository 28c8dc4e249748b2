"""Production settings pass Django's deployment checks; the Compose stack has every service it needs.

Settings are read once per process, so each case runs ``manage.py`` in a
subprocess with a clean production environment (none of the test settings'
variables leak in).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import scaled

ROOT = Path(__file__).resolve().parent.parent
KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")


def _production_env(tmp_path: Path, **overrides: str | None) -> dict[str, str]:
    env = {k: os.environ[k] for k in KEEP if k in os.environ}
    env.update(
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres",
        REDIS_URL="redis://127.0.0.1:6379/15",
        SECRET_KEY=secrets.token_urlsafe(64),
        ALLOWED_HOSTS="gatehouse.example.com",
        GATEHOUSE_VAR_DIR=str(tmp_path / "var"),
        PYTHONWARNINGS="default",
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120)
    )


@pytest.mark.slow
def test_production_settings_pass_the_deployment_checks(tmp_path):
    env = _production_env(tmp_path)
    before = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert before.returncode != 0 and "collectstatic --noinput" in before.stderr  # every page would be a 500
    assert _manage(env, "collectstatic", "--noinput", "-v", "0").returncode == 0

    result = _manage(env, "check", "--deploy", "--fail-level", "WARNING")

    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "System check identified no issues" in result.stdout, output
    assert "WARNING" not in output.upper(), output


@pytest.mark.slow
def test_the_secret_key_can_come_from_a_mounted_file(tmp_path):
    key_file = tmp_path / "secret_key"
    key_file.write_text(secrets.token_urlsafe(64) + "\n")
    env = _production_env(tmp_path, SECRET_KEY=None, SECRET_KEY_FILE=str(key_file))
    assert _manage(env, "collectstatic", "--noinput", "-v", "0").returncode == 0

    result = _manage(env, "check", "--deploy", "--fail-level", "WARNING")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.slow
def test_production_mode_without_a_secret_key_refuses_to_start(tmp_path):
    result = _manage(_production_env(tmp_path, SECRET_KEY=None), "check")

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "SECRET_KEY" in result.stderr
    assert not (tmp_path / "var" / "secret_key").exists()  # no silent fallback to a generated key


def test_the_compose_stack_defines_every_service_with_its_dependencies():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]

    assert {"postgres", "redis", "migrate", "web", "worker", "beat", "fakebank"} <= set(services)
    redis_command = " ".join(services["redis"]["command"])
    assert "--maxmemory-policy noeviction" in redis_command
    assert "--appendonly yes" in redis_command
    assert "healthcheck" in services["postgres"] and "healthcheck" in services["redis"]
    for name in ("web", "worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
        assert depends["postgres"]["condition"] == "service_healthy", name
        assert depends["redis"]["condition"] == "service_healthy", name
    assert services["migrate"]["command"][-2:] == ["migrate", "--noinput"]
    assert "--pool=threads" in services["worker"]["command"]


_PREPARED_PROBE = """
from django.db import connection
from runtime import rows
for value in (1, 2):
    with rows.fixed_cursor() as cursor:
        cursor.execute("SELECT %s::int AS prepared_probe", [value])
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%%prepared_probe%%'")
    print("PREPARED", cursor.fetchone()[0])
"""


@pytest.mark.slow
@pytest.mark.parametrize("setting,prepared", [(None, 1), ("true", 1), ("false", 0)])
def test_prepared_statements_can_be_turned_off_for_a_pooler(tmp_path, setting, prepared):
    env = _production_env(tmp_path, GATEHOUSE_DB_PREPARED_STATEMENTS=setting)
    result = _manage(env, "shell", "-c", _PREPARED_PROBE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"PREPARED {prepared}" in result.stdout, result.stdout + result.stderr


@pytest.mark.slow
def test_a_command_without_its_database_says_so_in_one_line(tmp_path):
    """A command run while PostgreSQL is unreachable ended in a traceback after the pool's timeout (an
    operator saw psycopg_pool internals); it is one line naming DATABASE_URL and a non-zero exit."""
    from tests.conftest import free_port

    env = _production_env(
        tmp_path,
        DATABASE_URL=f"postgres://postgres:s3cret-pw@127.0.0.1:{free_port()}/gatehouse",
        GATEHOUSE_DB_POOL_TIMEOUT="1",
    )
    done = _manage(env, "user_list")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("CommandError")]
    assert len(lines) == 1 and "the database cannot be reached (DATABASE_URL)" in lines[0], done.stderr
    assert "s3cret-pw" not in done.stderr
