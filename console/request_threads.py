"""Django's ASGI handler, with each request's sync code on a kept thread instead of a new one.

Django runs every ASGI request in ``ThreadSensitiveContext()``: asgiref gives that context a new
single-thread executor — a new OS thread — and at the end shuts it down from another new thread
and waits for the join. Two thread starts and a join per request were ~20% of daphne's CPU for a
request that does little else (a 404), and every request met fresh thread-locals (a database
wrapper, Celery's backend). asgiref 3.10+ lets a context run on an executor its caller owns; here
each request borrows one single-thread executor from a free list and gives it back, which is how
a WSGI server's threads serve request after request (Django closes or returns the connection at
``request_finished`` either way).

The middleware chain is built sync all the way down to Django's sync ``_get_response``, and the
request crosses to its thread once, at the top (``load_middleware``). Built in async mode, Django ends
the chain with its async view handler: a request went thread → event loop (``async_to_sync``) to
resolve the URL, then back to the thread for each sync ``process_view`` and for a sync view — four
more crossings per request, each a thread wake-up and a future resolved on the event loop. Sync
down to the view, a sync view runs where the chain runs; an async view (the long polls) is driven
from there by ``async_to_sync``, as under a WSGI server.

Django's ``handle`` crosses to that thread twice more: for ``request_started``'s receivers and for
``response.close()`` (``request_finished``'s). Here a request's sync work is one call: the signal,
the chain, and for a response that is not streamed its headers, its body and its ``close()``; the
event loop then only sends the bytes. A streamed response (server-sent events, files) is sent by
Django's own code and closed after, as before. One crossing instead of three took a third off
daphne's CPU for an API request that answers 404 (round 23 of docs/performance.md); the receivers
of ``request_finished`` now run before the body is sent rather than after, as under a WSGI server
whose ``close()`` follows the write only by the time it takes.

A sync call cannot be cancelled: a request whose client went away (``http.disconnect``) or whose
server is stopping (daphne cancels its requests) ends its long poll's wait through
``runtime.notify.WaitsEnd`` instead, so neither waits out the poll's timeout.

One request's sync code still runs on one thread, one call at a time, as Django requires. asgiref
does not wait for a sync call whose awaiting task is cancelled (a client that went away): the handler
does, by finishing the request (its body file's close, a streamed response's) on the thread after the
call, so the view works with the body it was sent to the end and the thread is given back idle. A
thread given back with a call still on it is not lent again (the next request would queue behind
that call): it finishes and exits on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse, HttpResponseBase
from django.urls import set_script_prefix, set_urlconf
from django.utils.log import log_response

from runtime.notify import WaitsEnd, waits_end_for, waits_end_reset

log = logging.getLogger(__name__)

# Threads kept idle at most: beyond it, a returned thread exits (the server's concurrent requests
# rarely exceed it; each kept thread costs its stack and nothing else).
KEEP_IDLE = 64
# How long a stopping server gives a request whose waits it ended to answer (they end at once).
STOP_GRACE_SECONDS = 5.0


class RequestThread(ThreadPoolExecutor):
    """One thread for one request at a time; knows whether a call is still running on it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="asgi-request")
        self._running = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            self._running += 1

        def call() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:  # before the future resolves: an awaited call leaves the thread idle
                with self._lock:
                    self._running -= 1

        return super().submit(call)

    @property
    def idle(self) -> bool:
        with self._lock:
            return self._running == 0


@dataclass
class _Call:
    """How far a request's call on its thread got, for what the handler must finish after a disconnect."""

    began: bool = False
    streamed: Any = None  # a streamed response made: the handler closes it once its sending is over


