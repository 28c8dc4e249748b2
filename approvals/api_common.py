"""What both HTTP APIs share (native ``/api/`` and LangGraph-Platform ``/lg/``): token auth and one error shape.

``api_errors_install`` is the one place that turns domain errors, validation
errors, failed authentication and ninja's own HTTP errors into responses; each
API says only how its error body looks and what a caller without a token is told.
``GatehouseAPI`` answers a method a path does not serve in that shape too.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator
from inspect import iscoroutinefunction
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import BadRequest, ImproperlyConfigured, PermissionDenied, SuspiciousOperation
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import URLPattern, URLResolver, path, re_path, reverse
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.operation import PathView
from ninja.security import APIKeyHeader, HttpBearer, SessionAuth

from approvals.errors import DomainError, Forbidden, InvalidInput, NotFound, validation_error_describe
from approvals.inputs import parse_error_of
from approvals.permissions import TOKEN_NEEDS_ATTR, TOKEN_SCOPE_ATTR, access_load, token_actions_for
from approvals.security import request_token_mark
from approvals.tokens import token_authenticate
from runtime.notify import waits_skipped
from runtime.retry import concurrent_change, stale_code

log = logging.getLogger(__name__)

# How long a client is told to wait before retrying what the database could not serve (APIs, pages, metrics).
RETRY_AFTER_SECONDS = 5

# A request PostgreSQL rolled back for a concurrent one (runtime.retry.concurrent_change), on every surface.
CONCURRENT_CHANGE = "another request changed the same records at the same moment; nothing was written: send it again"

# What a request refused for running code older than the schema (``runtime.retry.stale_code``) is told:
# it was refused whole, and only restarting the process on the new code makes it succeed.
STALE_CODE = (
    "this server process runs code older than the database schema (an upgrade is under way or it was not "
    "restarted after one); nothing was written: restart this process on the new release, then retry"
)


# The actions that change nothing: a POST whose view declares only these reads (a search with its filters in a body).
READ_ONLY_ACTIONS = {"read"}

# (code, message, field) → the JSON body of an error response.
ErrorBody = Callable[[str, str, str | None], dict[str, Any]]


class MethodNotAllowed(DomainError):
    status = 405
    code = "method_not_allowed"


class GatehouseAPI(NinjaAPI):
    """A NinjaAPI whose every answer is JSON: ninja answers a method no operation of a path serves with
    a bare text 405; here it is the API's error body (``api_errors_install``), with the ``Allow`` header.

    ``refused_methods``: (method, path pattern below the API's root, why) for calls of the protocol the API
    refuses on purpose: their 405 (or, on a path no operation serves, their 404) says why.

    ``not_served``: paths (regular expressions, below the API's root) of a protocol's calls the API does not
    serve whose paths an operation's pattern takes (``threads/prune`` reads as ``threads/{thread_id}``).
    A method no operation serves there is the 404 of any path not served, not a 405 naming a method that
    fails there too; the methods served answer as they do.

    Every POST, PUT, PATCH and DELETE a token may call declares the permissions it acts under
    (``permissions.token_needs``); building the URLs refuses one that does not. A token whose actions hold
    none of them is refused there before any refusal of what it sent (``token_action_refusal``); a POST that
    declares only reading permissions (a search with its filters in a body) is not refused so.
    """

    def __init__(
        self,
        *args: Any,
        not_served: tuple[str, ...] = (),
        refused_methods: tuple[tuple[str, str, str], ...] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.not_served = _paths_pattern(not_served)
        self.refused_methods = [(method, re.compile(p), why) for method, p, why in refused_methods]

    def refused_because(self, request: HttpRequest) -> str:
        """Why the API does not serve the request's method on its path, where it says (``refused_methods``:
        method, path pattern below the root, reason): a client told only "405" retries elsewhere."""
        below = self._below_root(request)
        return next((why for m, p, why in self.refused_methods if m == request.method and p.fullmatch(below)), "")

    def _below_root(self, request: HttpRequest) -> str:
        return request.path.removeprefix(reverse(f"{self.urls_namespace}:api-root"))

    def path_not_served(self, request: HttpRequest) -> bool:
        return self.not_served is not None and bool(self.not_served.fullmatch(self._below_root(request)))

    @property
    def urls(self) -> tuple[list[URLResolver | URLPattern], str, str]:
        patterns, app_name, namespace = super().urls
        # A literal segment wins over a parameter where both match (POST /threads/{id}/runs/crons is not a run
        # id's 405): fewer parameters first; otherwise the order the operations were declared in.
        patterns = sorted(patterns, key=lambda p: str(getattr(p, "pattern", "")).count("<"))
        answered = [self._served(p) for p in patterns]
        return [*answered, re_path(r"^.*$", csrf_exempt(self.path_unknown))], app_name, namespace

    def _served(self, pattern: URLResolver | URLPattern) -> URLResolver | URLPattern:
        if getattr(pattern, "name", None) == "api-root":
            # ninja's "api-root" (reversed for the schema's base path) answered Django's HTML 404: keep the
            # name, answer as any unknown path does.
            return path("", csrf_exempt(self.path_unknown), name="api-root")
        return ServedPattern(self, pattern).url_pattern() if isinstance(pattern, URLPattern) else pattern

    def path_unknown(self, request: HttpRequest) -> HttpResponseBase:
        """Any path under the API that no operation serves: the API's JSON 404, not Django's HTML page; with the
        reason the API gives for a call it refuses on purpose (``refused_methods``)."""
        why = self.refused_because(request)
        slash = " (its paths end without a slash)" if request.path.endswith("/") else ""
        listed = f": {why}" if why else f"{slash}; its OpenAPI docs list them"
        error = NotFound(f"{request.path} is not a path of this API{listed}", field="path")
        return self.on_exception(request, error)


def _paths_pattern(paths: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{p})" for p in paths)) if paths else None


class ServedPattern:
    """One URL pattern of a ``GatehouseAPI``, as the API serves it around ninja's view (the pattern's
    ``PathView``, whose operations each serve some methods):

    - a method none of them serves is the API's JSON error (``refusal``), not ninja's text 405;
    - HEAD is handled as GET where GET is served (``head_as_get``): HTTP asks every server to, and monitors
      and link checkers send it (LangGraph Server's routes do); the server sends the headers alone;
    - each method that writes carries the permissions its view acts under (``token_perms``), read by
      ``_route_perms`` to refuse a token before anything it sent is judged.
    """

    def __init__(self, api: GatehouseAPI, pattern: URLPattern) -> None:
        self.api = api
        self.pattern = pattern
        self.view = pattern.callback
        self.path_view = _path_view(self.view)
        self.serves_get = self.path_view is not None and any("GET" in op.methods for op in self.path_view.operations)
        self.token_perms = self._token_perms_by_method()

    def url_pattern(self) -> URLPattern:
        view = self.view

        @functools.wraps(view)
        async def serving_async(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            with self.head_as_get(request):
                response = self.refusal(request, await view(request, *args, **kwargs))
            return _headers_only(request, response)

        @functools.wraps(view)
        def serving(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            with self.head_as_get(request):
                response = self.refusal(request, view(request, *args, **kwargs))
            return _headers_only(request, response)

        wrapped = serving_async if iscoroutinefunction(view) else serving
        setattr(wrapped, _TOKEN_PERMS_ATTR, self.token_perms)
        return URLPattern(self.pattern.pattern, wrapped, self.pattern.default_args, self.pattern.name)

    def refusal(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        """ninja's 405 as the API's error with ``Allow`` (and the reason the API gives for that method there),
        or the 404 of a path not served; any other response as it is."""
        if not isinstance(response, HttpResponseNotAllowed):
            return response
        if self.api.path_not_served(request):
            return self.api.path_unknown(request)
        allowed = response["Allow"]
        why = self.api.refused_because(request)
        message = f"{request.method} is not served here" + (f": {why}" if why else "")
        error = self.api.on_exception(request, MethodNotAllowed(f"{message}; this path serves {allowed}"))
        error["Allow"] = allowed
        return error

    @contextlib.contextmanager
    def head_as_get(self, request: HttpRequest) -> Iterator[None]:
        """A HEAD is handled as the GET it asks about (the operation, its auth and token checks read the
        method); the request says HEAD again once answered, for the access log."""
        if request.method != "HEAD" or not self.serves_get:
            yield
            return
        request.method = "GET"
        try:
            with waits_skipped():  # a long poll's headers now, not after its wait
                yield
        finally:
            request.method = "HEAD"

    def _token_perms_by_method(self) -> dict[str, tuple[str, ...]]:
        """Each method that writes → the permissions its view declares it acts under
        (``permissions.token_needs``), left out where they only read. A method an API token may call (the
        operation authenticates) that declares none is a defect, refused here: its refusal would come after
        its body's."""
        if self.path_view is None:
            return {}  # the API's root, its OpenAPI document and docs: read-only
        needs: dict[str, tuple[str, ...]] = {}
        for operation in self.path_view.operations:
            for method in operation.methods:
                if method not in _UNSAFE_METHODS or not operation.auth_callbacks:
                    continue
                perms = getattr(operation.view_func, TOKEN_NEEDS_ATTR, None)
                if not perms:
                    name = getattr(operation.view_func, "__qualname__", operation.view_func)
                    raise ImproperlyConfigured(
                        f"{method} {operation.path} ({name}) declares no permission: decorate its view with "
                        "approvals.permissions.token_needs(...)"
                    )
                if not token_actions_for(perms) <= READ_ONLY_ACTIONS:
                    needs[method] = tuple(perms)
        return needs


def _path_view(view: Callable[..., Any]) -> PathView | None:
    """The ``PathView`` whose operations a pattern's view serves (the view's ``self``); None for the API's
    root, its OpenAPI document and docs."""
    path_view = inspect.getclosurevars(view).nonlocals.get("self") if inspect.isfunction(view) else None
    return path_view if isinstance(path_view, PathView) else None


# The methods that may change something; and where a pattern's view keeps, for each of them its operations
# serve, the permissions it acts under, one of which a token's actions must allow (``ServedPattern``).
_UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
_TOKEN_PERMS_ATTR = "gatehouse_token_perms"  # noqa: S105 - an attribute's name, not a secret


def error_body_gatehouse(code: str, message: str, field: str | None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}


class AuthedRequest(HttpRequest):
    """A request one of the API's auth classes let through: ninja sets ``auth`` to what it returned, the user."""

    auth: User


class BearerAuth(HttpBearer):
    """``Authorization: Bearer <token>``; ``mark_fresh``: a token that authenticated counts as a fresh sign-in."""

    def __init__(self, *, mark_fresh: bool = False) -> None:
        super().__init__()
        self.mark_fresh = mark_fresh

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = token_route_check(request, token_authenticate(token))
        if user is not None and self.mark_fresh:
            request_token_mark(request)
        return user


class ApiKeyAuth(APIKeyHeader):
    """``x-api-key``: how ``langgraph_sdk`` sends ``api_key``."""

    param_name = "x-api-key"

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        return token_route_check(request, token_authenticate(key)) if key else None


def params_unknown_refuse(
    request: HttpRequest, known: frozenset[str], *, what: str, empty_allowed: frozenset[str] = frozenset()
) -> None:
    """Refuse, naming it, a query parameter ``what`` (a list, an export) does not take: a filter it did not
    apply answered the whole list, read as the filtered one. ``empty_allowed``: names taken only when empty
    (the console's export links carry the audit page's blank ``before``)."""
    for name, values in request.GET.lists():
        if name in known or (name in empty_allowed and not any(values)):
            continue
        raise InvalidInput(f"unknown parameter {name!r} ({what} takes {', '.join(sorted(known))})", field=name)


def token_route_check(request: HttpRequest, user: User | None) -> User | None:
    """``user``, authenticated by an API token, unless the token's actions hold none of those the route needs:
    then its refusal, raised as authentication ends, before the body is read and before any service runs. Every
    write is refused so, whatever the service would check (releasing one's own claim checks no permission)."""
    refusal = token_action_refusal(request, user) if user is not None else None
    if refusal is not None:
        raise refusal
    access_load_for_write(request, user)
    return user


def access_load_for_write(request: HttpRequest, user: Any) -> None:
    """Read what ``user`` may do as it authenticates for a write (a token on PostgreSQL has it already): a refusal
    of what it sent consults the role (``role_action_refusal``), and an async view's error handler runs on the
    event loop, where no query may be made."""
    if user is not None and request.method in _UNSAFE_METHODS:
        access_load(user)


class SessionAuthLoaded(SessionAuth):
    """ninja's session auth (a signed-in console user calling the API, with its CSRF check), reading the user's
    permissions as it authenticates a write, as the token auths do (``access_load_for_write``)."""

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = super().authenticate(request, key)
        access_load_for_write(request, user or None)
        return user


# Exceptions Django turns into a 4xx itself: the catch-all leaves them to it.
_DJANGO_ANSWERS = (Http404, PermissionDenied, SuspiciousOperation, BadRequest)


# Refusals of what a request sent (its body, path or query, an id naming nothing it may see): a token that may not
# use the route hears its own refusal first, the same for whatever it sent (so it learns nothing of what exists).
_INPUT_REFUSALS = (400, 404, 413, 415, 422)
# Refusals of the shape of what it sent (not of an id naming nothing it may see: that stays a 404 for everyone, so
# an object's existence never depends on who asks): a role that may not use the route hears its own refusal instead.
_SHAPE_REFUSALS = (400, 413, 415, 422)


def token_action_refusal(request: HttpRequest, user: Any = None) -> Forbidden | None:
    """The refusal owed to a request that writes made with an API token whose actions hold none of those the
    route needs (``permissions.token_needs`` on its view): answered before any refusal of what it sent, so a
    client cannot probe how a route it may not use validates its body (a malformed decision was a 422 to a
    token limited to ``start``, a well-formed one a 403). Raised as the token authenticates
    (``token_route_check``), so it also refuses a write no service checks (releasing one's own claim);
    ``respond`` applies it again to a refusal made before authentication. One dict lookup: the route's needs
    are read once, when the URLs are built."""
    principal = user if user is not None else getattr(request, "auth", None)
    scope = getattr(principal, TOKEN_SCOPE_ATTR, None)
    if principal is None or not scope or not scope[1]:
        return None
    perms = _route_perms(request)
    if not perms:
        return None
    # As ``permissions.token_refusal``: the token is the reason only where the role grants what the route acts
    # under; where it grants none of it, the role is the reason, and the service says so (as to a session).
    needed = token_actions_for(tuple(perm for perm in perms if principal.has_perm(perm)))
    if not needed or not needed.isdisjoint(scope[1]):
        return None
    return Forbidden(
        f"this API token is limited to {', '.join(sorted(scope[1]))}: {request.method} {request.path} needs the "
        f"{' or '.join(repr(action) for action in sorted(needed))} action"
    )


def _route_perms(request: HttpRequest) -> tuple[str, ...] | None:
    """The permissions the request's route acts under for its method (``ServedPattern.token_perms``), if it
    writes."""
    match = request.resolver_match
    return getattr(match.func, _TOKEN_PERMS_ATTR, {}).get(request.method) if match is not None else None


def role_action_refusal(request: HttpRequest) -> Forbidden | None:
    """The refusal owed to a write by someone whose role holds none of the permissions the route acts under
    (``permissions.token_needs`` on its view), whatever credential they sent: answered in place of a refusal of
    what they sent (an auditor's decision with no body was a 422 ``body: Field required``, a well-formed one a
    403), so a role learns nothing of how a route it may not use validates its input. Where the role holds one
    of them, the service judges the rest (a graph, a gate, a claim) and says so itself."""
    principal = getattr(request, "auth", None)
    perms = _route_perms(request)
    if principal is None or not perms or any(principal.has_perm(perm) for perm in perms):
        return None
    return Forbidden(f"you may not {request.method} {request.path}: your role holds none of {', '.join(sorted(perms))}")


def api_errors_install(
    api: GatehouseAPI, *, body: ErrorBody, unauthenticated: str, unauthenticated_field: str | None = None
) -> None:
    """Install the error handlers every API shares on ``api``."""

    def respond(request: HttpRequest, status: int, code: str, message: str, field: str | None = None) -> HttpResponse:
        if status in _INPUT_REFUSALS:
            refusal = token_action_refusal(request)
            if refusal is None and status in _SHAPE_REFUSALS:
                refusal = role_action_refusal(request)
            if refusal is not None:
                status, code, message, field = refusal.status, refusal.code, refusal.message, refusal.field
        return api.create_response(request, body(code, message, field), status=status)

    def on_domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
        response = respond(request, exc.status, exc.code, exc.message, exc.field)
        if exc.status == 503:  # unavailable for now (a stopping server): say when to try again
            response["Retry-After"] = "1"
            # Not a defect: one WARNING line, not Django's ERROR "Service Unavailable" for each open wait.
            log.warning("%s %s: %s", request.method, request.path, exc.message)
            response._has_been_logged = True  # type: ignore[attr-defined]
        return response

    def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        error = validation_error_describe(exc.errors)
        return respond(request, error.status, error.code, error.message, error.field)

    def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        return respond(request, 401, "unauthenticated", unauthenticated, unauthenticated_field)

    def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        parse_error = parse_error_of(exc)
        if parse_error is not None:
            return respond(request, parse_error.status, parse_error.code, parse_error.message, parse_error.field)
        if exc.status_code == 400 and "parse request body" in str(exc):
            return respond(request, 400, "malformed_json", f"request body is not valid JSON: {exc}", "body")
        if exc.status_code == 403 and "CSRF" in str(exc):  # a signed-in browser session writing without its token
            if settings.SESSION_COOKIE_NAME not in request.COOKIES:
                # No session to forge a request for: ninja checks CSRF before it sees no credentials at all.
                return respond(request, 401, "unauthenticated", unauthenticated, unauthenticated_field)
            message = "CSRF check failed: send the csrftoken cookie's value as X-CSRFToken, or use an API token"
            return respond(request, 403, "csrf_failed", message, "X-CSRFToken")
        return respond(request, exc.status_code, "error", str(exc))

    def on_database_unavailable(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
        if concurrent_change(exc):  # PostgreSQL ended it for a concurrent request (a deadlock): nothing written
            log.warning("%s %s: rolled back for a concurrent change: %s", request.method, request.path, exc)
            response = respond(request, 409, "conflict", CONCURRENT_CHANGE)
            response["Retry-After"] = "1"
            response._has_been_logged = True  # type: ignore[attr-defined]
            return response
        # The database down or out of connections: a JSON answer a client can retry on, not an HTML 500.
        log.warning("%s %s: database unavailable: %s", request.method, request.path, exc)
        response = respond(request, 503, "unavailable", "the database cannot be reached right now; retry shortly")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        # Logged above, at WARNING: Django's handler would add ERROR "Service Unavailable" for every request.
        response._has_been_logged = True  # type: ignore[attr-defined]
        return response

    def on_database_refusal(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
        if not stale_code(exc):
            return on_unexpected(request, exc)
        # Not a defect of this request: the process must be restarted (docs/deploy.md, "Upgrades"). One line.
        log.warning("%s %s: refused, this process is older than the database: %s", request.method, request.path, exc)
        response = respond(request, 503, "restart_required", STALE_CODE)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        response._has_been_logged = True  # type: ignore[attr-defined]
        return response

    def on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
        # A defect: logged once with its traceback, answered in the API's JSON error body. Ninja's default
        # re-raised it to Django, whose answer is an HTML "Server Error (500)" page a client cannot parse.
        if isinstance(exc, _DJANGO_ANSWERS):  # Django's own 4xx (a body too big, a bad Host): as it answers them
            raise exc
        log.error("%s %s: unexpected error", request.method, request.path, exc_info=exc)
        message = "an unexpected error occurred; it has been logged (quote the X-Request-ID header to report it)"
        response = respond(request, 500, "internal", message)
        response._has_been_logged = True  # type: ignore[attr-defined]  # Django would log it again, without its cause
        return response

    api.exception_handler(Exception)(on_unexpected)
    api.exception_handler(DomainError)(on_domain_error)
    api.exception_handler(DatabaseError)(on_database_refusal)
    api.exception_handler(OperationalError)(on_database_unavailable)
    api.exception_handler(InterfaceError)(on_database_unavailable)
    api.exception_handler(ValidationError)(on_validation_error)
    api.exception_handler(AuthenticationError)(on_auth_error)
    api.exception_handler(HttpError)(on_http_error)


async def _no_body() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that yields nothing


def _headers_only(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """A HEAD's answer to a GET that streams (a run's or a thread's events): its headers, and a stream never
    started. The server drops a HEAD's body, but only as it sends it: the stream would have run (and held the
    request) for as long as the GET's would."""
    if request.method == "HEAD" and isinstance(response, StreamingHttpResponse):
        response.streaming_content = _no_body() if response.is_async else iter(())
    return response
