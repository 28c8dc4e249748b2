"""Shared view plumbing: sign-in for htmx requests, and domain errors rendered as pages."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import Resolver404, resolve
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect, reswap, retarget
from django_htmx.middleware import HtmxDetails

from approvals.errors import DomainError, Forbidden, NotFound

View = Callable[..., HttpResponse]


class HtmxHttpRequest(HttpRequest):
    """A request that went through django-htmx's middleware (django-htmx's documented typing recipe)."""

    htmx: HtmxDetails


class SignedInRequest(HtmxHttpRequest):
    """A request that passed ``console_login_required``: its user has signed in."""

    user: User


SESSION_NOTICE = "#session-notice"  # base.html: where a signed-out answer to a write goes


def console_login_required(view: View) -> View:
    """Like ``login_required``, for htmx requests too, without ever swapping the sign-in page into a table cell.

    An htmx read (a filter, a page of results) whose session ended reloads the whole page at the sign-in
    form. An htmx write (a decision, a comment, a claim) is answered in place, 401, in the page's session
    notice: nothing was recorded, and what was typed stays on the page. Reloading to the sign-in form threw
    away a long reason and a comment draft; the notice's link signs in in a new tab, after which the same
    submit goes through (console.js sends the new sign-in's CSRF token).
    """

    @functools.wraps(view)
    def wrapper(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            if request.htmx:
                sign_in = _sign_in_url(request)
                if request.method in ("GET", "HEAD"):
                    return HttpResponseClientRedirect(sign_in)
                answer = render(request, "console/partials/signed_out.html", {"sign_in": sign_in}, status=401)
                return reswap(retarget(answer, SESSION_NOTICE), "innerHTML")
            if request.method in ("GET", "HEAD"):
                return redirect_to_login(request.get_full_path())
            # A form submitted without JavaScript: nothing was recorded. The sign-in page says so and returns to
            # the page the form was on; it went back to the POST-only URL, a GET of it, with nothing said.
            what = UNRECORDED_DECISION if _url_name(request) == "task-decide" else UNRECORDED_SUBMIT
            query = urlencode({"next": form_page(request), UNRECORDED: what})
            return HttpResponseRedirect(f"{settings.LOGIN_URL}?{query}")
        if request.method not in ("GET", "HEAD") and _drawn_for_another(request):
            # Signed out and in as someone else in another tab: this page still shows the first user, and
            # its write would be recorded as the second (an outside tester's reject was signed by reviewer2
            # from reviewer's page). Nothing is recorded; what was typed stays (htmx: on the page; a plain
            # form: the page says so, and Back returns to the form as it was).
            ctx = {"now": request.user.get_username()}
            if not request.htmx:
                ctx["back"] = form_page(request)
                return render(request, "console/signed_in_as_other.html", ctx, status=409)
            answer = render(request, "console/partials/signed_in_as_other.html", ctx, status=409)
            return reswap(retarget(answer, SESSION_NOTICE), "innerHTML")
        return view(request, *args, **kwargs)

    return wrapper


def _sign_in_url(request: HtmxHttpRequest) -> str:
    """The sign-in form, returning to the page an htmx request was sent from."""
    back = request.htmx.current_url_abs_path or "/"
    return f"{settings.LOGIN_URL}?{urlencode({'next': back})}"


def session_ended(request: HtmxHttpRequest) -> HttpResponse:
    """The answer to an htmx request whose session was deleted while it ran (signed out in another tab): the
    view ran signed in, and Django's session middleware refused to save the deleted session (a 400).

    That 400's bare page was swapped over the request's target — a filter's answer replaced the inbox's
    results with "Bad Request", and every later filter change found no target and sent nothing. A read is
    answered as one that arrived signed out (console.js keeps a page holding typed text and says so). A write
    has already run, so it is not called unrecorded: the session notice says it may have been recorded.
    """
    sign_in = _sign_in_url(request)
    if request.method in ("GET", "HEAD"):
        return HttpResponseClientRedirect(sign_in)
    answer = render(request, "console/partials/session_ended.html", {"sign_in": sign_in}, status=401)
    return reswap(retarget(answer, SESSION_NOTICE), "innerHTML")


# Sent by every htmx request (base.html's hx-headers): the user the page was drawn for.
READER_HEADER = "X-Gatehouse-Reader"
# The same, as a hidden field of every console POST form ({% form_guard %}): a form posted without htmx
# (no JavaScript, or a plain form console.js sends) has no header.
READER_FIELD = "gatehouse_reader"


def _drawn_for_another(request: HttpRequest) -> bool:
    """Whether a write names, as the user its page was drawn for, someone other than the session's user: by
    the htmx header or by the form's hidden field (``{% form_guard %}``), whichever it carries.

    A write that names no one is let through, as before the header and the field: the console's API clients
    authenticate with tokens, not sessions, but a script posting a console form, and a page rendered before
    the field existed (open in a tab across a deploy) send neither, and refusing them would refuse a write
    that gives no sign of a mix-up. The field guards against a page known to be someone else's; proving who
    is signing stays the session's and the CSRF token's job (a token is rotated at each sign-in: a page
    from before the other sign-in fails that check too, unless console.js has refreshed its token).
    """
    me = str(request.user.pk)
    named = (request.headers.get(READER_HEADER), request.POST.get(READER_FIELD))
    return any(drawn_for is not None and drawn_for != me for drawn_for in named)


# The sign-in page's query parameter (console/login.html) for a submit refused because the session had ended.
UNRECORDED = "unrecorded"
UNRECORDED_DECISION = "decision"
UNRECORDED_SUBMIT = "submit"


def _url_name(request: HttpRequest) -> str:
    return request.resolver_match.url_name or "" if request.resolver_match else ""


def form_page(request: HttpRequest) -> str:
    """The page a plain form was submitted from: the Referer on this site, else the URL one level up from the
    form's action when that is a page (``/tasks/<id>/decide`` → ``/tasks/<id>/``), else the inbox."""
    referer = request.headers.get("Referer", "")
    if referer and url_has_allowed_host_and_scheme(referer, {request.get_host()}, require_https=request.is_secure()):
        parts = urlsplit(referer)
        return parts.path + (f"?{parts.query}" if parts.query else "")
    parent = request.path.rstrip("/").rsplit("/", 1)[0] + "/"
    try:
        match = resolve(parent)
    except Resolver404:
        return "/"
    return parent if match.url_name not in (None, _url_name(request)) else "/"


# What a refused write was about, named by the URL's id: "You no longer have access to this task".
_SUBJECTS = {
    "task_id": "task",
    "thread_id": "thread",
    "comment_id": "comment",
    "bulk_id": "bulk decision",
    "user_id": "user",
    "endpoint_id": "webhook endpoint",
    "subscription_id": "webhook subscription",
    "delivery_id": "webhook delivery",
}


def _subject(request: HttpRequest) -> str:
    kwargs = request.resolver_match.kwargs if request.resolver_match else {}
    return next((_SUBJECTS[key] for key in kwargs if key in _SUBJECTS), "page")


def error_page(request: HtmxHttpRequest, exc: DomainError) -> HttpResponse:
    if request.htmx and request.method not in ("GET", "HEAD") and isinstance(exc, (NotFound, Forbidden)):
        # A write refused because its reader may no longer see or do it (access withdrawn while the page was
        # open; a CSRF refusal too) is answered in the session notice, as a write whose session ended is
        # (console_login_required): swapped in place of the form, the 404 threw away a typed reason.
        ctx = {"error": exc, "subject": _subject(request)}
        answer = render(request, "console/partials/write_refused.html", ctx, status=exc.status)
        return reswap(retarget(answer, SESSION_NOTICE), "innerHTML")
    template = "console/partials/error.html" if request.htmx else "console/error.html"
    return render(request, template, {"error": exc}, status=exc.status)


def domain_errors(view: View) -> View:
    """Render a ``DomainError`` (not found, forbidden, conflict, invalid) with its status and message."""

    @functools.wraps(view)
    def wrapper(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except DomainError as exc:
            return error_page(request, exc)

    return wrapper


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Django's CSRF refusal of a console form as a console page (``CSRF_FAILURE_VIEW``): it was Django's bare
    default page. The API answers its own JSON (``csrf_failed``, approvals.api_common)."""
    message = (
        "this form was not sent from the page it belongs to, or that page is too old (the CSRF check failed: "
        f"{reason}). Nothing was recorded: reload the page and send the form again."
    )
    return error_page(request, Forbidden(message))  # type: ignore[arg-type]
