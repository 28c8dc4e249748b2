"""User administration pages: the admin's list, create (with a one-time set-password link), detail with
effective permissions, htmx changes with CSRF, the set-password page, and no /admin/ door."""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals import users
from approvals.models import AuditEvent
from console.templatetags.console import errors_besides
from tests.console.conftest import console_client
from tests.external.conftest import create, engine_persona, task_body

pytestmark = pytest.mark.usefixtures("live_db")


def _name(prefix: str = "u") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_django_admin_is_not_mounted():
    # A second door to users and permissions, outside the policy, OTP and the audit trail: gone.
    assert Client().get("/admin/").status_code == 404
    assert Client().get("/admin/login/").status_code == 404


@pytest.mark.parametrize("role,sees", [("admin", True), ("auditor", False), ("operator", False), ("reviewer", False)])
def test_only_admins_get_the_users_link(personas, role, sees):
    page = console_client(personas[role]).get("/").content.decode()
    assert ('href="/users/"' in page) is sees


def test_the_list_shows_roles_graphs_state_and_last_sign_in(personas):
    name = _name("list")
    user = users.user_create(
        actor=users.CLI,
        username=name,
        roles=["reviewer"],
        assignments=[users.Assignment("kyc_onboarding", "compliance_review")],
    )
    users.user_deactivate(actor=users.CLI, user_id=user.pk)
    page = console_client(personas["admin"]).get("/users/", {"q": name}).content.decode()
    row = re.search(rf'<tr data-user="{name}">(.*?)</tr>', page, re.S)
    assert row, page
    assert "reviewer" in row.group(1) and "kyc_onboarding:compliance_review" in row.group(1)
    assert "Deactivated" in row.group(1) and "never" in row.group(1)
    active_only = console_client(personas["admin"]).get("/users/", {"q": name, "state": "active"}).content.decode()
    assert f'data-user="{name}"' not in active_only


@pytest.mark.parametrize(
    ("roles", "assignments", "says"),
    [
        (["auditor"], [], "every graph (by role)"),
        (["admin"], [], "every graph (by role)"),
        (["reviewer"], [], "none"),
        (["reviewer"], [users.Assignment("*")], "every graph"),
    ],
)
def test_the_list_says_who_sees_every_graph_by_role(personas, roles, assignments, says):
    """An auditor read "Graphs and gates: none" though auditors (and admins) see every graph."""
    name = _name("scope")
    users.user_create(actor=users.CLI, username=name, roles=roles, assignments=assignments)
    page = console_client(personas["admin"]).get("/users/", {"q": name}).content.decode()
    row = re.search(rf'<tr data-user="{name}">(.*?)</tr>', page, re.S)
    assert row, page
    graphs = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)[2]
    assert " ".join(re.sub(r"<[^>]+>", "", graphs).split()) == says


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({}, "no role and no graph"),
        ({"roles": ["reviewer"]}, "no graph"),
        ({"assign": ["loan_approval"]}, "no role"),
    ],
)
def test_an_account_created_without_a_role_or_a_graph_is_said_to_do_nothing(personas, form, says):
    """It was created silently: a user who could sign in and see nothing, with nobody told why."""
    html = console_client(personas["admin"]).post("/users/new", {"username": _name("bare"), **form}).content.decode()
    notice = html.split('id="created-no-access"', 1)[1].split("</p>", 1)[0]
    assert f"has {says}:" in notice


def test_an_auditor_sees_every_graph_without_one_assigned(personas):
    html = console_client(personas["admin"]).post("/users/new", {"username": _name("aud"), "roles": ["auditor"]})
    assert 'id="created-no-access"' not in html.content.decode()


