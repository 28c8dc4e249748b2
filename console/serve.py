"""``python -m console.serve``: daphne, its arguments unchanged, with the web process's own access log.

Every documented start of the web process uses it (``make run``'s launcher, the image, Compose,
docs/deploy.md). What differs from daphne's own:

- ``GATEHOUSE_LOG_FORMAT=json``: each entry is a JSON object (``console.logs.JsonFormatter``) on the
  ``gatehouse.access`` logger, so it goes where every other line goes, one object per line. daphne
  wrote its own NCSA lines to stdout on every request, in the middle of a JSON log. With
  ``--access-log FILE`` the objects go to that file instead.
- In embedded mode (``make run``) the workers hand live events to the web process over HTTP
  (``GATEHOUSE_LIVE_RELAY_URL``, ``POST /internal/live/``, console/live.py): several per run and per
  decision, which made most of the access log in ``make run``'s terminal. They are left out; with
  Redis there is no relay and nothing is left out.
- Each HTTP access line carries the request's ``request_id``, the id its response echoes in ``X-Request-ID``
  (``console.logs.RequestContextMiddleware``). daphne writes the line as the last part of the response is
  sent, after the request's ``request_finished`` has cleared the log context (``console.request_threads``
  sends a response's body after closing it), so only streamed responses (static files) had one: the id is
  read from the response's headers instead (``ConsoleServer``).
- Each websocket has a request id too (the client's ``X-Request-ID`` on the handshake, as for HTTP, or one
  made up): on its access lines (connecting, connected, rejected, disconnected), echoed in the handshake's
  response, and in the log context of its consumer, so what a live page logs (a failed render) names the
  socket its access lines name (``ConsoleWebSocketProtocol``). daphne's lines had no id at all.
- A request line or a header line longer than Twisted reads (16 KB: a long query string) is answered
  ``414 URI Too Long`` or ``431 Request Header Fields Too Large``; Twisted closed the connection without a
  word, which a client reports as a reset, not as its request's fault (``LineLimitHTTPFactory``).
- A server told to stop lets what its requests answered leave before Twisted closes the connections
  (``ConsoleServer.kill_all_applications``): Twisted's shutdown drops every connection next without
  sending what is still buffered, which cut a stopping long poll's 503 about one time in four.
- Once the application has loaded, the graph registry's warnings (open tasks waiting in a node a graph no
  longer has) are logged once, as ``graphs_check`` prints them and a Celery worker logs them at its start.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from daphne import cli
from daphne import server as daphne_server
from daphne.access import AccessLogGenerator
from daphne.http_protocol import HTTPFactory
from daphne.server import Server
from daphne.ws_protocol import WebSocketFactory, WebSocketProtocol
from twisted.internet import defer

access_log = logging.getLogger("gatehouse.access")


class AccessLog(AccessLogGenerator):
    """Daphne's access log, leaving out the HTTP requests to ``quiet_path`` (when it is not empty), and
    written as JSON log records when ``json_lines``."""

    def __init__(self, stream: Any, *, quiet_path: str, json_lines: bool = False) -> None:
        super().__init__(stream)
        self.quiet_path = quiet_path
        self.json_lines = json_lines

    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        if self.quiet_path and protocol == "http" and details.get("path") == self.quiet_path:
            return
        super().__call__(protocol, action, details)

    def write_entry(
        self,
        host: str,
        date: Any,
        request: str,
        status: int | None = None,
        length: int | None = None,
        ident: str | None = None,
        user: str | None = None,
    ) -> None:
        if not self.json_lines:
            super().write_entry(host, date, request, status, length, ident, user)
            return
        # The entry's time is the record's; its parts are fields of their own, for a log query to use.
        http = {"client": host, "request": request, "status": status, "size": length}
        args = (host, request, status or "-", length or "-")
        if self.stream is sys.stdout:  # daphne's default: the log's own stream (stderr), like every line
            access_log.info('%s "%s" %s %s', *args, extra={"http": http})
            return
        from console.logs import JsonFormatter  # after django.setup(), as every app module

        record = access_log.makeRecord(
            access_log.name, logging.INFO, __file__, 0, '%s "%s" %s %s', args, None, extra={"http": http}
        )
        self.stream.write(JsonFormatter().format(record) + "\n")


class ConsoleServer(Server):
    """daphne's server, with the id a response echoes (``X-Request-ID``) in the log context while the last part
    of the response is sent (daphne writes the request's access line then, in this call: ``log_action``), and a
    stop that sends what its requests answered before the connections close."""

    async def handle_reply(self, protocol: Any, message: dict[str, Any]) -> None:
        if message.get("type") != "http.response.body" or message.get("more_body", False):
            await super().handle_reply(protocol, message)
            return
        from console.logs import log_context  # after django.setup(), as every app module

        headers = getattr(protocol, "responseHeaders", None)
        echoed = headers.getRawHeaders(b"x-request-id") if headers is not None else None
        # The header is set before the response starts (http.response.start), so it is there by now.
        with log_context(request_id=echoed[0].decode("latin-1") if echoed else None):
            await super().handle_reply(protocol, message)

    def kill_all_applications(self) -> defer.Deferred[Any]:
        """Cancel every request, wait for all of them (a long poll answers 503 then: console.request_threads),
        then until what they answered has been sent, for at most ``FLUSH_SECONDS``; Twisted's shutdown goes on
        after this (``disconnectAll``), dropping every connection without writing what its buffer still holds.

        daphne's own waited on ``asyncio.gather`` of the cancelled requests, which is done as soon as the first
        of them ends cancelled: a stream that closed at once let the shutdown cut a long poll still answering
        (about one stop in four with a wait and a stream open)."""
        cancelled = []
        for details in self.connections.values():
            instance = details.get("application_instance")  # daphne's checker drops it once reaped
            if instance is not None and not instance.done():
                instance.cancel()
                cancelled.append(instance)
        daphne_server.logger.info("Killed %i pending application instances", len(cancelled))
        transports = [getattr(protocol, "transport", None) for protocol in self.connections]
        ended = defer.Deferred.fromFuture(asyncio.gather(*cancelled, return_exceptions=True))
        ended.addCallback(lambda _: _sent(transports, time.monotonic() + FLUSH_SECONDS))
        return ended


class ConsoleWebSocketProtocol(WebSocketProtocol):
    """daphne's websocket protocol, under one request id per socket: set while it writes each access line and
    while its consumer is created (the consumer's task copies the log context then, so its log lines carry
    the id), and echoed in the handshake's ``X-Request-ID``."""

    request_id = ""

    def onConnect(self, request: Any) -> Any:
        from console.logs import request_id_for  # after django.setup(), as every app module

        self.request_id = request_id_for(request.headers.get("x-request-id", ""))
        request.headers["x-request-id"] = self.request_id  # the consumer's scope carries the id it is logged under
        with self._logged():
            handshake = super().onConnect(request)
        # The handshake's answer: daphne's accept gives the subprotocol alone; autobahn takes headers beside it.
        handshake.addCallback(lambda subprotocol: (subprotocol, {"X-Request-ID": self.request_id}))
        return handshake

    def applicationCreateWorked(self, application_queue: Any) -> None:
        with self._logged():
            super().applicationCreateWorked(application_queue)

    def onOpen(self) -> None:
        with self._logged():
            super().onOpen()

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        with self._logged():
            super().onClose(wasClean, code, reason)

    def serverReject(self) -> None:
        with self._logged():
            super().serverReject()

    def _logged(self) -> Any:
        from console.logs import log_context

        return log_context(request_id=self.request_id or None)


class ConsoleWebSocketFactory(WebSocketFactory):
    protocol = ConsoleWebSocketProtocol


FLUSH_SECONDS = 2.0  # a stopping server's wait for its answers to leave; a client not reading gets cut after it


def _unsent(transport: Any) -> bool:
    """Whether a Twisted connection still buffers bytes to write (``abstract.FileDescriptor``'s two buffers)."""
    if transport is None or getattr(transport, "disconnected", True):
        return False
    buffered = len(getattr(transport, "dataBuffer", b"")) - getattr(transport, "offset", 0)
    return buffered > 0 or bool(getattr(transport, "_tempDataLen", 0))


def _sent(transports: list[Any], deadline: float) -> defer.Deferred[None]:
    """Fires once none of ``transports`` has bytes left to write, or at ``deadline``."""
    done: defer.Deferred[None] = defer.Deferred()

    def check() -> None:
        if time.monotonic() >= deadline or not any(_unsent(t) for t in transports):
            done.callback(None)
        else:
            asyncio.get_running_loop().call_later(0.01, check)  # daphne's reactor runs on asyncio's loop

    check()
    return done


def _line_too_long(channel: Any, line: bytes) -> None:
    """Twisted's ``LineReceiver.lineLengthExceeded`` for an HTTP channel: say which line was too long, then close.
    No header line counted yet means the request line (``_receivedHeaderSize`` restarts with each request)."""
    first = not getattr(channel, "_receivedHeaderSize", 0)
    status, what = (
        (b"414 URI Too Long", b"request line") if first else (b"431 Request Header Fields Too Large", b"header")
    )
    body = b"the " + what + b" is longer than the server reads (16 KB)\n"
    channel.transport.write(
        b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    channel.loseConnection()


class LineLimitHTTPFactory(HTTPFactory):
    """daphne's HTTP factory, its channels answering a line too long to read instead of dropping the connection."""

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        channel = getattr(protocol, "_channel", protocol)  # Twisted wraps the channel to negotiate HTTP/2
        channel.lineLengthExceeded = lambda line: _line_too_long(channel, line)
        return protocol


def relay_path() -> str:
    """The path the workers post live events to, or "" when they publish to Redis instead."""
    from django.conf import settings

    return urlsplit(settings.GATEHOUSE_LIVE_RELAY_URL).path if settings.GATEHOUSE_LIVE_RELAY_URL else ""


def access_log_build(stream: Any) -> AccessLog:
    """What daphne's CLI calls for its access log, once it has loaded the application (``console.asgi``):
    the settings are read by then, and a setting that stops the start has stopped it in one line. Read
    before, a refused setting was a traceback."""
    from django.conf import settings

    return AccessLog(stream, quiet_path=relay_path(), json_lines=settings.GATEHOUSE_LOG_FORMAT == "json")


def start_warnings_log() -> None:
    """What the registry's warnings say about the graphs as loaded (approvals: open tasks waiting in a node a
    graph no longer has), logged once as the web process starts: the same lines ``graphs_check`` prints and
    a worker logs at its start (``console.celery._graphs_load``). Not fatal: the console still serves them."""
    from django.db import connections

    from runtime.registry import registry_entries, registry_warnings_read

    web_log = logging.getLogger("gatehouse.web")
    for line in registry_warnings_read(registry_entries()):  # loaded by console.asgi: not compiled again
        web_log.warning("%s", line)
    connections.close_all()  # the start's own connection: requests use their own threads' connections


class CommandLineInterface(cli.CommandLineInterface):
    """daphne's CLI, saying the registry's warnings once the application (``console.asgi``) has loaded, with
    the request ids on the access lines and the answers sent before a stop (``ConsoleServer``)."""

    server_class = ConsoleServer

    def load_asgi_app(self, asgi_app_path: str) -> Any:
        application = super().load_asgi_app(asgi_app_path)
        from django.apps import apps

        if apps.ready:  # another application than console.asgi: no Django to ask
            start_warnings_log()
        return application


def main() -> None:
    # The CLI builds its access log from this module attribute (daphne/cli.py), and the server its HTTP and
    # websocket factories from daphne.server's: ours instead.
    cli.AccessLogGenerator = access_log_build
    daphne_server.HTTPFactory = LineLimitHTTPFactory
    daphne_server.WebSocketFactory = ConsoleWebSocketFactory
    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
