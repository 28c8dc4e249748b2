"""Production settings that used to bite: S3 blob storage, the checkpointer's connection string,
a missing REDIS_URL, the recovery clocks, static files, and the Compose/Dockerfile shape.

Settings are read once per process, so settings built from an environment run in a subprocess
(``manage.py`` or a short script using Django's test client) against the session's database.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest
import yaml
from django.core.checks import run_checks
from django.db import connection
from psycopg.conninfo import conninfo_to_dict

from runtime.checkpointer import checkpointer_conninfo
from tests.conftest import scaled
from tests.test_deploy_settings import _manage, _production_env

ROOT = Path(__file__).resolve().parent.parent.parent


def _session_database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


# Every log record of the script's process, as text in ``captured`` (``_script(..., log_captured=True)``).
LOG_CAPTURE = """
import io, logging
captured = io.StringIO()
_handler = logging.StreamHandler(captured)
_handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
logging.getLogger().addHandler(_handler)
"""


def _script(env: dict[str, str], body: str, *, log_captured: bool = False) -> dict:
    """Run ``body`` after django.setup() under ``env``; it prints one JSON object as its last line."""
    code = "import django, json\ndjango.setup()\n" + (LOG_CAPTURE if log_captured else "") + textwrap.dedent(body)
    env = {**env, "DJANGO_SETTINGS_MODULE": "console.settings"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(180)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


S3_ENV = {
    "GATEHOUSE_BLOB_STORAGE": "s3",
    "GATEHOUSE_BLOB_S3_BUCKET": "gatehouse-blobs",
    "GATEHOUSE_BLOB_S3_REGION": "eu-west-1",
}

RENDER_A_PAGE = """
from django.conf import settings
from django.core.management import call_command
from django.test import Client

