"""The ASGI handler keeps its request threads (console.request_threads).

Through the real handler (``console.asgi``'s) with ASGI messages: requests one after another
share a kept thread; requests at the same time each have their own; a thread still running a view
given back while a call still runs on it is not lent again (the next request would wait behind it);
a client that hangs up while its view runs leaves the view the body it sent, and no error.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.test import override_settings
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from console.request_threads import RequestThread, ReusedThreadASGIHandler
from tests.conftest import scaled, wait_for

pytestmark = pytest.mark.usefixtures("live_db")

_entered = threading.Event()
_release = threading.Event()
_returned = threading.Event()
_read: dict[str, Any] = {}


def _where(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"{threading.get_ident()} {threading.current_thread().name}")


def _held(request: HttpRequest) -> HttpResponse:
    _entered.set()
    _release.wait(scaled(30))
    return _where(request)


def _held_then_read(request: HttpRequest) -> HttpResponse:
    """Held until released, then reads its body (as the live relay's view does, after its checks)."""
    try:
        _entered.set()
        _release.wait(scaled(30))
        try:
            _read["body"] = request.body
        except Exception as exc:
            _read["error"] = exc
            raise
        return HttpResponse(status=204)
    finally:
        _returned.set()


def _fails_mid_stream(request: HttpRequest) -> StreamingHttpResponse:
    """A streamed response whose source fails after its first part (an export whose cursor's connection
    was cut, a stream whose log stopped answering)."""

    async def parts() -> AsyncIterator[bytes]:
        yield b"first part\n"
        raise RuntimeError("the source failed")

    return StreamingHttpResponse(parts(), content_type="text/plain")


urlpatterns = [
    path("where", _where),
    path("held", _held),
    path("read", csrf_exempt(_held_then_read)),
    path("fails-mid-stream", _fails_mid_stream),
]


def _scope(route: str, method: str = "GET", headers: tuple[tuple[bytes, bytes], ...] = ()) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": f"/{route}",
        "raw_path": f"/{route}".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def _open(app: ReusedThreadASGIHandler, route: str) -> ApplicationCommunicator:
    request = ApplicationCommunicator(app, _scope(route))
    await request.send_input({"type": "http.request", "body": b"", "more_body": False})
    return request


async def _answer(request: ApplicationCommunicator) -> tuple[int, str]:
    """Where the view ran: (thread ident, thread name)."""
    start = await request.receive_output(scaled(10))
    assert start["status"] == 200, start
    body = await request.receive_output(scaled(10))
    await request.wait(scaled(10))  # the request is over (its response closed, its thread given back)
    ident, name = body["body"].decode().split(" ", 1)
    return int(ident), name


@pytest.fixture
def app():
    _entered.clear()
    _release.clear()
    _returned.clear()
    _read.clear()
    with override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"]):
        yield ReusedThreadASGIHandler()
    _release.set()


def test_requests_one_after_another_share_one_kept_thread(app):
    async def scenario() -> list[tuple[int, str]]:
        return [await _answer(await _open(app, "where")) for _ in range(3)]

    answers = asyncio.run(scenario())
    assert len({ident for ident, _ in answers}) == 1, answers
    assert answers[0][1].startswith("asgi-request"), answers
    assert app.threads_kept == 1


def test_requests_at_the_same_time_each_have_a_thread_of_their_own(app):
    async def scenario() -> tuple[tuple[int, str], tuple[int, str]]:
        held = await _open(app, "held")
        await asyncio.to_thread(_entered.wait, scaled(10))
        assert _entered.is_set()
        # Answered while the first request's view still holds its thread.
        other = await _answer(await _open(app, "where"))
        _release.set()
        return await _answer(held), other

    held, other = asyncio.run(scenario())
    assert held[0] != other[0]
    assert app.threads_kept == 2


def test_a_client_that_hangs_up_while_its_view_runs_leaves_the_view_its_body(app, caplog):
    # The live relay's sender gives up after 2 s; at a slow start its POST's view was still running when
    # it hung up, and the handler closed the body file under it: "ValueError: I/O operation on closed
    # file", a 500 and a traceback. The view must finish with the body it was sent.
    body = b'{"type":"live.event","action":"task.created"}' * 200

    def given_up(request: ApplicationCommunicator) -> bool:
        # Either the handler is done (it did not wait for the view) or it says it waits for it.
        return request.future.done() or any("client left" in r.getMessage() for r in caplog.records)

    async def scenario() -> None:
        # As the relay's sender posts it: JSON with its length (a body without one is read by a middleware).
        headers = ((b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()))
        request = ApplicationCommunicator(app, _scope("read", method="POST", headers=headers))
        await request.send_input({"type": "http.request", "body": body, "more_body": False})
        assert await asyncio.to_thread(_entered.wait, scaled(10))
        await request.send_input({"type": "http.disconnect"})
        await asyncio.to_thread(wait_for, lambda: given_up(request), what="the request given up")
        _release.set()
        await request.wait(scaled(10))
        assert await asyncio.to_thread(_returned.wait, scaled(10))

    with caplog.at_level(logging.DEBUG, logger="console.request_threads"):
        asyncio.run(scenario())
    assert "error" not in _read, _read["error"]
    assert _read["body"] == body
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.records
    assert app.threads_kept == 1  # given back idle: the handler waited for the view


def test_a_thread_given_back_while_a_call_still_runs_on_it_is_not_kept(app):
    # The handler waits for a request's sync call even when the request is given up (a client that
    # went away), so it gives its thread back idle; were that ever not so, the next request must not
    # queue behind the call.
    thread = RequestThread()
    running = thread.submit(_held, None)
    assert _entered.wait(scaled(10))
    app._give_back(thread)
    assert app.threads_kept == 0
    _release.set()
    running.result(scaled(10))
    assert thread.idle
    app._give_back(thread)
    assert app.threads_kept == 1


def test_a_streamed_response_that_fails_after_its_headers_is_ended_and_logged_not_raised_to_the_server(app, caplog):
    """Raised to daphne, such a failure stopped daphne's loop that reaps finished requests for the rest of the
    process's life (its error answer starts a response again, which raises there) and left the client waiting
    out its own timeout: the /lg/ stream of round 35 of docs/performance.md."""

    async def scenario() -> list[dict[str, Any]]:
        request = await _open(app, "fails-mid-stream")
        sent = [await request.receive_output(scaled(10)) for _ in range(3)]
        await request.wait(scaled(10))  # the application returned: it raised nothing to the server
        return sent

    caplog.set_level(logging.ERROR, logger="console.request_threads")
    start, first, last = asyncio.run(scenario())
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert first["body"] == b"first part\n" and first["more_body"]
    assert last == {"type": "http.response.body", "body": b"", "more_body": False}, "the response is ended"
    assert "GET /fails-mid-stream: the streamed response failed after its headers" in caplog.text
    assert "RuntimeError: the source failed" in caplog.text