def test_an_admin_creates_a_user_who_sets_a_password_from_the_link_and_signs_in(personas):
    admin = console_client(personas["admin"])
    name = _name("new")
    response = admin.post(
        "/users/new",
        {"username": name, "email": f"{name}@example.org", "roles": ["reviewer"], "assign": ["loan_approval"]},
    )
    assert response.status_code == 200, response.content[:500]
    assert 'id="created-no-access"' not in response.content.decode()
    link = re.search(r'value="(http://testserver/accounts/set-password/[^"]+)"', response.content.decode()).group(1)
    user = User.objects.get(username=name)
    assert users.user_roles(user) == ["reviewer"]
    assert [str(a) for a in users.user_assignments(user)] == ["loan_approval"]

    person = Client()
    form = person.get(link.removeprefix("http://testserver"), follow=True)  # Django hides the token behind a redirect
    assert form.status_code == 200 and b"Choose a password" in form.content
    page = form.redirect_chain[-1][0]
    weak = person.post(page, {"new_password1": "abc", "new_password2": "abc"})
    assert weak.status_code == 200 and b"too short" in weak.content
    done = person.post(page, {"new_password1": "correct-horse-battery-9", "new_password2": "correct-horse-battery-9"})
    assert done.status_code == 302 and done.url == f"/accounts/login/?password=set&username={name}"
    # The sign-in page knows who just chose a password: it asks only for the password.
    sign_in = person.get(done.url).content.decode()
    assert f'value="{name}"' in sign_in and re.search(r'id="id_password"[^>]*autofocus', sign_in)
    assert "Your password is set" in sign_in
    assert person.post("/accounts/login/", {"username": name, "password": "correct-horse-battery-9"}).status_code == 302
    assert b"Inbox" in person.get("/").content
    # The link works once.
    again = Client().get(link.removeprefix("http://testserver"), follow=True)
    assert b"not valid" in again.content
    actions = list(
        AuditEvent.objects.filter(subject_type="user", subject_id=str(user.pk)).values_list("action", "actor_label")
    )
    assert ("user.created", personas["admin"].username) in actions
    assert ("user.password_reset", personas["admin"].username) in actions
    assert ("user.password_set", name) in actions


def test_a_set_password_link_stops_working_when_its_account_is_deactivated(personas):
    """A deactivated user set a password from a link issued before: "Your password is set", the account showed
    a password set after its deactivation, and sign-in then said the password did not match."""
    admin = console_client(personas["admin"])
    name = _name("gone")
    created = admin.post("/users/new", {"username": name, "email": f"{name}@example.org", "roles": ["reviewer"]})
    link = re.search(r'value="(http://testserver/accounts/set-password/[^"]+)"', created.content.decode()).group(1)
    user = User.objects.get(username=name)
    person = Client()
    form = person.get(link.removeprefix("http://testserver"), follow=True)
    page = form.redirect_chain[-1][0]  # the form, opened before the deactivation
    users.user_deactivate(actor=personas["admin"].user, user_id=user.pk, reason="left")
    done = person.post(page, {"new_password1": "correct-horse-battery-9", "new_password2": "correct-horse-battery-9"})
    assert done.status_code == 200 and b"not valid" in done.content
    assert b"not valid" in Client().get(link.removeprefix("http://testserver"), follow=True).content
    user.refresh_from_db()
    assert not user.has_usable_password()
    assert not AuditEvent.objects.filter(subject_type="user", subject_id=str(user.pk), action="user.password_set")
    with pytest.raises(users.Forbidden):
        users.user_password_set_by_link(user=user, password="correct-horse-battery-9")


@pytest.mark.parametrize(
    "form,field,message",
    [
        ({"username": ""}, "username", "a username is required"),
        ({"username": "two words"}, "username", "may contain only"),
        ({"email": "nope"}, "email", "is not an e-mail address"),
        ({"roles": ["superhero"]}, "roles", "unknown role"),
        ({"assign": ["no_such_graph"]}, "graphs", "unknown graph"),
    ],
)
def test_bad_input_on_the_create_form_is_shown_at_its_field_and_creates_nothing(personas, form, field, message):
    before = User.objects.count()
    response = console_client(personas["admin"]).post("/users/new", {"username": _name(), **form})
    assert response.status_code == 422
    assert message in response.content.decode()
    assert User.objects.count() == before


@pytest.mark.parametrize(
    "field,slot,value,message",
    [
        ("first_name", "u-first-err", "Ada\x07", "control characters are not allowed"),
        ("first_name", "u-first-err", "A" * 151, "at most 150 characters"),
        ("last_name", "u-last-err", "Love\x1blace", "control characters are not allowed"),
        ("last_name", "u-last-err", "L" * 151, "at most 150 characters"),
    ],
)
def test_a_refused_name_is_shown_beside_its_field(personas, field, slot, value, message):
    """A 422 with no error text anywhere: the form had no slot for first_name or last_name."""
    before = User.objects.count()
    response = console_client(personas["admin"]).post("/users/new", {"username": _name(), field: value})
    assert response.status_code == 422
    shown = response.content.decode().split(f'id="{slot}"', 1)[1].split("</p>", 1)[0]
    assert message in shown
    assert User.objects.count() == before


def test_an_error_of_a_field_the_form_has_no_slot_for_is_said_above_it_naming_the_field():
    errors = {"username": "taken", "user_id": "user 7 not found", "__all__": "try again"}
    assert errors_besides(errors, "username email") == ["user_id: user 7 not found", "try again"]


