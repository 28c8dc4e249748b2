"""A fake core-banking API (account opening, payments) that behaves like a real one.

It stands in for the outside world in the demo and the tests:
- every mutating call needs an ``Idempotency-Key``; a repeat with the same key
  and body replays the first response (``Idempotent-Replayed: true``) without
  executing again, the same key with a different body is refused (422);
- it has latency (``FAKE_BANK_LATENCY_MS``, or ``X-Fake-Latency-Ms`` per request)
  and can fail before executing (``FAKE_BANK_FAIL_RATE``, 0..1) with a 503;
- ``GET /stats`` reports how many times each key really executed.

Run it: ``python -m demo.fakebank --port 8765``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.responses: dict[str, tuple[str, int, dict[str, Any]]] = {}
        self.executions: dict[str, int] = {}
        self.received: dict[str, int] = {}  # requests per key, counted on arrival
        self.requests = 0
        self.cut_short = 0  # requests whose caller died before its body was sent: not acted on

    def reset(self) -> None:
        with self.lock:
            self.responses.clear()
            self.executions.clear()
            self.received.clear()
            self.requests = 0
            self.cut_short = 0


class BankServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], latency_ms: float = 0.0, fail_rate: float = 0.0) -> None:
        super().__init__(address, BankHandler)
        self.ledger = Ledger()
        self.latency_ms = latency_ms
        self.fail_rate = fail_rate

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class BankHandler(BaseHTTPRequestHandler):
    server: BankServer

    def log_message(self, format: str, *args: Any) -> None:
        if os.environ.get("FAKE_BANK_VERBOSE"):
            super().log_message(format, *args)

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        # The caller may have died mid-request; its retry with the same key gets a replay.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/stats":
            ledger = self.server.ledger
            with ledger.lock:
                body = {
                    "executions": dict(ledger.executions),
                    "requests": ledger.requests,
                    "total": sum(ledger.executions.values()),
                }
            self._send(200, body)
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if len(raw) < length:
            # The caller died mid-request (its body cut short): an HTTP server never acts on half a
            # request. Taking the missing body for "{}" paid an empty payment under the key, and the
            # caller's retry with the whole body then got 422 (seen in the chaos test).
            with self.server.ledger.lock:
                self.server.ledger.cut_short += 1
            return
        if self.path == "/reset":
            self.server.ledger.reset()
            self._send(200, {"ok": True})
            return
        kinds = {"/accounts": "account", "/payments": "payment"}
        if self.path not in kinds:
            self._send(404, {"error": "not found"})
            return
        key = self.headers.get("Idempotency-Key")
        if not key:
            self._send(400, {"error": "Idempotency-Key header is required"})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send(400, {"error": "body is not JSON"})
            return
        ledger = self.server.ledger
        with ledger.lock:
            ledger.requests += 1
            ledger.received[key] = ledger.received.get(key, 0) + 1
            seen = ledger.responses.get(key)
        if seen is not None:
            fingerprint, status, response = seen
            if fingerprint != raw.decode():
                self._send(422, {"error": "Idempotency-Key reused with a different request body"})
            else:
                self._send(status, response, {"Idempotent-Replayed": "true"})
            return
        latency = float(self.headers.get("X-Fake-Latency-Ms") or self.server.latency_ms)
        time.sleep(latency / 1000)
        if self.server.fail_rate and random.random() < self.server.fail_rate:  # noqa: S311 - simulated flakiness, not security
            self._send(503, {"error": "temporarily unavailable, retry with the same key"})
            return
        kind = kinds[self.path]
        response = {
            "id": f"{kind}_{uuid.uuid4().hex[:12]}",
            "status": "opened" if kind == "account" else "paid",
            "request": body,
        }
        with ledger.lock:
            if key in ledger.responses:  # a concurrent duplicate won the race: replay it
                _, status, response = ledger.responses[key]
                replay = True
            else:
                ledger.responses[key] = (raw.decode(), 201, response)
                ledger.executions[key] = ledger.executions.get(key, 0) + 1
                status, replay = 201, False
        self._send(status, response, {"Idempotent-Replayed": "true"} if replay else None)


def serve_in_thread(host: str = "127.0.0.1", port: int = 0, **kwargs: Any) -> BankServer:
    server = BankServer((host, port), **kwargs)
    threading.Thread(target=server.serve_forever, name="fakebank", daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = BankServer(
        (args.host, args.port),
        latency_ms=float(os.environ.get("FAKE_BANK_LATENCY_MS", "20")),
        fail_rate=float(os.environ.get("FAKE_BANK_FAIL_RATE", "0")),
    )
    print(f"fake bank listening on {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
