"""The ASGI handler keeps its request threads (console.request_threads).

Through the real handler (``console.asgi``'s) with ASGI messages: requests one after another
share a kept thread; requests at the same time each have their own; a thread still running a view
given back while a call still runs on it is not lent again (the next request would wait behind it).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.urls import path

from console.request_threads import RequestThread, ReusedThreadASGIHandler
from tests.conftest import scaled

pytestmark = pytest.mark.usefixtures("live_db")

_entered = threading.Event()
_release = threading.Event()


def _where(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"{threading.get_ident()} {threading.current_thread().name}")


def _held(request: HttpRequest) -> HttpResponse:
    _entered.set()
    _release.wait(scaled(30))
    return _where(request)


urlpatterns = [path("where", _where), path("held", _held)]


def _scope(route: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": f"/{route}",
        "raw_path": f"/{route}".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
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


def test_a_thread_given_back_while_a_call_still_runs_on_it_is_not_kept(app):
    # asgiref waits for a request's sync call even when the request is cancelled (a client that went
    # away), so the handler gives its thread back idle; were that ever not so, the next request must
    # not queue behind the call.
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