call_command("collectstatic", "--noinput", verbosity=0)
client = Client()
page = client.get("/accounts/login/", secure=True, headers={"host": "gatehouse.example.com"})
html = page.content.decode()
css = re.search(r'/static/console/console\\.[0-9a-f]{12}\\.css', html)
headers = {"host": "gatehouse.example.com", "accept-encoding": "gzip"}
asset = client.get(css.group(0), secure=True, headers=headers) if css else None
print(json.dumps({
    "storages": sorted(settings.STORAGES),
    "status": page.status_code,
    "css": css.group(0) if css else None,
    "asset_status": asset.status_code if asset else None,
    "asset_encoding": asset.get("Content-Encoding") if asset else None,
    "asset_cache": asset.get("Cache-Control") if asset else None,
}))
"""


@pytest.mark.slow
def test_s3_blob_storage_keeps_the_default_and_static_storages_and_pages_render(tmp_path, live_db):
    env = _production_env(tmp_path, DATABASE_URL=_session_database_url(), **S3_ENV)

    result = _script(env, "import re\n" + RENDER_A_PAGE)  # collects the static files first
    check = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert check.returncode == 0, check.stdout + check.stderr

    assert result["storages"] == ["default", "gatehouse_blobs", "staticfiles"]
    assert result["status"] == 200
    # Production static files: content-hashed names, compressed, cached for good.
    assert result["css"] is not None
    assert result["asset_status"] == 200
    assert result["asset_encoding"] == "gzip"
    assert "immutable" in result["asset_cache"]


@pytest.mark.slow
def test_embedded_mode_serves_static_files_with_debug_off_and_no_collectstatic(tmp_path):
    env = {k: v for k, v in _production_env(tmp_path).items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DEBUG="false", ALLOWED_HOSTS="testserver")
    result = _script(
        env,
        """
        from django.conf import settings
        from django.test import Client
        client = Client()
        print(json.dumps({
            "debug": settings.DEBUG,
            "css": client.get("/static/console/console.css").status_code,
            "swagger": client.get("/static/ninja/swagger-ui-bundle.js").status_code,
        }))
        """,
    )
    assert result == {"debug": False, "css": 200, "swagger": 200}


@pytest.mark.slow
def test_production_mode_without_redis_refuses_to_start(tmp_path):
    result = _manage(_production_env(tmp_path, REDIS_URL=None), "check")

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "REDIS_URL" in result.stderr
    assert not (tmp_path / "var" / "broker").exists()  # no silent per-container filesystem broker


def test_the_checkpointer_connects_with_every_database_option_and_an_awkward_password(live_db):
    db = {
        **connection.settings_dict,
        "PASSWORD": "correct horse 'battery' \\staple",
        "OPTIONS": {
            **connection.settings_dict.get("OPTIONS", {}),
            "sslmode": "disable",
            "sslrootcert": "/etc/ssl/certs/gatehouse-db-root.crt",
            "options": "-c application_name=gatehouse-ops-conninfo -c statement_timeout=4321",
            "isolation_level": psycopg.IsolationLevel.READ_COMMITTED,  # Django's own: not a libpq keyword
        },
    }

    conninfo = checkpointer_conninfo(db)

    parsed = conninfo_to_dict(conninfo)
    assert parsed["password"] == "correct horse 'battery' \\staple"
    assert parsed["sslmode"] == "disable"
    assert parsed["sslrootcert"] == "/etc/ssl/certs/gatehouse-db-root.crt"
    assert "isolation_level" not in parsed and "pool" not in parsed
    with psycopg.connect(conninfo) as conn:  # PostgreSQL here trusts local users: the password is not checked
        assert conn.execute("SELECT current_setting('application_name')").fetchone()[0] == "gatehouse-ops-conninfo"
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "4321ms"
        assert conn.execute("SELECT current_database()").fetchone()[0] == db["NAME"]


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({}, set()),
        ({"GATEHOUSE_SWEEP_SECONDS": 90.0}, {"gatehouse.W001", "gatehouse.W002"}),
        ({"GATEHOUSE_SWEEP_SECONDS": 20.0, "GATEHOUSE_REDISPATCH_AFTER_SECONDS": 10.0}, {"gatehouse.W002"}),
        ({"CELERY_BROKER_TRANSPORT_OPTIONS": {"visibility_timeout": 300}}, {"gatehouse.W003"}),
    ],
    ids=["defaults", "sweep-slower-than-lease", "sweep-slower-than-redispatch", "short-visibility-timeout"],
)
def test_the_recovery_clocks_are_checked(settings, overrides, expected):
    settings.GATEHOUSE_LEASE_SECONDS = 60.0
    settings.GATEHOUSE_SWEEP_SECONDS = 15.0
    settings.GATEHOUSE_REDISPATCH_AFTER_SECONDS = 30.0
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
    for name, value in overrides.items():
        setattr(settings, name, value)

    found = {m.id for m in run_checks() if (m.id or "").startswith("gatehouse.")}

    assert found == expected


MANIFEST_STORAGE = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"},
}


def test_the_deploy_check_fails_until_the_static_files_are_collected(settings, tmp_path):
    """Production without Docker: migrate, then daphne, and every console page was a 500 ("Missing
    staticfiles manifest entry") while `check --deploy --fail-level WARNING` said no issues."""
    from django.core.management import call_command

    from console.checks import static_manifest_check

    settings.STORAGES = MANIFEST_STORAGE
    settings.STATIC_ROOT = tmp_path / "static"

    missing = static_manifest_check()
    assert [m.id for m in missing] == ["gatehouse.E001"]
    assert "collectstatic --noinput" in (missing[0].hint or "")
    assert static_manifest_check not in _registered(deploy=False)  # collectstatic and migrate run the others

    call_command("collectstatic", "--noinput", verbosity=0)
    assert static_manifest_check() == []

    manifest = settings.STATIC_ROOT / "staticfiles.json"
    stale = json.loads(manifest.read_text())
    del stale["paths"]["console/favicon.svg"]  # collected from another version
    manifest.write_text(json.dumps(stale))
    outdated = static_manifest_check()
    assert [m.id for m in outdated] == ["gatehouse.E002"]
    assert "console/favicon.svg" in outdated[0].msg


def test_the_deploy_check_fails_when_a_collected_file_changed_since(settings, tmp_path):
    """An upgrade changed console.css, nobody ran collectstatic: the manifest still named the old hashed file,
    the console served the old stylesheet, and the deploy check passed (it looked only for missing names)."""
    from django.core.management import call_command

    from console.checks import static_manifest_check

    settings.STORAGES = MANIFEST_STORAGE
    settings.STATIC_ROOT = tmp_path / "static"
    call_command("collectstatic", "--noinput", verbosity=0)
    assert static_manifest_check() == []

    # What collectstatic left from the version before: its console.css, and the manifest naming that file.
    old = b"body { color: black; }\n"
    old_name = "console/console.0a1b2c3d4e5f.css"
    (settings.STATIC_ROOT / "console" / "console.css").write_bytes(old)
    (settings.STATIC_ROOT / old_name).write_bytes(old)
    manifest = settings.STATIC_ROOT / "staticfiles.json"
    stale = json.loads(manifest.read_text())
    stale["paths"]["console/console.css"] = old_name
    manifest.write_text(json.dumps(stale))

    outdated = static_manifest_check()
    assert [m.id for m in outdated] == ["gatehouse.E002"]
    assert "console/console.css" in outdated[0].msg and "older version" in outdated[0].msg


def test_the_static_manifest_is_not_checked_without_hashed_static_files(settings, tmp_path):
    from console.checks import static_manifest_check

    settings.STATIC_ROOT = tmp_path / "nothing-collected"
    assert static_manifest_check() == []  # embedded mode and tests serve from the apps' directories


def _registered(*, deploy: bool) -> list:
    from django.core.checks.registry import registry

    return list(registry.get_checks(include_deployment_checks=deploy))


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)s", str(value))
    assert match, value
    return float(match.group(1))