class ReusedThreadASGIHandler(ASGIHandler):
    """``ASGIHandler`` whose requests run their sync code on kept threads (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self._idle: list[RequestThread] = []  # touched only on the event loop's thread

    def load_middleware(self, is_async: bool = False) -> None:
        """The chain in sync mode down to the view, entered through one ``sync_to_async`` (see the module)."""
        super().load_middleware(is_async=False)
        self._sync_chain: Callable[[Any], Any] = self._middleware_chain  # type: ignore[has-type]
        if is_async:
            chain: Callable[[Any], Any] = self._middleware_chain  # type: ignore[has-type]
            self._middleware_chain = self.adapt_method_mode(True, chain, False)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # as Django's handler
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        end = WaitsEnd()

        async def receive_watched() -> Any:
            message = await receive()
            if message["type"] == "http.disconnect":
                end.end()  # the client left: a long poll stops waiting for it
            return message

        token = waits_end_for(end)  # the request's task (and the threads it runs on) inherit it
        try:
            served = asyncio.ensure_future(self._serve(scope, receive_watched, send))
        finally:
            waits_end_reset(token)
        try:
            await asyncio.shield(served)
        except asyncio.CancelledError:
            # The server cancels its requests as it stops (daphne on SIGTERM): a sync call cannot be
            # cancelled, so a long poll would hold the server up to its timeout. End its wait, and let the
            # request finish (bounded) before the server's loop stops: a request still running then never
            # finished (its thread waited on the stopped loop for good, and kept the process from exiting).
            end.end()
            await asyncio.wait({served}, timeout=STOP_GRACE_SECONDS)
            raise

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        thread = self._idle.pop() if self._idle else RequestThread()
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            self._give_back(thread)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Django's ``handle``, the request's sync work done in one call on its thread (see the module)."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        call = _Call()

        async def process() -> None:
            response, headers, body = await sync_to_async(self._respond, thread_sensitive=True)(scope, body_file, call)
            if headers is None:  # streamed: Django's own code sends it; it is closed below, after this task
                started = False

                async def send_watched(message: Mapping[str, Any]) -> None:
                    nonlocal started
                    started = started or message["type"] == "http.response.start"
                    await send(message)

                try:
                    await self.send_response(response, send_watched)
                except Exception:
                    if not started:  # the server can still answer it with a 500
                        raise
                    await _streamed_failed(scope, send)
                return
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            for chunk, last in self.chunk_bytes(body):
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})

        # As Django's: a disconnect while the response is made cancels sending it.
        served = asyncio.create_task(process())
        tasks = [asyncio.create_task(self.listen_for_disconnect(receive)), served]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                if not task.done():
                    task.cancel()
                with contextlib.suppress(RequestAborted, asyncio.CancelledError):  # the client left
                    await task
        finally:
            given_up = not served.done() or served.cancelled()
            if given_up or call.streamed is not None:
                await self._finish_on_thread(scope, call, body_file, given_up=given_up)
            else:
                body_file.close()  # the call returned (or raised) and closed its response: the common case

    async def _finish_on_thread(self, scope: dict[str, Any], call: _Call, body_file: Any, *, given_up: bool) -> None:
        """What a request's call left to do once its response is sent or given up, done on its thread
        once the call is over: the thread runs one call at a time, so this waits for a call still running.

        A cancelled ``sync_to_async`` does not wait for its call: asgiref cancels the future it awaits and
        returns at once (only a call that has not begun is stopped). A client that hung up while its view
        ran (the live relay's sender gives up after 2 s) had its body file closed under the view, which
        read it next: ``ValueError: I/O operation on closed file``, a 500 and a traceback. Closed after
        the view, the body is there for the view to finish its work with, and the thread comes back idle.
        """
        if given_up:
            log.debug("%s %s: the client left before its response was sent", scope["method"], scope["path"])
        await sync_to_async(self._finish, thread_sensitive=True)(call, body_file)

    def _finish(self, call: _Call, body_file: Any) -> None:
        try:
            if not call.began:  # cancelled before its call began: nothing sent request_finished
                signals.request_finished.send(sender=self.__class__)
            elif call.streamed is not None:
                # Closed by the handler's task, which a disconnect does not cancel (as in Django's handler).
                # Closed inside the sending task, a client that left just after the last part (an SSE client
                # does, at ``end``) cancelled the close before the thread took it: request_finished was never
                # sent and the thread kept its pooled connection, until the pool ran dry. A response never
                # sent is closed here too: a cancellation that came as its call returned, or while it ran.
                call.streamed.close()
        finally:
            body_file.close()

    def _respond(
        self, scope: dict[str, Any], body_file: Any, call: _Call
    ) -> tuple[HttpResponseBase, list[tuple[bytes, bytes]] | None, bytes]:
        """On the request's thread: ``request_started``, the response, and (unless it is streamed) its
        headers and body and its ``close()`` (``request_finished``), which Django each cross for."""
        call.began = True
        signals.request_started.send(sender=self.__class__, scope=scope)
        response: Any
        request, response = self.create_request(scope, body_file)
        if request is not None:  # as BaseHandler.get_response, on the sync chain
            set_urlconf(settings.ROOT_URLCONF)
            response = self._sync_chain(request)
            response._resource_closers.append(request.close)
            if response.status_code >= 400:
                log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if response.streaming:
            call.streamed = response
            return response, None, b""
        try:
            return response, _response_headers(response), response.content
        finally:
            response.close()

    def _give_back(self, thread: RequestThread) -> None:
        if thread.idle and len(self._idle) < KEEP_IDLE:
            self._idle.append(thread)
        else:
            thread.shutdown(wait=False)  # its thread exits once the call still on it returns

    @property
    def threads_kept(self) -> int:
        return len(self._idle)


async def _streamed_failed(scope: dict[str, Any], send: Any) -> None:
    """A streamed response raised after its headers were sent: logged, and its body ended here.

    No 500 can be sent any more, and raised to daphne it did harm beyond the request: daphne answers an
    application's exception by starting an error response, which raises for a response already started,
    inside the loop that reaps finished requests, and that loop never runs again in the process (finished
    requests were kept for good, a later error went unanswered and unlogged). The client was left waiting
    out its own timeout too. A stream with an end of its own says it failed before this (``/lg/``'s
    ``error`` event); an export's JSON Lines lack their trailer, which ``audit_export --verify`` reports.
    """
    log.exception("%s %s: the streamed response failed after its headers", scope["method"], scope["path"])
    with contextlib.suppress(Exception):  # the client may be gone too: nothing is left to end then
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _response_headers(response: HttpResponseBase) -> list[tuple[bytes, bytes]]:
    """The response's headers and cookies as ASGI sends them (as ``ASGIHandler.send_response``)."""
    headers = [
        (
            header.encode("ascii") if isinstance(header, str) else bytes(header),
            value.encode("latin1") if isinstance(value, str) else bytes(value),
        )
        for header, value in response.items()
    ]
    for cookie in response.cookies.values():
        headers.append((b"Set-Cookie", cookie.output(header="").encode("ascii").strip()))
    return headers
