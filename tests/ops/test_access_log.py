"""The web process started the documented way (``python -m console.serve``: the image, Compose, docs/deploy.md,
``make run``) with ``GATEHOUSE_LOG_FORMAT=json`` writes only JSON lines: daphne's own access log wrote
``127.0.0.1:41696 - - [05/Dec/2026:23:40:21] "GET /health/ready" 200 336`` to stdout on every request."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from tests.conftest import ROOT, free_port, process_group_stop, scaled, wait_for
from tests.embedded.conftest import embedded_env
from tests.sqlite_probe import sqlite_manage, sqlite_migrated_copy

pytestmark = pytest.mark.slow


def documented_web_command() -> list[str]:
    """The web role's command, as Compose runs it (the image's CMD and docs/deploy.md say the same)."""
    return list(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["web"]["command"])


def test_every_documented_start_of_the_web_process_is_console_serve() -> None:
    command = documented_web_command()
    expected = ["python", "-m", "console.serve", "-b", "0.0.0.0", "-p", "8000", "console.asgi:application"]  # noqa: S104 - the image's bind
    assert command == expected
    dockerfile = (ROOT / "Dockerfile").read_text()
    [cmd] = [line for line in dockerfile.splitlines() if line.startswith("CMD ")]
    assert json.loads(cmd.removeprefix("CMD ")) == command
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    assert deploy.count(" ".join(command)) == 2, "the roles table and the commands without Docker"
    assert "$(PY) -m console.embedded" in (ROOT / "Makefile").read_text()  # make run's launcher starts it too
    assert '"-m", "console.serve", "-b"' in (ROOT / "console" / "embedded.py").read_text()
    for doc in ("docs/deploy.md", "docs/operations.md", "README.md", "Dockerfile", "docker-compose.yml"):
        text = (ROOT / doc).read_text()
        assert "daphne -b" not in text and '"daphne", "-b"' not in text, doc


def _serve(tmp_path: Path, *extra: str, calls: Callable[[str], None] | None = None, **env: str) -> tuple[str, str]:
    """Start the web process as Compose does (on a loopback port), make two requests (or ``calls(base_url)``),
    stop it: (stdout, stderr). A port taken between choosing it and daphne binding it (the machine is shared)
    is tried again."""
    for _ in range(3):
        port = free_port()
        out, err = tmp_path / f"{port}.out", tmp_path / f"{port}.err"
        python, *args = documented_web_command()
        assert python == "python"
        loopback = {"0.0.0.0": "127.0.0.1", "8000": str(port)}  # noqa: S104 - what replaces the image's bind
        args = [loopback.get(arg, arg) for arg in args]
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, *args[:-1], *extra, args[-1]],
                cwd=ROOT,
                env=embedded_env(tmp_path / "var", **env),
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        base = f"http://127.0.0.1:{port}"

        def up(proc: subprocess.Popen[bytes] = proc, base: str = base) -> bool:
            if proc.poll() is not None:
                return True
            try:
                return httpx.get(f"{base}/health/live", timeout=scaled(2)).status_code == 200
            except httpx.TransportError:
                return False

        try:
            wait_for(up, timeout=60, interval=0.2, what="the web process to serve")
            if proc.poll() is not None:
                if b"Address already in use" in err.read_bytes():
                    continue
                raise AssertionError(f"the web process exited: {err.read_text(errors='replace')[-3000:]}")
            if calls is not None:
                calls(base)
            else:
                assert httpx.get(f"{base}/api/no-such-path", timeout=scaled(10)).status_code == 404
        finally:
            process_group_stop(proc)
        return out.read_text(errors="replace"), err.read_text(errors="replace")
    raise AssertionError("no free port for the web process after 3 tries")


def _objects(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
    assert all(isinstance(p, dict) for p in parsed), lines
    return parsed


def test_json_logs_are_json_lines_only_the_access_log_included(tmp_path: Path) -> None:
    out, err = _serve(tmp_path, GATEHOUSE_LOG_FORMAT="json")
    assert out == ""  # daphne's access lines went here
    lines = _objects(err)
    access = [line for line in lines if line["logger"] == "gatehouse.access"]
    missing = [line for line in access if line["http"]["request"] == "GET /api/no-such-path"]
    assert len(missing) == 1, lines
    [entry] = missing
    assert entry["level"] == "INFO" and entry["http"]["status"] == 404 and entry["http"]["size"] > 0
    assert entry["http"]["client"].startswith("127.0.0.1:")
    assert entry["message"].endswith('"GET /api/no-such-path" 404 ' + str(entry["http"]["size"]))
    assert any(line["http"]["request"] == "GET /health/live" for line in access)
    assert any(line["logger"] == "django.request" and "/api/no-such-path" in line["message"] for line in lines)


def test_json_access_lines_go_to_the_access_log_file_when_one_is_named(tmp_path: Path) -> None:
    file = tmp_path / "access.log"
    out, err = _serve(tmp_path, "--access-log", str(file), GATEHOUSE_LOG_FORMAT="json")
    assert out == ""
    assert not [line for line in _objects(err) if line["logger"] == "gatehouse.access"]
    access = _objects(file.read_text())
    assert any(line["http"]["request"] == "GET /api/no-such-path" and line["http"]["status"] == 404 for line in access)


def test_plain_logs_keep_daphnes_access_lines(tmp_path: Path) -> None:
    out, _ = _serve(tmp_path, GATEHOUSE_LOG_FORMAT="plain")
    assert '"GET /api/no-such-path" 404' in out and out.startswith("127.0.0.1:"), out


def test_every_json_access_line_carries_the_request_id_its_response_echoes(tmp_path: Path) -> None:
    """Only static files' lines had one (170 of 185 lines had none): daphne writes the line after the request's
    end has cleared the log context, for every response that is not streamed."""
    echoed: dict[str, str] = {}

    def calls(base: str) -> None:
        requests = [("GET", "/api/threads"), ("POST", "/lg/threads/search"), ("GET", "/accounts/login/")]
        requests += [("GET", "/api/nope"), ("GET", "/health/live"), ("HEAD", "/health/ready")]
        with httpx.Client(base_url=base, timeout=scaled(10)) as client:
            for index, (method, path) in enumerate(requests):
                sent = {"X-Request-ID": f"qaL-{index}"}
                response = client.request(method, path, headers=sent, json={} if method == "POST" else None)
                assert response.headers["X-Request-ID"] == sent["X-Request-ID"], (method, path)
                echoed[f"{method} {path}"] = sent["X-Request-ID"]
            generated = client.get("/api/threads?fresh=1")  # no id sent: the one made up is logged
            echoed["GET /api/threads?fresh=1"] = generated.headers["X-Request-ID"]

    _, err = _serve(tmp_path, calls=calls, GATEHOUSE_LOG_FORMAT="json")
    access = {line["http"]["request"]: line for line in _objects(err) if line["logger"] == "gatehouse.access"}
    for request, request_id in echoed.items():
        assert access[request].get("request_id") == request_id, (request, access.get(request))


def test_every_websocket_access_line_carries_its_sockets_request_id_which_the_handshake_echoes(tmp_path: Path) -> None:
    """daphne's websocket lines (connecting, connected, rejected, disconnected) had no request id: an operator
    could not tell which lines were one socket's, nor match them to what its consumer logged. Each socket is
    logged under the client's X-Request-ID (or one made up), on all its lines, and the handshake echoes it."""
    var = tmp_path / "var"
    sqlite_migrated_copy(var)
    password = sqlite_manage(var, "user_create", "wsreader", "--role", "reviewer").strip().splitlines()[-1]
    echoed: dict[str, str] = {}

    def calls(base: str) -> None:
        socket_url = base.replace("http://", "ws://") + "/ws/inbox/"
        with httpx.Client(base_url=base, timeout=scaled(10)) as client:
            client.get("/accounts/login/")
            signed_in = client.post(
                "/accounts/login/",
                data={"username": "wsreader", "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"]},
            )
            assert signed_in.status_code == 302, signed_in.text[:500]
            cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
        headers = {"Origin": base, "Cookie": cookie, "X-Request-ID": "qaW-accepted"}
        with ws_connect(socket_url, additional_headers=headers, open_timeout=scaled(10)) as socket:
            assert socket.response is not None
            echoed["accepted"] = socket.response.headers["X-Request-ID"]
            socket.recv(timeout=scaled(10))  # the render on connect, sent by the consumer
        with pytest.raises(InvalidStatus) as refused:  # no session: the consumer refuses it before accepting
            ws_connect(socket_url, additional_headers={"Origin": base, "X-Request-ID": "qaW-refused"}).close()
        assert refused.value.response.status_code == 403
        with pytest.raises(InvalidStatus):  # no id sent: one is made up and used on every line of the socket
            ws_connect(socket_url, additional_headers={"Origin": base}).close()

    _, err = _serve(tmp_path, calls=calls, GATEHOUSE_LOG_FORMAT="json", LOG_LEVEL="DEBUG")
    assert echoed["accepted"] == "qaW-accepted"
    logged = _objects(err)
    # What the consumer's task logs carries the id: daphne logs each frame the consumer sends from inside it.
    sent = [line for line in logged if line["message"].startswith("Sent WebSocket packet")]
    assert sent and {line.get("request_id") for line in sent} == {"qaW-accepted"}, sent
    lines = [line for line in logged if line["logger"] == "gatehouse.access" and "WS" in line["message"]]
    by_socket: dict[str | None, list[str]] = {}
    for line in lines:
        by_socket.setdefault(line.get("request_id"), []).append(line["http"]["request"].split()[0])
    assert by_socket.pop("qaW-accepted") == ["WSCONNECTING", "WSCONNECT", "WSDISCONNECT"], lines
    refused = by_socket.pop("qaW-refused")
    assert refused[:2] == ["WSCONNECTING", "WSREJECT"] and set(refused[2:]) <= {"WSDISCONNECT"}, lines
    [(made_up, actions)] = by_socket.items()  # the third socket's lines, all under one id
    assert made_up and len(made_up) == 32 and actions[:2] == ["WSCONNECTING", "WSREJECT"], lines


def _raw(base: str, request: bytes) -> bytes:
    """Send ``request`` on a socket of its own; everything the server answers before it closes."""
    import socket

    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=scaled(10)) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_request_line_or_header_too_long_to_read_is_a_4xx_naming_it_not_a_dropped_connection(tmp_path: Path) -> None:
    """An outside QA's find: an ~18 KB percent-encoded query string got a connection reset, not a status."""
    answers: dict[str, bytes] = {}

    def calls(base: str) -> None:
        query = "%41" * 6000  # ~18 KB, as the QA sent it
        answers["line"] = _raw(base, f"GET /api/tasks?q={query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        answers["header"] = _raw(
            base, f"GET /health/live HTTP/1.1\r\nHost: x\r\nX-Long: {'a' * 20000}\r\n\r\n".encode()
        )
        answers["after"] = _raw(base, b"GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

    _serve(tmp_path, calls=calls)
    assert answers["line"].startswith(b"HTTP/1.1 414 URI Too Long\r\n"), answers["line"][:200]
    assert answers["line"].endswith(b"the request line is longer than the server reads (16 KB)\n")
    assert answers["header"].startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answers["header"][:200]
    assert answers["after"].startswith(b"HTTP/1.1 200"), answers["after"][:200]