def test_compose_gives_workers_a_shutdown_grace_below_dockers_kill_timeout_and_health_checks():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    worker = services["worker"]
    configured = worker["environment"]["GATEHOUSE_SHUTDOWN_GRACE_SECONDS"]
    grace = re.fullmatch(r"\$\{GATEHOUSE_SHUTDOWN_GRACE_SECONDS:-(\d+)\}", configured)
    assert grace, configured
    # Hand-back (one UPDATE) and exit need a few seconds before SIGKILL.
    assert float(grace.group(1)) + 5 <= _seconds(worker["stop_grace_period"])

    assert "/health/ready" in " ".join(services["web"]["healthcheck"]["test"])
    for role in ("worker", "beat"):
        assert services[role]["healthcheck"]["test"][-3:] == ["health_check", "--component", role]

    # docs/deploy.md states the same two numbers.
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    assert f"| `GATEHOUSE_SHUTDOWN_GRACE_SECONDS` | `8` (Compose: `{grace.group(1)}`)" in deploy
    assert f"`stop_grace_period: {worker['stop_grace_period']}`" in deploy


def test_the_dockerfile_installs_dependencies_before_the_source_and_has_a_healthcheck():
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    copy_deps = next(i for i, line in enumerate(lines) if line.startswith("COPY pyproject.toml constraints.txt"))
    install = next(i for i, line in enumerate(lines) if "pip install" in line)
    copy_all = next(i for i, line in enumerate(lines) if line.startswith("COPY . ."))
    assert copy_deps < install < copy_all
    healthcheck = next(line for line in lines if line.startswith("HEALTHCHECK"))
    assert "--interval" in healthcheck
    assert any("/health/live" in line for line in lines)


@pytest.mark.slow
def test_the_dockerfiles_collectstatic_step_leaves_only_the_static_files_in_the_image(tmp_path):
    """The step ran in embedded mode (no DATABASE_URL at build) and left empty SQLite files under /app/var.
    Run here as the Dockerfile writes it, with /app and /tmp moved under tmp_path."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    step = next(line for line in text.splitlines() if line.startswith("RUN ") and "collectstatic" in line)
    image_env = dict(re.findall(r"(\w+)=(\S+)", text.split("WORKDIR")[0]))
    command = (
        step.removeprefix("RUN ")
        .replace("/tmp/build-var", str(tmp_path / "build-var"))
        .replace("/app/var", str(tmp_path / "app" / "var"))
        .replace("python manage.py", f"{sys.executable} manage.py")
    )
    (tmp_path / "app" / "var").mkdir(parents=True)  # as the Dockerfile's mkdir before it
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": image_env["DJANGO_SETTINGS_MODULE"],
        "GATEHOUSE_VAR_DIR": str(tmp_path / "app" / "var"),
    }

    done = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120)
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "app" / "var").iterdir()) == ["staticfiles"]
    assert (tmp_path / "app" / "var" / "staticfiles" / "staticfiles.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app"]  # the throwaway var dir is gone


def test_the_secret_key_file_is_never_made_world_readable_in_the_instructions():
    for doc in (".env.example", "docs/deploy.md", "docker-compose.yml"):
        text = (ROOT / doc).read_text()
        assert "chmod 644" not in text and "chmod 600 secrets/secret_key" in text, doc


# Each was accepted, or refused only by a library's traceback that named no variable (docs/deploy.md
# promises a malformed value stops the start naming it).
MALFORMED = [
    ({"DATABASE_URL": "postgres//oops"}, "DATABASE_URL is not a database URL"),
    ({"REDIS_URL": "http://x:1/0"}, "REDIS_URL must start with redis://, rediss://, unix://"),
    ({"GATEHOUSE_DB_POOL_MIN": "10", "GATEHOUSE_DB_POOL_MAX": "4"}, "GATEHOUSE_DB_POOL_MIN (10) must not exceed"),
    ({"LOG_LEVEL": "LOUD"}, "LOG_LEVEL='LOUD' must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "message"), MALFORMED, ids=[next(iter(o)) for o, _ in MALFORMED])
def test_a_malformed_setting_stops_the_start_naming_the_variable(tmp_path, overrides, message):
    result = _manage(_production_env(tmp_path, **overrides), "check")

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]  # one line: the setting, not a crash


@pytest.mark.slow
def test_a_database_url_with_a_password_is_not_repeated_when_refused(tmp_path):
    result = _manage(_production_env(tmp_path, DATABASE_URL="postgres://u:hunter2@db:notaport/x"), "check")

    assert "DATABASE_URL is not a database URL" in result.stderr
    assert "hunter2" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "check_id"),
    [
        ({"GATEHOUSE_WORKER_IDLE_IN_TRANSACTION_SECONDS": "90", "GATEHOUSE_LEASE_SECONDS": "60"}, "gatehouse.W004"),
        ({"ALLOWED_HOSTS": "*"}, "gatehouse.W005"),
        ({"ALLOWED_HOSTS": "gatehouse.example.com,*"}, "gatehouse.W005"),
    ],
)
def test_the_deploy_check_fails_on_settings_the_docs_warn_against(tmp_path, overrides, check_id):
    result = _manage(
        _production_env(tmp_path, GATEHOUSE_STATIC_MANIFEST="false", **overrides),
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
    )

    assert result.returncode != 0
    assert check_id in result.stderr, result.stdout + result.stderr
