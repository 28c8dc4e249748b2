"""The probes' and /metrics' door: answered before host validation, the HTTPS redirect and sessions.

Its own module so that ``console.health`` and ``console.metrics`` (which reads the health checks'
database ping) do not import each other.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from console.health import health_live, health_ready, probe_error
from console.metrics import metrics_view


class ProbeMiddleware:
    """Answers the probes and /metrics before host validation, the HTTPS redirect and sessions.

    Orchestrators and Prometheus call a container by its address over plain HTTP on the
    internal network; ALLOWED_HOSTS and SECURE_SSL_REDIRECT are for browsers, not for them.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.routes: dict[str, Callable[[HttpRequest], HttpResponse]] = {
            "/health/live": health_live,
            "/health/ready": health_ready,
            "/metrics": metrics_view,
        }

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = self.routes.get(request.path_info.rstrip("/") or "/")
        if view is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            refused = probe_error(405, "method_not_allowed", f"{request.method} is not allowed here: use GET or HEAD")
            refused["Allow"] = "GET, HEAD"
            return refused
        response = view(request)
        response["Cache-Control"] = "no-store"
        return response
