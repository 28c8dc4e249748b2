"""Threats at the small edges: a websocket opened from another origin, secrets left readable on disk."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client, override_settings

from console.asgi import application
from tests.conftest import scaled

pytestmark = pytest.mark.usefixtures("live_db")

ROOT = Path(__file__).resolve().parents[2]


def _handshake(origin: str | None, host: str, *, cookie: str = "", scheme: str = "ws", **headers: str) -> Any:
    """Open /ws/inbox/ the way a browser on ``origin`` would; the handshake's outcome."""

    async def run() -> Any:
        sent = [(b"host", host.encode())]
        if origin is not None:
            sent.append((b"origin", origin.encode()))
        if cookie:
            sent.append((b"cookie", cookie.encode()))
        sent += [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
        communicator = WebsocketCommunicator(application, "/ws/inbox/", headers=sent)
        communicator.scope["scheme"] = scheme
        connected, code = await communicator.connect(timeout=scaled(5))
        await communicator.disconnect()
        return connected, code

    return asyncio.run(run())


@pytest.fixture
def cookie(personas: dict[str, Any]) -> str:
    client = Client()
    client.force_login(personas["reviewer"].user)
    return f"sessionid={client.cookies['sessionid'].value}"


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost:9999",  # another service on the same machine
        "https://localhost:8000",  # same host and port, another scheme
        "http://localhost",  # the default port is a different port
        "http://127.0.0.1:8000",  # an allowed host, but not the one serving this page
        "null",
        None,
    ],
)
def test_a_websocket_from_another_origin_than_the_console_is_refused(origin, cookie):
    connected, _ = _handshake(origin, "localhost:8000", cookie=cookie)
    assert not connected


def test_a_websocket_from_the_console_itself_is_accepted(cookie):
    assert _handshake("http://localhost:8000", "localhost:8000", cookie=cookie)[0]
    assert _handshake("https://localhost", "localhost", cookie=cookie, scheme="wss")[0]


def test_a_host_outside_allowed_hosts_cannot_vouch_for_itself(cookie):
    assert not _handshake("http://evil.example:8000", "evil.example:8000", cookie=cookie)[0]


def test_behind_a_tls_proxy_the_forwarded_scheme_counts(cookie):
    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        assert _handshake("https://localhost", "localhost", cookie=cookie, x_forwarded_proto="https")[0]
        assert not _handshake("http://localhost", "localhost", cookie=cookie, x_forwarded_proto="https")[0]


@override_settings(CSRF_TRUSTED_ORIGINS=["https://console.example.com", "https://*.corp.example"])
def test_trusted_origins_match_scheme_host_and_port(cookie):
    assert _handshake("https://console.example.com", "localhost:8000", cookie=cookie)[0]
    assert _handshake("https://a.corp.example", "localhost:8000", cookie=cookie)[0]
    assert not _handshake("http://console.example.com", "localhost:8000", cookie=cookie)[0]
    assert not _handshake("https://console.example.com:8443", "localhost:8000", cookie=cookie)[0]
    assert not _handshake("https://corp.example.evil", "localhost:8000", cookie=cookie)[0]


PROBE = """
import json, os, sqlite3
import django
django.setup()
from django.conf import settings
from django.db import connection
from runtime.checkpointer import checkpointer_get
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE probe (x integer)")
    cursor.execute("INSERT INTO probe VALUES (1)")
saver = checkpointer_get()
saver.conn.execute("CREATE TABLE IF NOT EXISTS probe (x integer)")
saver.conn.execute("INSERT INTO probe VALUES (1)")
saver.conn.commit()
from console.celery import app
app.send_task("probe.nothing")  # a message in the SQLite broker: its -wal file appears
var = settings.VAR_DIR
paths = [var, var / "secret_key"]
paths += [p for p in var.iterdir() if ".sqlite3" in p.name]
print(json.dumps({str(p.relative_to(var.parent)): os.stat(p).st_mode & 0o777 for p in paths}))
"""


@pytest.mark.slow
def test_embedded_mode_keeps_the_secret_key_and_databases_owner_only(tmp_path):
    """Under the common umask 022, nothing under var/ may be readable by other users."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")}
    env.update(DJANGO_SETTINGS_MODULE="console.settings", GATEHOUSE_VAR_DIR=str(tmp_path / "var"))
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        preexec_fn=lambda: os.umask(0o022),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    modes = json.loads(result.stdout.strip().splitlines()[-1])

    assert modes.pop("var") == 0o700
    assert modes.pop("var/secret_key") == 0o600
    assert {"var/gatehouse.sqlite3", "var/gatehouse.sqlite3-wal", "var/checkpoints.sqlite3"} <= set(modes)
    assert {"var/broker.sqlite3", "var/broker.sqlite3-wal"} <= set(modes)
    assert {name: oct(mode) for name, mode in modes.items() if mode != 0o600} == {}
    assert stat.S_IMODE((tmp_path / "var" / "secret_key").stat().st_mode) == 0o600


@pytest.mark.slow
def test_a_world_readable_file_left_by_an_older_version_is_tightened(tmp_path):
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    (var / "secret_key").write_text("an-old-key")
    (var / "gatehouse.sqlite3").write_bytes(b"")
    for path in (var / "secret_key", var / "gatehouse.sqlite3"):
        path.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")}
    env.update(DJANGO_SETTINGS_MODULE="console.settings", GATEHOUSE_VAR_DIR=str(var))
    probe = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "an-old-key"
    assert stat.S_IMODE(var.stat().st_mode) == 0o700
    assert stat.S_IMODE((var / "secret_key").stat().st_mode) == 0o600
    assert stat.S_IMODE((var / "gatehouse.sqlite3").stat().st_mode) == 0o600
