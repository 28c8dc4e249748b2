"""Refuse oversized request bodies and unstorable text before any view or parser reads them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.template.loader import render_to_string

from approvals.api_common import CONCURRENT_CHANGE, RETRY_AFTER_SECONDS, error_body_gatehouse
from approvals.errors import Conflict, DomainError
from runtime.retry import concurrent_change, stale_code

log = logging.getLogger(__name__)

_View = TypeVar("_View", bound=Callable[..., Any])


class RequestBodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit: int = settings.GATEHOUSE_MAX_BODY_BYTES
        raw_length = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw_length)
        except ValueError:
            return _error(request, 400, "bad_request", "Content-Length header is not a number", "Content-Length")
        if not request.META.get("CONTENT_LENGTH") and request.method in ("POST", "PUT", "PATCH", "DELETE"):
            # A chunked body announces no length: Django reads one byte past
            # the limit (DATA_UPLOAD_MAX_MEMORY_SIZE) and caches it for the view.
            try:
                length = len(request.body)
            except RequestDataTooBig:
                length = limit + 1
        if length > limit:
            return _error(
                request,
                413,
                "payload_too_large",
                f"request body is over the limit of {limit} bytes",
                "body",
            )
        return self.get_response(request)


def form_text_checked(view: _View) -> _View:
    """Mark a console view whose form refuses a NUL byte itself, next to the field (a comment's body, the
    sign-in form): ``RequestTextMiddleware`` lets its form fields through instead of answering with the
    API's JSON error, which an htmx swap or a browser shows as raw text in place of the form."""
    view.form_text_checked = True  # type: ignore[attr-defined]
    return view


class RequestTextMiddleware:
    """Refuse a NUL byte in the path, a query or form parameter, or a header, naming where it is.

    PostgreSQL cannot store or even compare text containing NUL: a filter like
    ``?graph=%00`` or a form field ``reason=ok%00`` would otherwise end in a 500 deep
    in a query. JSON bodies are checked by their parser (``approvals.inputs``). Form fields are
    checked once the view is known (``process_view``): a view marked ``form_text_checked`` checks its own.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path:
            return _error(request, 400, "bad_request", "the URL path contains a NUL byte", "path")
        for name, value in request.headers.items():
            if "\x00" in value:
                return _error(request, 400, "bad_request", f"header {name} contains a NUL byte", name)
        refused = _nul_refusal(request, request.GET)
        if refused is not None:
            return refused
        if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            # Read the body first: parsing a multipart form consumes the stream, and a view that then
            # reads ``request.body`` (the APIs' JSON parser) raised RawPostDataException, a 500.
            request.body  # noqa: B018 - cached for the parse in process_view and for the view
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        # Before CsrfViewMiddleware's, which parses the form (this middleware comes first).
        if getattr(view, "form_text_checked", False):
            return None
        if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            return _nul_refusal(request, request.POST)
        return None


def _nul_refusal(request: HttpRequest, params: QueryDict) -> HttpResponse | None:
    for key, values in params.lists():
        label = key.replace("\x00", "\\u0000")
        if "\x00" in key or any("\x00" in v for v in values):
            return _error(request, 422, "invalid", f"{label}: the text contains a NUL byte", label)
    return None


# Where a refusal is the APIs' JSON error: the APIs, the live relay, the probes. Every other path is a console
# page, refused with the console's error page (a browser or an htmx swap showed the JSON as raw text).
_JSON_PATHS = ("/api/", "/lg/", "/internal/", "/health/", "/metrics")


def _error(request: HttpRequest, status: int, code: str, message: str, field: str) -> HttpResponse:
    if request.path.startswith(_JSON_PATHS):
        return JsonResponse(error_body_gatehouse(code, message, field), status=status)
    # Before the session and auth middleware: rendered without the request (no user, no CSRF token), as the
    # 503 page is; the page shows a DomainError as the views' error_page does. htmx swaps the notice alone.
    refusal = DomainError(message, field=field)
    refusal.status = status
    htmx = request.headers.get("HX-Request") == "true"
    template = "console/partials/error.html" if htmx else "console/error.html"
    return HttpResponse(render_to_string(template, {"error": refusal}), status=status)


class ContentSecurityPolicyMiddleware:
    """Sends settings.CONTENT_SECURITY_POLICY on every response that has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response and not request.path.startswith(("/api/docs", "/lg/docs")):
            response["Content-Security-Policy"] = settings.CONTENT_SECURITY_POLICY
        return response


class DatabaseUnavailableMiddleware:
    """A console page whose database is unreachable answers a styled 503 "retry shortly", not Django's bare 500.

    The APIs already answer a JSON 503 (``approvals.api_common``); pages ended in "Server Error (500)" with a
    traceback logged at ERROR, after two pool timeouts: the view's first query waited one, then the session
    middleware loaded the session again to set its cookie on the error response and waited another. Here the
    page is rendered without the request (no user, no messages: nothing reads the database again), the
    session is detached from the request so no later middleware reloads it, and the outage is logged at
    WARNING, without a traceback, since it is the database's state and not a defect.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DatabaseError) and stale_code(exception):
            # This process runs code older than the database (an upgrade under way): not a defect of the
            # page, and only a restart on the new release cures it (docs/deploy.md, "Upgrades"). One line.
            log.warning(
                "%s %s: refused, this process is older than the database: %s", request.method, request.path, exception
            )
            return self._unavailable(request, restart=True)
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        if concurrent_change(exception):  # a deadlock with a concurrent request: nothing was written
            log.warning("%s %s: rolled back for a concurrent change: %s", request.method, request.path, exception)
            from console.views.common import error_page  # the views' own error page (a view module: imported late)

            answer = error_page(request, Conflict(CONCURRENT_CHANGE))  # type: ignore[arg-type]
            answer._has_been_logged = True  # type: ignore[attr-defined]
            return answer
        log.warning("%s %s: database unavailable: %s", request.method, request.path, exception)
        return self._unavailable(request, restart=False)

    @staticmethod
    def _unavailable(request: HttpRequest, *, restart: bool) -> HttpResponse:
        # SessionMiddleware skips a request without a session; with one it would read it again (its expiry)
        # and wait out another pool timeout. The session is not saved on a 5xx answer anyway.
        if hasattr(request, "session"):
            del request.session
        page = render_to_string("console/unavailable.html", {"restart": restart})
        response = HttpResponse(page, status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        response._has_been_logged = True  # type: ignore[attr-defined]  # logged above, at WARNING, not ERROR
        return response