def test_the_detail_page_shows_effective_permissions_per_graph_and_gate(personas):
    user = users.user_create(
        actor=users.CLI,
        username=_name("eff"),
        roles=["reviewer"],
        assignments=[users.Assignment("kyc_onboarding", "compliance_review")],
    )
    page = console_client(personas["admin"]).get(f"/users/{user.pk}/").content.decode()
    kyc = re.search(r'<tr data-graph="kyc_onboarding">(.*?)</tr>', page, re.S).group(1)
    assert "<code>compliance_review</code>" in kyc and "identity_check" not in kyc
    loan = re.search(r'<tr data-graph="loan_approval">(.*?)</tr>', page, re.S).group(1)
    assert loan.count("yes") == 0  # not assigned: sees nothing, decides nothing


def test_an_external_source_with_tasks_is_named_so_and_offered_on_both_forms(personas):
    """The detail page said "external:payments not registered"; the new-user form offered no external:<source>."""
    engine = engine_persona(f"pay-{uuid.uuid4().hex[:8]}")
    source = engine.username.removeprefix("engine-")
    assert create(engine.client, task_body(source)).status_code == 201
    graph = f"external:{source}"
    admin = console_client(personas["admin"])

    new_form = admin.get("/users/new").content.decode()
    assert f'name="assign" value="{graph}"' in new_form
    name = _name("ext")
    made = admin.post("/users/new", {"username": name, "roles": ["reviewer"], "assign": [graph]})
    assert made.status_code == 200, made.content.decode()
    user = User.objects.get(username=name)
    assert [str(a) for a in users.user_assignments(user)] == [graph]

    page = admin.get(f"/users/{user.pk}/").content.decode()
    row = re.search(rf'<tr data-graph="{graph}">(.*?)</tr>', page, re.S).group(1)
    assert "not registered" not in row and "external source" in row
    assert f'name="assign" value="{graph}" checked' in page
    other = users.user_create(actor=users.CLI, username=_name("ext2"), roles=["reviewer"])
    offered = admin.get(f"/users/{other.pk}/").content.decode()
    assert f'name="assign" value="{graph}"' in offered  # offered to a user who does not hold it yet


def test_resetting_otp_devices_asks_first_saying_what_is_lost(personas):
    """It ran on one click, unlike Deactivate and Reset password beside it: the user's authenticators stop."""
    user = users.user_create(actor=users.CLI, username=_name("otp"), roles=["reviewer"])
    html = console_client(personas["admin"]).get(f"/users/{user.pk}/").content.decode()
    form = html.split(f'hx-post="/users/{user.pk}/otp"', 1)[1].split(">", 1)[0]
    assert "hx-confirm=" in form and "stop working at once" in form


def test_htmx_changes_re_render_the_panel_and_are_audited(personas):
    admin = console_client(personas["admin"])
    user = users.user_create(actor=users.CLI, username=_name("hx"), roles=["reviewer"])
    htmx = {"HX-Request": "true", "HX-Target": "user-panel"}
    response = admin.post(f"/users/{user.pk}/roles", {"roles": ["approver"]}, headers=htmx)
    assert response.status_code == 200 and b'id="user-panel"' in response.content and b"Roles saved" in response.content
    assert b"<html" not in response.content  # a partial
    response = admin.post(
        f"/users/{user.pk}/assignments", {"assign": ["loan_approval", "kyc_onboarding:compliance_review"]}, headers=htmx
    )
    assert response.status_code == 200
    assert [str(a) for a in users.user_assignments(user)] == ["kyc_onboarding:compliance_review", "loan_approval"]
    response = admin.post(f"/users/{user.pk}/assignments", {"assign": ["nope"]}, headers=htmx)
    assert response.status_code == 422 and b"unknown graph" in response.content
    response = admin.post(f"/users/{user.pk}/deactivate", {"reason": "test"}, headers=htmx)
    assert b"Reactivate" in response.content and not User.objects.get(pk=user.pk).is_active
    response = admin.post(f"/users/{user.pk}/reactivate", headers=htmx)
    assert User.objects.get(pk=user.pk).is_active
    response = admin.post(f"/users/{user.pk}/password", headers=htmx)
    assert b"shown once" in response.content and b"/accounts/set-password/" in response.content
    response = admin.post(f"/users/{user.pk}/otp", headers=htmx)
    assert b"OTP reset: 0 devices removed" in response.content
    actions = [
        a
        for a in AuditEvent.objects.filter(subject_type="user", subject_id=str(user.pk))
        .order_by("id")
        .values_list("action", flat=True)
        if a.startswith("user.")
    ]
    assert actions == [
        "user.created",
        "user.access_changed",
        "user.access_changed",
        "user.deactivated",
        "user.reactivated",
        "user.password_reset",
        "user.otp_reset",
    ]


