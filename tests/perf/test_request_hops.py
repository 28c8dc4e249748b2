"""An ASGI request crosses between the event loop and its thread a few times, not per middleware
and not per view hook (console.request_threads builds the chain sync down to the view).

Through the real handler (``console.asgi``'s), counting every ``sync_to_async`` (event loop → thread)
and ``async_to_sync`` (thread → event loop) made while a request is served. Built the way Django
builds it under ASGI, the chain ended in Django's async view handler: each request went back to the
event loop to resolve its URL, then to the thread again for each sync ``process_view`` (CSRF, the log
context) and for the view — and with async-capable middleware at the bottom of the chain (django-htmx,
django-axes) Django's own middleware ran in async mode, a crossing per hook: 16 in all.

Django's handler then crossed twice more: for the ``request_started`` signal and for closing the
response. Now one call does the signal, the chain with its view, and a response's headers, body and
close; only a streamed response (the audit export, server-sent events) is sent by Django's code and
closed after, a second crossing. The long polls are sync views: waiting blocks the request's own
thread, which it held through the wait anyway.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
from asgiref import sync
from asgiref.testing import ApplicationCommunicator
from django.conf import settings
from django.core import signals

from console.request_threads import ReusedThreadASGIHandler
from tests.conftest import loan_input, scaled

pytestmark = pytest.mark.usefixtures("live_db")

T = TypeVar("T")

TO_THREAD = 1  # request_started, the chain with its view, the response's bytes and its close


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
    """Serve one request through the real handler: its status, the crossings it made each way, the
    ``request_started`` and ``request_finished`` signals sent, its headers and its body."""
    made: dict[str, Any] = {"to_thread": 0, "to_loop": 0, "started": 0, "finished": 0}
    sent: dict[str, Any] = {}
    to_thread, to_loop = sync.SyncToAsync.__call__, sync.AsyncToSync.__call__

    async def counted_to_thread(self, *args, **kwargs):
        made["to_thread"] += 1
        return await to_thread(self, *args, **kwargs)

    def counted_to_loop(self, *args, **kwargs):
        made["to_loop"] += 1
        return to_loop(self, *args, **kwargs)

    app = ReusedThreadASGIHandler()

    def on_started(**_: Any) -> None:
        made["started"] += 1

    def on_finished(**_: Any) -> None:
        made["finished"] += 1

    async def serve() -> int:
        request = ApplicationCommunicator(app, _scope(method, path, query, list(headers)))
        await request.send_input({"type": "http.request", "body": body, "more_body": False})
        start = await request.receive_output(scaled(30))
        chunks = []
        while True:
            message = await request.receive_output(scaled(30))
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await request.wait(scaled(30))  # and the request is over: its response closed
        sent.update(headers=start["headers"], body=b"".join(chunks))
        return int(start["status"])

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted_to_thread)
    monkeypatch.setattr(sync.AsyncToSync, "__call__", counted_to_loop)
    signals.request_started.connect(on_started)
    signals.request_finished.connect(on_finished)
    try:
        status = asyncio.run(serve())
    finally:
        monkeypatch.undo()
        signals.request_started.disconnect(on_started)
        signals.request_finished.disconnect(on_finished)
    return {"status": status, **made, **sent}


def _served_counting_finished(serve: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, int]:
    """``serve()``'s result, and how many times ``request_finished`` was sent while it ran."""
    finished: list[int] = []

    def on_finished(**_: Any) -> None:
        finished.append(1)

    signals.request_finished.connect(on_finished)
    try:
        return asyncio.run(serve()), len(finished)
    finally:
        signals.request_finished.disconnect(on_finished)


def _counts(made: dict[str, Any]) -> dict[str, Any]:
    return {k: made[k] for k in ("status", "to_thread", "to_loop", "started", "finished")}


@pytest.fixture(autouse=True)
def _testserver(settings):
    settings.ALLOWED_HOSTS = ["testserver"]


def _bearer(persona) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {persona.token}".encode())]


def test_an_api_request_crosses_to_its_thread_once_and_never_back(operator, monkeypatch):
    made = _crossings(monkeypatch, "GET", "/api/graphs", headers=_bearer(operator))
    assert _counts(made) == {"status": 200, "to_thread": TO_THREAD, "to_loop": 0, "started": 1, "finished": 1}
    # The body the event loop sent is the view's whole answer: what the same request gets through Django's test client.
    assert json.loads(made["body"]) == operator.client.get("/api/graphs").json()
    assert (b"Content-Type", b"application/json; charset=utf-8") in made["headers"]


def test_a_console_page_crosses_to_its_thread_once_and_never_back(reviewer, client, monkeypatch):
    client.force_login(reviewer.user)
    cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
    made = _crossings(monkeypatch, "GET", "/", headers=[(b"cookie", cookie.encode())])
    assert _counts(made) == {"status": 200, "to_thread": TO_THREAD, "to_loop": 0, "started": 1, "finished": 1}
    # The session is renewed on every request (SESSION_SAVE_EVERY_REQUEST): its cookie goes out.
    renewed = [value for name, value in made["headers"] if name == b"Set-Cookie"]
    assert any(value.startswith(f"{settings.SESSION_COOKIE_NAME}=".encode()) for value in renewed), renewed
    assert b"</html>" in made["body"]


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
    assert _counts(made) == {"status": 201, "to_thread": TO_THREAD, "to_loop": 0, "started": 1, "finished": 1}


