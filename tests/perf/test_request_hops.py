"""An ASGI request crosses between the event loop and its thread a few times, not per middleware
and not per view hook (console.request_threads builds the chain sync down to the view).

Through the real handler (``console.asgi``'s), counting every ``sync_to_async`` (event loop → thread)
and ``async_to_sync`` (thread → event loop) made while a request is served. Built the way Django
builds it under ASGI, the chain ended in Django's async view handler: each request went back to the
event loop to resolve its URL, then to the thread again for each sync ``process_view`` (CSRF, the log
context) and for the view — and with async-capable middleware at the bottom of the chain (django-htmx,
django-axes) Django's own middleware ran in async mode, a crossing per hook: 16 in all.

What is left: the ``request_started`` signal, the chain with its view, and closing the response
(Django's handler sends the signal and the close to the thread each on its own). The long polls
are sync views since the same change: waiting blocks the request's own thread, which it held
through the wait anyway.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref import sync
from asgiref.testing import ApplicationCommunicator

from console.request_threads import ReusedThreadASGIHandler
from tests.conftest import loan_input, scaled

pytestmark = pytest.mark.usefixtures("live_db")

TO_THREAD = 3  # the request_started signal; the chain with its view; closing the response


def _scope(method: str, path: str, query: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


def _crossings(monkeypatch, method: str, path: str, *, query: str = "", headers=(), body: bytes = b"") -> dict:
    """Serve one request through the real handler: its status and the crossings it made each way."""
    made = {"to_thread": 0, "to_loop": 0}
    to_thread, to_loop = sync.SyncToAsync.__call__, sync.AsyncToSync.__call__

    async def counted_to_thread(self, *args, **kwargs):
        made["to_thread"] += 1
        return await to_thread(self, *args, **kwargs)

    def counted_to_loop(self, *args, **kwargs):
        made["to_loop"] += 1
        return to_loop(self, *args, **kwargs)

    app = ReusedThreadASGIHandler()

    async def serve() -> int:
        request = ApplicationCommunicator(app, _scope(method, path, query, list(headers)))
        await request.send_input({"type": "http.request", "body": body, "more_body": False})
        start = await request.receive_output(scaled(30))
        await request.receive_output(scaled(30))
        await request.wait(scaled(30))  # and the request is over: its response closed
        return int(start["status"])

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted_to_thread)
    monkeypatch.setattr(sync.AsyncToSync, "__call__", counted_to_loop)
    status = asyncio.run(serve())
    monkeypatch.undo()
    return {"status": status, **made}


@pytest.fixture(autouse=True)
def _testserver(settings):
    settings.ALLOWED_HOSTS = ["testserver"]


def _bearer(persona) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {persona.token}".encode())]


def test_an_api_request_crosses_to_its_thread_once_and_never_back(operator, monkeypatch):
    made = _crossings(monkeypatch, "GET", "/api/graphs", headers=_bearer(operator))
    assert made == {"status": 200, "to_thread": TO_THREAD, "to_loop": 0}


def test_a_console_page_crosses_to_its_thread_once_and_never_back(reviewer, client, monkeypatch):
    client.force_login(reviewer.user)
    cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
    made = _crossings(monkeypatch, "GET", "/", headers=[(b"cookie", cookie.encode())])
    assert made == {"status": 200, "to_thread": TO_THREAD, "to_loop": 0}


def test_a_long_poll_waits_on_its_own_thread(operator, monkeypatch):
    """A start that waits for its thread to pause: the wait ends (by its timeout here: no worker runs
    the thread) without a crossing of its own."""
    body = json.dumps({"graph": "loan_approval", "input": loan_input()}).encode()
    made = _crossings(
        monkeypatch,
        "POST",
        "/api/threads",
        query="wait_for=interrupted&timeout=0.2",
        headers=[*_bearer(operator), (b"content-type", b"application/json")],
        body=body,
    )
    assert made == {"status": 201, "to_thread": TO_THREAD, "to_loop": 0}
