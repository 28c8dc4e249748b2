"""Single sign-on with OpenID Connect (authorization code flow with PKCE), on mozilla-django-oidc.

Mounted at /oidc/ only when ``OIDC_RP_CLIENT_ID`` is set. What this module adds to the library:
- endpoints from the provider's discovery document, fetched on first use and cached, so a
  password sign-in never waits for the provider and start-up never needs it;
- ID tokens checked for audience and issuer (the library checks only the signature, nonce, expiry);
- people identified by issuer + subject (``ExternalIdentity``), never by e-mail, and the userinfo
  ``sub`` must match the ID token's;
- roles and graphs from the configured claim mapping through ``approvals.users.user_sso_sync``,
  audited; claims that map to no role give no access.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from approvals.errors import InvalidInput
from approvals.users import SsoMapping, SsoRefused, sso_mapping_parse, sso_refused, user_sso_sync

log = logging.getLogger(__name__)

DISCOVERY_TTL_SECONDS = 3600
_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
_discovery: dict[str, Any] = {}
_discovery_at = 0.0
_discovery_lock = threading.Lock()


class ProviderUnavailable(Exception):
    pass


def discovery() -> dict[str, Any]:
    """The provider's discovery document (cached); its issuer must be the configured one."""
    global _discovery, _discovery_at
    with _discovery_lock:
        if _discovery and time.monotonic() - _discovery_at < DISCOVERY_TTL_SECONDS:
            return _discovery
        url = f"{settings.OIDC_OP_ISSUER}/.well-known/openid-configuration"
        try:
            response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
            response.raise_for_status()
            document = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise ProviderUnavailable(f"OIDC discovery at {url} failed: {exc}") from exc
        if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != settings.OIDC_OP_ISSUER:
            raise ProviderUnavailable(f"OIDC discovery at {url} names another issuer: {document.get('issuer')!r}")
        _discovery, _discovery_at = document, time.monotonic()
        return _discovery


def oidc_setting(attr: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings lookup, with the endpoints filled in from discovery."""
    if attr in _ENDPOINTS and not getattr(settings, attr):  # each is set ("" for discovery) when SSO is on
        value = discovery().get(_ENDPOINTS[attr])
        if not value:
            raise ProviderUnavailable(f"the provider's discovery document has no {_ENDPOINTS[attr]}")
        return value
    return import_from_settings(attr, *default)


_mapping: SsoMapping | None = None


def mapping() -> SsoMapping:
    global _mapping
    if _mapping is None:
        try:
            _mapping = sso_mapping_parse(settings.GATEHOUSE_OIDC_ROLE_CLAIM, settings.GATEHOUSE_OIDC_MAPPING)
        except InvalidInput as exc:
            raise ImproperlyConfigured(f"{exc.field}: {exc.message}") from None
    return _mapping


class GatehouseOIDCBackend(OIDCAuthenticationBackend):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Every sign-in instantiates every backend: read nothing from the provider here.
        self.UserModel = get_user_model()

    # The library reads these as attributes; resolve them when a sign-in actually uses them.
    OIDC_OP_TOKEN_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_TOKEN_ENDPOINT"))
    OIDC_OP_USER_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_USER_ENDPOINT"))
    OIDC_OP_JWKS_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_JWKS_ENDPOINT"))
    OIDC_RP_CLIENT_ID = property(lambda self: settings.OIDC_RP_CLIENT_ID)
    OIDC_RP_CLIENT_SECRET = property(lambda self: settings.OIDC_RP_CLIENT_SECRET)
    OIDC_RP_SIGN_ALGO = property(lambda self: settings.OIDC_RP_SIGN_ALGO)
    OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        # Only the callback view passes a nonce: a password sign-in with ?code=&state= in its
        # URL must not start a token exchange.
        if request is None or "nonce" not in kwargs:
            return None
        try:
            user: User | None = super().authenticate(request, **kwargs)
            return user
        except (ProviderUnavailable, requests.RequestException) as exc:
            log.warning("single sign-on failed: %s", exc)
            return None
        except SuspiciousOperation as exc:  # a token or userinfo that does not check out: audited
            log.warning("single sign-on refused: %s", exc)
            sso_refused(issuer=settings.OIDC_OP_ISSUER, subject="", username="", reason=str(exc)[:500])
            return None

    def _verify_jws(self, payload: str, key: Any) -> dict[str, Any]:
        header = jwt.get_unverified_header(payload)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(f"ID token algorithm {header.get('alg')!r} is not {self.OIDC_RP_SIGN_ALGO}")
        try:
            return jwt.decode(
                payload,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=settings.OIDC_RP_CLIENT_ID,
                issuer=settings.OIDC_OP_ISSUER,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation(f"ID token rejected: {exc}") from None

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User | None:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            # OpenID Connect Core 5.3.2: the userinfo sub must be the ID token's, or it is not used.
            sso_refused(
                issuer=str(payload.get("iss", "")),
                subject=str(payload.get("sub", ""))[:255],
                username="",
                reason="userinfo is about another subject than the ID token",
            )
            return None
        claims = {**payload, **userinfo}
        username = str(claims.get(settings.GATEHOUSE_OIDC_USERNAME_CLAIM) or claims.get("email") or claims["sub"])
        try:
            return user_sso_sync(
                issuer=str(payload["iss"]),
                subject=str(payload["sub"]),
                username=username,
                email=str(claims.get("email") or ""),
                name=str(claims.get("name") or ""),
                grant=mapping().grant_for(claims),
            )
        except SsoRefused as exc:
            log.info("single sign-on refused for %s: %s", username, exc)
            return None

    def get_user(self, user_id: Any) -> User | None:
        # The library's get_user ignores is_active; a deactivated user's session must not come back.
        user = self.UserModel.objects.filter(pk=user_id, is_active=True).first()
        return user


def axes_exempt(request: HttpRequest, credentials: dict[str, Any] | None) -> bool:
    """django-axes counts failed sign-ins per username and address; an SSO callback has no username,
    so five refusals would lock every SSO user behind the same address out. A callback is no password
    guess (it needs this session's state and a code the provider issued), so axes skips it."""
    return request.path == "/oidc/callback/"


class SsoStart(OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except ProviderUnavailable as exc:
            log.warning("single sign-on unavailable: %s", exc)
            return HttpResponseRedirect("/accounts/login/?sso=unavailable")
        response: HttpResponse = super().get(request)
        return response


class SsoCallback(OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)


# Checked when the URLconf loads (the first request, `manage.py check`): a mapping naming an unknown
# role or graph stops the server with a message naming the entry, not the first person signing in.
mapping()

urlpatterns = [
    path("authenticate/", SsoStart.as_view(), name="authenticate"),
    path("callback/", SsoCallback.as_view(), name="callback"),
]
