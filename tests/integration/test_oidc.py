"""Single sign-on, end to end: a real daphne configured for OpenID Connect, the fake provider the
test starts itself (tests/integration/fake_oidc.py), and an HTTP client that follows every redirect
of the real login flow: console → provider authorize → console callback → the page asked for.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals import users
from approvals.models import AuditEvent, ExternalIdentity
from tests.conftest import daphne_serving, scaled, worker_env
from tests.integration.fake_oidc import FakeOidcProvider

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

CLIENT_ID = "gatehouse-console"
MAPPING = {
    "gh-reviewers": {"roles": ["reviewer"], "graphs": ["loan_approval"]},
    "gh-kyc-compliance": {"roles": ["reviewer"], "gates": ["kyc_onboarding:compliance_review"]},
    "gh-auditors": {"roles": ["auditor"]},
    "gh-admins": {"roles": ["admin"], "graphs": ["*"]},
    "gh-graph-only": {"graphs": ["loan_approval"]},  # graphs without a role give no access
}


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeOidcProvider]:
    fake = FakeOidcProvider(client_id=CLIENT_ID, client_secret="s3cret-" + uuid.uuid4().hex).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def server(django_db_setup: None, bank: Any, provider: FakeOidcProvider, tmp_path_factory: pytest.TempPathFactory):
    workdir = Path(tmp_path_factory.mktemp("sso"))
    secret_file = workdir / "client_secret"
    secret_file.write_text(provider.client_secret)
    secret_file.chmod(0o600)
    env = {
        **worker_env(bank),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "SECURE_COOKIES": "false",
        "SECURE_SSL_REDIRECT": "false",
        "OIDC_RP_CLIENT_ID": CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET_FILE": str(secret_file),
        "OIDC_OP_ISSUER": provider.issuer,
        "GATEHOUSE_OIDC_ROLE_CLAIM": "groups",
        "GATEHOUSE_OIDC_MAPPING": json.dumps(MAPPING),
    }
    with daphne_serving(env, workdir / "daphne.log", what="daphne with single sign-on") as (_, base):
        provider.redirect_uris.add(f"{base}/oidc/callback/")
        yield base


@pytest.fixture(autouse=True)
def _honest_provider(provider: FakeOidcProvider) -> Iterator[None]:
    provider.tamper = {}
    provider.login_as = None
    yield
    provider.tamper = {}


def person(**claims: Any) -> dict[str, Any]:
    name = claims.pop("username", f"sso-{uuid.uuid4().hex[:8]}")
    return {
        "sub": uuid.uuid4().hex,
        "preferred_username": name,
        "email": f"{name}@corp.example",
        "name": "Grace Hopper",
        "groups": [],
        **claims,
    }


def sign_in(server: str, provider: FakeOidcProvider, claims: dict[str, Any], next_path: str = "/") -> httpx.Response:
    provider.login_as = claims
    with httpx.Client(follow_redirects=True, timeout=scaled(20)) as browser:
        response = browser.get(f"{server}/oidc/authenticate/", params={"next": next_path})
        response.browser_cookies = dict(browser.cookies)  # type: ignore[attr-defined]
        return response


def _user_events(user: User, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(subject_type="user", subject_id=str(user.pk), action=action).order_by("id"))


def test_the_login_page_offers_single_sign_on(server):
    page = httpx.get(f"{server}/accounts/login/").text
    assert 'href="/oidc/authenticate/"' in page and "Sign in with single sign-on" in page


def test_first_sign_in_creates_the_user_with_mapped_roles_and_graphs(server, provider):
    claims = person(groups=["gh-reviewers", "gh-kyc-compliance", "unmapped-group"])
    response = sign_in(server, provider, claims, "/threads/")
    assert response.status_code == 200 and str(response.url) == f"{server}/threads/", response.url
    assert claims["preferred_username"] in response.text  # signed in, in the header
    assert [hop.url.path for hop in response.history] == ["/oidc/authenticate/", "/authorize", "/oidc/callback/"]

    user = User.objects.get(username=claims["preferred_username"])
    assert user.email == claims["email"] and not user.has_usable_password()
    assert ExternalIdentity.objects.get(user=user).subject == claims["sub"]
    assert users.user_roles(user) == ["reviewer"]
    assert [str(a) for a in users.user_assignments(user)] == ["kyc_onboarding:compliance_review", "loan_approval"]
    [created] = _user_events(user, "user.created")
    assert created.actor_id is None and created.actor_label == "sso"
    assert created.details["issuer"] == provider.issuer and created.details["subject"] == claims["sub"]
    assert len(_user_events(user, "auth.login")) == 1

    # What the session may do follows the mapping: loan tasks yes, the audit trail no.
    cookies = response.browser_cookies  # type: ignore[attr-defined]
    assert httpx.get(f"{server}/audit/", cookies=cookies).status_code == 403


def test_later_sign_ins_update_roles_and_audit_only_changes(server, provider):
    claims = person(groups=["gh-reviewers"])
    assert sign_in(server, provider, claims).status_code == 200
    user = User.objects.get(username=claims["preferred_username"])
    assert sign_in(server, provider, claims).status_code == 200
    assert _user_events(user, "user.access_changed") == []  # nothing changed, nothing written

    claims["groups"] = ["gh-auditors"]
    assert sign_in(server, provider, claims, "/audit/").status_code == 200
    [changed] = _user_events(user, "user.access_changed")
    assert changed.actor_label == "sso"
    assert changed.details["before"]["roles"] == ["reviewer"] and changed.details["after"]["roles"] == ["auditor"]
    assert changed.details["before"]["assignments"] == ["loan_approval"]
    assert changed.details["after"]["assignments"] == []
    assert User.objects.filter(username=claims["preferred_username"]).count() == 1


@pytest.mark.parametrize("groups", [[], ["unmapped"], ["gh-graph-only"]])
def test_claims_that_map_to_no_role_give_no_access_and_create_no_user(server, provider, groups):
    claims = person(groups=groups)
    response = sign_in(server, provider, claims)
    assert str(response.url).endswith("/accounts/login/?sso=failed")
    assert "did not give you access" in response.text
    assert not User.objects.filter(username=claims["preferred_username"]).exists()
    refused = AuditEvent.objects.get(action="auth.sso_refused", details__subject=claims["sub"])
    assert "map to no role" in refused.details["reason"]


def test_a_user_whose_roles_were_removed_at_the_provider_loses_access(server, provider):
    claims = person(groups=["gh-reviewers"])
    sign_in(server, provider, claims)
    user = User.objects.get(username=claims["preferred_username"])
    claims["groups"] = []
    response = sign_in(server, provider, claims)
    assert str(response.url).endswith("/accounts/login/?sso=failed")
    assert users.user_roles(user) == [] and users.user_assignments(user) == []
    [changed] = _user_events(user, "user.access_changed")
    assert changed.details["after"] == {"active": True, "roles": [], "assignments": []}


def test_a_deactivated_user_cannot_come_back_through_sso(server, provider):
    claims = person(groups=["gh-reviewers"])
    sign_in(server, provider, claims)
    user = User.objects.get(username=claims["preferred_username"])
    users.user_deactivate(actor=users.CLI, user_id=user.pk)
    response = sign_in(server, provider, claims)
    assert str(response.url).endswith("/accounts/login/?sso=failed")
    assert not User.objects.get(pk=user.pk).is_active


def test_an_sso_identity_never_takes_over_a_local_account_with_the_same_name(server, provider):
    local = users.user_create(actor=users.CLI, username=f"local-{uuid.uuid4().hex[:8]}", roles=["admin"])
    claims = person(username=local.username, groups=["gh-admins"])
    response = sign_in(server, provider, claims)
    assert str(response.url).endswith("/accounts/login/?sso=failed")
    assert not ExternalIdentity.objects.filter(user=local).exists()
    assert AuditEvent.objects.filter(action="auth.sso_refused", details__subject=claims["sub"]).exists()


@pytest.mark.parametrize(
    "tamper",
    [
        {"aud": "another-client"},
        {"iss": "https://evil.example"},
        {"foreign_key": True},
        {"userinfo_sub": "someone-else"},
    ],
    ids=["wrong audience", "wrong issuer", "signed by another key", "userinfo about someone else"],
)
def test_a_provider_that_misbehaves_signs_nobody_in(server, provider, tamper):
    provider.tamper = tamper
    claims = person(groups=["gh-admins"])
    refusals = AuditEvent.objects.filter(action="auth.sso_refused").count()
    response = sign_in(server, provider, claims)
    assert str(response.url).endswith("/accounts/login/?sso=failed"), response.url
    cookies = response.browser_cookies  # type: ignore[attr-defined]
    assert httpx.get(f"{server}/", cookies=cookies).status_code == 302  # not signed in
    assert not User.objects.filter(username=claims["preferred_username"]).exists()
    assert AuditEvent.objects.filter(action="auth.sso_refused").count() == refusals + 1


def test_a_callback_with_a_forged_state_is_refused(server, provider):
    provider.login_as = person(groups=["gh-admins"])
    with httpx.Client(follow_redirects=False, timeout=scaled(20)) as browser:
        start = browser.get(f"{server}/oidc/authenticate/")
        assert start.status_code == 302
        authorize = browser.get(start.headers["location"])
        code = httpx.URL(authorize.headers["location"]).params["code"]
        forged = browser.get(f"{server}/oidc/callback/", params={"code": code, "state": "forged"})
    assert forged.status_code == 400
    assert not User.objects.filter(username=provider.login_as["preferred_username"]).exists()


def test_password_sign_in_still_works_and_never_calls_the_provider(server, provider, personas):
    before = list(provider.requests)
    with httpx.Client(timeout=scaled(20)) as browser:
        browser.get(f"{server}/accounts/login/")
        token = browser.cookies["csrftoken"]
        response = browser.post(
            f"{server}/accounts/login/",
            data={"username": personas["reviewer"].username, "password": "gatehouse", "csrfmiddlewaretoken": token},
            headers={"Referer": f"{server}/accounts/login/"},
        )
    assert response.status_code == 302 and response.headers["location"] == "/"
    assert provider.requests == before


def test_without_configuration_there_is_no_single_sign_on():
    # This test process has no OIDC_RP_CLIENT_ID: no routes, no button, no backend.
    from django.conf import settings

    assert not settings.GATEHOUSE_OIDC_ENABLED
    assert Client().get("/oidc/authenticate/").status_code == 404
    assert b"single sign-on" not in Client().get("/accounts/login/").content
    assert "console.sso.GatehouseOIDCBackend" not in settings.AUTHENTICATION_BACKENDS
