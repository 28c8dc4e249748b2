"""The user administration API: typed bodies, 4xx naming the field with nothing written, and the whole
life of an account through it (who may call it at all is in test_permissions_matrix.py)."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from django.db.models import Q

from approvals import users
from approvals.models import AuditEvent
from approvals.tokens import token_issue
from tests.conftest import ApiClient

pytestmark = pytest.mark.usefixtures("live_db")


def _name(prefix: str = "api") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(personas) -> ApiClient:
    return personas["admin"].client


def test_an_account_from_creation_to_deactivation(admin, personas):
    name = _name()
    created = admin.post(
        "/api/users",
        {
            "username": name,
            "email": f"{name}@example.org",
            "roles": ["reviewer"],
            "assignments": [{"graph": "kyc_onboarding", "gate": "compliance_review"}],
        },
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["roles"] == ["reviewer"]
    assert body["assignments"] == [{"graph": "kyc_onboarding", "gate": "compliance_review"}]
    assert body["password_setup"]["set_password_url"].startswith("http://testserver/accounts/set-password/")
    user_id = body["id"]

    detail = admin.get(f"/api/users/{user_id}").json()
    kyc = next(g for g in detail["effective"]["graphs"] if g["graph"] == "kyc_onboarding")
    assert kyc["visible"] and kyc["decide"] and not kyc["start"]
    assert {g["gate"]: g["can_decide"] for g in kyc["gates"]}["identity_check"] is False

    roles = admin.post(f"/api/users/{user_id}/roles", {"roles": ["approver"]})
    assert roles.status_code == 200 and roles.json()["roles"] == ["approver"]
    moved = admin.post(f"/api/users/{user_id}/assignments", {"assignments": [{"graph": "*"}]})
    assert moved.json()["assignments"] == [{"graph": "*", "gate": ""}]

    token = token_issue(user=User.objects.get(pk=user_id))
    assert ApiClient(token).get("/api/tasks").status_code == 200
    gone = admin.post(f"/api/users/{user_id}/deactivate", {"reason": "left"})
    assert gone.status_code == 200 and gone.json()["is_active"] is False
    assert ApiClient(token).get("/api/tasks").status_code == 401
    assert admin.post(f"/api/users/{user_id}/reactivate").json()["is_active"] is True

    password = admin.post(f"/api/users/{user_id}/password", {"password": "a-long-passphrase-42"})
    assert password.status_code == 200 and password.json() == {"set_password_url": None, "expires_at": None}
    assert admin.post(f"/api/users/{user_id}/otp-reset").json() == {"devices_removed": 0}

    listed = admin.get("/api/users", q=name).json()
    assert [u["username"] for u in listed] == [name]
    actions = list(
        AuditEvent.objects.filter(subject_type="user", subject_id=str(user_id), action__startswith="user.")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == [
        "user.created",
        "user.password_reset",
        "user.access_changed",
        "user.access_changed",
        "user.deactivated",
        "user.reactivated",
        "user.password_reset",
        "user.otp_reset",
    ]


@pytest.mark.parametrize(
    "body,status,field",
    [
        ({}, 422, "username"),
        ({"username": ""}, 422, "username"),
        ({"username": "x" * 151}, 422, "username"),
        ({"username": "bad name"}, 422, "username"),
        ({"username": "nul\x00name"}, 422, "username"),
        ({"username": "{name}", "email": "no"}, 422, "email"),
        ({"username": "{name}", "email": "a\x00@example.org"}, 422, "email"),
        ({"username": "{name}", "first_name": "Ada\x00"}, 422, "first_name"),
        ({"username": "{name}", "roles": ["root"]}, 422, "roles"),
        ({"username": "{name}", "roles": "admin"}, 422, "roles"),
        ({"username": "{name}", "assignments": [{"graph": "nope"}]}, 422, "assignments[0].graph"),
        # a gate the graph does not have was accepted (201) and decided nothing
        (
            {"username": "{name}", "assignments": [{"graph": "loan_approval", "gate": "nope"}]},
            422,
            "assignments[0].gate",
        ),
        (
            {
                "username": "{name}",
                "assignments": [{"graph": "kyc_onboarding"}, {"graph": "loan_approval", "gate": "x"}],
            },
            422,
            "assignments[1].gate",
        ),
        # declared gates (tests/graphs/langgraph.json): a node that is not one is not assignable
        (
            {"username": "{name}", "assignments": [{"graph": "kyc_onboarding", "gate": "screen_applicant"}]},
            422,
            "assignments[0].gate",
        ),
        # refused at the edge (approvals.inputs), naming the exact path as the service does (it said
        # assignments.0.gate there and assignments[0].gate here)
        (
            {"username": "{name}", "assignments": [{"graph": "loan_approval", "gate": "a\x00b"}]},
            422,
            "assignments[0].gate",
        ),
        ({"username": "{name}", "assignments": [{"gate": "x"}]}, 422, "assignments[0].graph"),
        ({"username": "{name}", "password": "123"}, 422, "password"),
    ],
)
def test_bad_input_gets_a_4xx_naming_the_field_and_writes_nothing(personas, admin, body, status, field):
    body = {k: (v.format(name=_name()) if isinstance(v, str) and "{name}" in v else v) for k, v in body.items()}
    users_before, mark = User.objects.count(), AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()
    response = admin.post("/api/users", body)
    assert response.status_code == status, response.content
    assert response.json()["error"]["field"] == field, response.json()
    assert User.objects.count() == users_before
    # The session's worker may still be finishing an earlier test's threads on this committed database:
    # what this request could have written is an event by its caller or about a user, never a thread's.
    written = AuditEvent.objects.filter(id__gt=mark or 0, thread_id__isnull=True).filter(
        Q(actor=personas["admin"].user) | Q(subject_type="user")
    )
    assert list(written.values_list("action", flat=True)) == []


def test_malformed_json_is_a_400(admin):
    response = admin.post("/api/users", raw="{not json")
    assert response.status_code == 400 and response.json()["error"]["field"] == "body"


@pytest.mark.parametrize("user_id", ["0", "-1", str(2**31), str(2**63), str(2**64), "abc"])
def test_ids_out_of_range_are_4xx_not_5xx(admin, user_id):
    for path in (f"/api/users/{user_id}", f"/api/users/{user_id}/roles"):
        response = admin.get(path) if path.endswith(user_id) else admin.post(path, {"roles": []})
        assert 400 <= response.status_code < 500, (path, response.content)
        assert response.json()["error"]["field"] in ("user_id", None), response.json()


def test_a_user_that_does_not_exist_is_a_404(admin):
    response = admin.post("/api/users/2147483000/roles", {"roles": ["reviewer"]})
    assert response.status_code == 404 and response.json()["error"]["field"] == "user_id"


def test_a_search_with_a_nul_byte_is_refused(admin):
    response = admin.get("/api/users", q="a\x00b")
    assert response.status_code == 422 and response.json()["error"]["field"] == "q"


def test_a_deactivation_reason_with_a_nul_byte_is_refused_and_changes_nothing(admin):
    user = users.user_create(actor=users.CLI, username=_name())
    response = admin.post(f"/api/users/{user.pk}/deactivate", {"reason": "x\x00y"})
    assert response.status_code == 422 and response.json()["error"]["field"] == "reason"
    assert User.objects.get(pk=user.pk).is_active


def test_a_taken_username_is_a_409(admin):
    name = _name()
    assert admin.post("/api/users", {"username": name}).status_code == 201
    response = admin.post("/api/users", {"username": name})
    assert response.status_code == 409 and response.json()["error"]["field"] == "username"


def test_an_admin_token_narrowed_to_read_cannot_administer_users(personas):
    narrowed = ApiClient(token_issue(user=personas["admin"].user, actions=["read"]))
    assert narrowed.get("/api/users").status_code == 403
    assert narrowed.post("/api/users", {"username": _name()}).status_code == 403
    widened = ApiClient(token_issue(user=personas["admin"].user, actions=["read", "admin"]))
    assert widened.get("/api/users").status_code == 200


def test_replacing_assignments_with_an_unknown_gate_is_refused_naming_it_and_changes_nothing(admin):
    user = users.user_create(actor=users.CLI, username=_name(), roles=["reviewer"], assignments=[])
    response = admin.post(
        f"/api/users/{user.pk}/assignments",
        {
            "assignments": [
                {"graph": "loan_approval", "gate": "human_review"},
                {"graph": "loan_approval", "gate": "nope"},
            ]
        },
    )
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["field"] == "assignments[1].gate"
    assert "'nope' is not a gate of 'loan_approval'" in error["message"] and "human_review" in error["message"]
    assert users.user_assignments(user) == []


def test_a_gate_the_graph_has_a_gate_seen_in_tasks_and_an_external_engines_gate_are_assignable(admin):
    from tests.factories import task_make

    seen = f"seen_{uuid.uuid4().hex[:6]}"
    task_make(graph="loan_approval", node=seen)  # a task at a node the graph no longer has
    wanted = [
        {"graph": "loan_approval", "gate": "human_review"},
        {"graph": "loan_approval", "gate": seen},
        {"graph": "external:crm", "gate": "anything"},  # an external engine's gates are its own: kept as before
    ]
    response = admin.post("/api/users", {"username": _name(), "roles": ["reviewer"], "assignments": wanted})
    assert response.status_code == 201, response.content
    assert sorted(response.json()["assignments"], key=str) == sorted(wanted, key=str)
