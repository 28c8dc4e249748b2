"""The console's error handlers (``handler400`` in ``console.urls``)."""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.contrib.sessions.exceptions import SessionInterrupted
from django.http import HttpRequest, HttpResponse
from django.views import defaults

from console.views.common import session_ended


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 400, except for a session deleted while its request ran (``SessionInterrupted``): that is a
    sign-out, and is answered as one (``common.session_ended``; a plain page read goes to the sign-in form)."""
    if isinstance(exception, SessionInterrupted):
        if getattr(request, "htmx", False):
            return session_ended(request)  # type: ignore[arg-type]  # django-htmx's middleware ran
        if request.method in ("GET", "HEAD"):
            return redirect_to_login(request.get_full_path())
    return defaults.bad_request(request, exception)