def test_a_streamed_response_is_sent_by_djangos_code_and_closed_once(auditor, monkeypatch):
    """The audit export streams: its body is not made on the request's thread in one piece but pulled
    a part at a time (a crossing each, Django's ``StreamingHttpResponse.__aiter__``), and it is closed
    after the last part: request_finished is sent once, after the call that made it."""
    made = _crossings(monkeypatch, "GET", "/api/audit/export", query="format=jsonl", headers=_bearer(auditor))
    counts = _counts(made)
    assert counts.pop("to_thread") > 2  # the call, a pull per part and the end, the close
    assert counts == {"status": 200, "to_loop": 0, "started": 1, "finished": 1}
    *rows, trailer = [json.loads(line) for line in made["body"].splitlines()]
    assert rows and all("hash" in row for row in rows)
    assert trailer["export"]["count"] == len(rows)  # the whole stream was sent, its trailer last


def test_a_streamed_response_dropped_by_a_cancellation_as_its_call_returned_is_still_closed(auditor, monkeypatch):
    """asgiref re-raises a cancellation that arrives as the sync call returns, and its result is dropped:
    a streamed response made by that call was then never sent nor closed (the export's own record of
    itself would wait for the garbage collector). The handler closes it: request_finished is sent once."""
    from console import request_threads

    real = request_threads.sync_to_async
    calls: list[str] = []

    def dropping(fn, **kwargs):
        wrapped = real(fn, **kwargs)
        if getattr(fn, "__name__", "") != "_respond":
            return wrapped

        async def call_then_cancelled(*args):
            await wrapped(*args)
            calls.append("respond")
            raise asyncio.CancelledError  # what asgiref raises when the cancel came as the call returned

        return call_then_cancelled

    async def serve() -> list[Any]:
        app = ReusedThreadASGIHandler()
        scope = _scope("GET", "/api/audit/export", "format=jsonl", _bearer(auditor))
        request = ApplicationCommunicator(app, scope)
        await request.send_input({"type": "http.request", "body": b"", "more_body": False})
        await request.wait(scaled(30))
        sent = []
        while not request.output_queue.empty():
            sent.append(await request.receive_output(scaled(5)))
        return sent

    monkeypatch.setattr(request_threads, "sync_to_async", dropping)
    sent, finished = _served_counting_finished(serve)
    assert calls == ["respond"]
    assert sent == []  # nothing went out: the response was dropped with the call's result
    assert finished == 1  # and closed all the same, once


def test_a_streamed_response_whose_client_leaves_after_its_last_part_is_still_closed(auditor, monkeypatch):
    """An SSE client closes its connection as soon as it has read ``end``, so its disconnect can land while
    the response's close waits for the request's thread. The close was awaited inside the sending task,
    which the disconnect cancels: the close never ran, request_finished was never sent, and the thread
    kept its pooled database connection (``make bench``'s sdk_compat: 500s once 20 streams had ended so).
    Here the disconnect is delivered exactly then: the response is closed all the same, once."""
    from console import request_threads

    real = request_threads.sync_to_async
    steps: list[str] = []
    request: ApplicationCommunicator | None = None

    def leaving(fn, **kwargs):
        wrapped = real(fn, **kwargs)
        if getattr(fn, "__name__", "") != "_finish" or steps:  # the handler closing the request on its thread
            return wrapped

        async def client_leaves_then_close(*args):
            steps.append("client left")
            assert request is not None
            await request.send_input({"type": "http.disconnect"})
            for _ in range(100):  # the loop's turns for the handler to hear it (and cancel what it would)
                await asyncio.sleep(0)
            steps.append("closing")
            return await wrapped(*args)

        return client_leaves_then_close

    async def serve() -> bytes:
        nonlocal request
        scope = _scope("GET", "/api/audit/export", "format=jsonl", _bearer(auditor))
        request = ApplicationCommunicator(ReusedThreadASGIHandler(), scope)
        await request.send_input({"type": "http.request", "body": b"", "more_body": False})
        assert (await request.receive_output(scaled(30)))["status"] == 200
        chunks = []
        while (message := await request.receive_output(scaled(30))).get("more_body"):
            chunks.append(message["body"])
        await request.wait(scaled(30))
        return b"".join(chunks)

    monkeypatch.setattr(request_threads, "sync_to_async", leaving)
    body, finished = _served_counting_finished(serve)
    assert "export" in json.loads(body.splitlines()[-1])  # the whole stream went out before the client left
    assert steps == ["client left", "closing"]
    assert finished == 1


def test_a_request_django_cannot_even_build_gets_a_400_and_is_finished_once(operator, monkeypatch):
    """A raw byte that is not UTF-8 in the query string (a hostile or broken client; daphne passes the
    bytes on): Django's request cannot be built, and the handler answers its own 400 in the same one
    call, with request_started and request_finished sent once each."""

    async def serve() -> list[dict[str, Any]]:
        scope = {**_scope("GET", "/api/graphs", "", _bearer(operator)), "query_string": b"limit=\xff"}
        request = ApplicationCommunicator(ReusedThreadASGIHandler(), scope)
        await request.send_input({"type": "http.request", "body": b"", "more_body": False})
        sent = [await request.receive_output(scaled(30)), await request.receive_output(scaled(30))]
        await request.wait(scaled(30))
        return sent

    (start, body), finished = _served_counting_finished(serve)
    assert start["status"] == 400
    assert body["type"] == "http.response.body" and not body.get("more_body")
    assert finished == 1
