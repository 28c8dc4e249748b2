"""Sign in and out with Django's auth views and Gatehouse templates."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views

from console.forms import LoginForm
from console.middleware import form_text_checked


def _session_length() -> str:
    """How long a session lasts without activity (``SESSION_COOKIE_AGE``), as the sign-in page says it: it
    said "8 hours" whatever the setting was."""
    seconds = int(settings.SESSION_COOKIE_AGE)
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} seconds"


class _LoginView(auth_views.LoginView):
    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "session_ends": _session_length()}


# A NUL byte in the username or password is a form error of its field (Django's CharField refuses it
# before authenticating), shown on the sign-in page rather than as the API's JSON error.
login = form_text_checked(
    _LoginView.as_view(
        template_name="console/login.html",
        redirect_authenticated_user=True,
        authentication_form=LoginForm,  # the username's length enforced
        # Single sign-on (console/sso.py) adds a button when configured.
        extra_context={"sso_button": settings.GATEHOUSE_OIDC_BUTTON},
    )
)
# Django 5 only accepts POST for logout, so a stray GET (a prefetch, a link) cannot sign anyone out.
logout = auth_views.LogoutView.as_view()
