"""Sign in and out with Django's auth views and Gatehouse templates."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views

from console.forms import LoginForm
from console.middleware import form_text_checked

# A NUL byte in the username or password is a form error of its field (Django's CharField refuses it
# before authenticating), shown on the sign-in page rather than as the API's JSON error.
login = form_text_checked(
    auth_views.LoginView.as_view(
        template_name="console/login.html",
        redirect_authenticated_user=True,
        authentication_form=LoginForm,  # the username's length enforced
        # Single sign-on (console/sso.py) adds a button when configured.
        extra_context={"sso_button": settings.GATEHOUSE_OIDC_BUTTON},
    )
)
# Django 5 only accepts POST for logout, so a stray GET (a prefetch, a link) cannot sign anyone out.
logout = auth_views.LogoutView.as_view()