def test_the_access_history_shows_readable_labels_not_action_codes(personas):
    admin = console_client(personas["admin"])
    user = users.user_create(actor=users.CLI, username=_name("hist"), roles=["reviewer"])
    admin.post(f"/users/{user.pk}/password")
    admin.post(f"/users/{user.pk}/deactivate", {"reason": "left"})
    history = admin.get(f"/users/{user.pk}/").content.decode().split('id="history"', 1)[1]
    shown = re.findall(r'<span class="tl-action" title="([^"]+)">([^<]+)</span>', history)
    assert shown == [
        ("user.deactivated", "Deactivated"),
        ("user.password_reset", "Password reset"),
        ("user.created", "Account created"),
    ]


def test_a_plain_form_post_redirects_back_to_the_detail_page(personas):
    user = users.user_create(actor=users.CLI, username=_name("plain"))
    response = console_client(personas["admin"]).post(f"/users/{user.pk}/roles", {"roles": ["auditor"]})
    assert response.status_code == 302 and response.url == f"/users/{user.pk}/"


@pytest.mark.parametrize("action", ["roles", "assignments", "deactivate", "reactivate", "password", "otp"])
def test_changes_without_a_csrf_token_are_refused(personas, action):
    user = users.user_create(actor=users.CLI, username=_name("csrf"), roles=["reviewer"])
    client = console_client(personas["admin"], enforce_csrf=True)
    assert client.post(f"/users/{user.pk}/{action}", {"roles": ["admin"]}).status_code == 403
    assert client.post("/users/new", {"username": _name()}).status_code == 403
    assert users.user_roles(User.objects.get(pk=user.pk)) == ["reviewer"]
    assert User.objects.get(pk=user.pk).is_active


def test_an_htmx_post_with_the_token_from_the_page_is_accepted(personas):
    user = users.user_create(actor=users.CLI, username=_name("tok"), roles=["reviewer"])
    client = console_client(personas["admin"], enforce_csrf=True)
    page = client.get(f"/users/{user.pk}/").content.decode()
    token = re.search(r'"X-CSRFToken": "([^"]+)"', page).group(1)
    response = client.post(
        f"/users/{user.pk}/roles", {"roles": ["auditor"]}, headers={"HX-Request": "true", "X-CSRFToken": token}
    )
    assert response.status_code == 200
    assert users.user_roles(User.objects.get(pk=user.pk)) == ["auditor"]


def test_the_pages_hold_no_inline_script(personas):
    user = users.user_create(actor=users.CLI, username=_name("csp"))
    admin = console_client(personas["admin"])
    for path in ("/users/", "/users/new", f"/users/{user.pk}/"):
        page = admin.get(path).content.decode()
        assert not re.search(r"<script(?![^>]*\bsrc=)", page), path
        assert not re.search(r"<[^>]+\son[a-z]+=", page), path  # no inline event handlers


def test_reset_password_and_deactivate_ask_before_acting(personas):
    """Both acted on one click."""
    user = users.user_create(actor=users.CLI, username=_name("cf"), roles=["reviewer"])
    html = console_client(personas["admin"]).get(f"/users/{user.pk}/").content.decode()
    for action, question in (("password", "Reset the password of"), ("deactivate", "Deactivate")):
        form = html.split(f'hx-post="/users/{user.pk}/{action}"')[1].split(">")[0]
        assert f'hx-confirm="{question} {user.username}?' in form, form


def test_a_password_reset_updates_the_credentials_card_at_once(personas):
    """The Credentials card still said "Password set" after the reset, until a reload."""
    user = users.user_create(actor=users.CLI, username=_name("pw"), roles=["reviewer"], password="correct-horse-9-x")
    admin = console_client(personas["admin"])
    assert re.search(r'<dd id="password-state"\s*>set</dd>', admin.get(f"/users/{user.pk}/").content.decode())
    response = admin.post(f"/users/{user.pk}/password", headers={"HX-Request": "true", "HX-Target": "password-result"})
    html = response.content.decode()
    assert "shown once" in html
    state = html.split('id="password-state" hx-swap-oob="true">')[1].split("</dd>")[0]
    assert state.startswith("none") and "set-password link" in state
