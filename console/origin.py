"""Websocket Origin check with the same rules as Django's CSRF origin check.

Channels' ``AllowedHostsOriginValidator`` compares only the Origin's *host* with
ALLOWED_HOSTS, so ``http://localhost:9999`` (another service on the same machine)
or ``http://`` where the console is served over ``https://`` passes. Here an Origin
is allowed when its scheme, host and port equal either

- the request's own origin: the Host header (which must be in ALLOWED_HOSTS) with
  the connection's scheme (``wss`` → ``https``; ``SECURE_PROXY_SSL_HEADER`` honoured
  behind a TLS-terminating proxy), or
- an entry of CSRF_TRUSTED_ORIGINS (``https://*.example.com`` matches subdomains).

A missing or opaque (``null``) Origin is refused: browsers always send one.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

Origin = tuple[str, str, int]  # scheme, host (lower case, IPv6 without brackets), port
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_parse(value: str) -> Origin | None:
    """``scheme://host[:port]`` with nothing else; None for anything a browser would not send."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else DEFAULT_PORTS[scheme]


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            try:
                return str(value.decode("latin1"))
            except UnicodeDecodeError:
                return None
    return None


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:  # as Django's HttpRequest.get_host does
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _own_origin(scope: dict[str, Any]) -> Origin | None:
    host = _header(scope, b"host")
    if not host:
        return None
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return None
    secure = scope.get("scheme") in ("wss", "https")
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        header, value = proxy
        name = header.removeprefix("HTTP_").replace("_", "-").lower().encode()
        forwarded = _header(scope, name)
        if forwarded is not None:
            secure = forwarded.split(",", 1)[0].strip() == value
    return origin_parse(f"{'https' if secure else 'http'}://{host}")


def _trusted(origin: Origin) -> bool:
    scheme, host, port = origin
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        if "://*." in entry:
            pattern = origin_parse(entry.replace("://*.", "://", 1))
            if pattern is not None and pattern[::2] == (scheme, port) and is_same_domain(host, "." + pattern[1]):
                return True
        elif origin_parse(entry) == origin:
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    raw = _header(scope, b"origin")
    origin = origin_parse(raw) if raw else None
    if origin is None:
        return False
    return origin == _own_origin(scope) or _trusted(origin)


class SameOriginValidator:
    """ASGI middleware for the websocket router: refuse the handshake from any other origin."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator guards websocket connections only")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
