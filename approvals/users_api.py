"""User administration API (admins only): accounts, roles, graph and gate assignments, credentials.

A thin translation of ``approvals.users``: the services check the permission (``manage_users``,
which a scoped token carries only with the "admin" action), validate and audit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.urls import reverse
from ninja import Query, Router, Schema, Status
from ninja.params.functions import Path  # the typed function: mypy reads ninja's `Path` as an alias Path[T]
from pydantic import Field

from approvals import users
from approvals.api_common import AuthedRequest
from approvals.permissions import token_needs
from approvals.schemas import BodyIn

router = Router(tags=["users"])

MAX_PK = 2**31 - 1  # auth.User's primary key is a 32-bit integer


class AssignmentIO(BodyIn):
    graph: str = Field(min_length=1, max_length=100, description='a registered graph, or "*" for every graph')
    gate: str = Field(default="", max_length=200, description="a node of the graph; empty = every gate")


class UserIn(BodyIn):
    username: str = Field(min_length=1, max_length=150)
    email: str = Field(default="", max_length=254)
    first_name: str = Field(default="", max_length=150)
    last_name: str = Field(default="", max_length=150)
    roles: list[str] = Field(default_factory=list, max_length=20)
    assignments: list[AssignmentIO] = Field(default_factory=list, max_length=500)
    password: str | None = Field(
        default=None, max_length=4096, description="omit to get a one-time set-password link instead"
    )


class UserOut(Schema):
    id: int
    username: str
    email: str
    first_name: str
    last_name: str
    is_active: bool
    roles: list[str]
    assignments: list[AssignmentIO]
    sso: bool
    last_login: datetime | None
    date_joined: datetime


class PasswordSetupOut(Schema):
    set_password_url: str | None = Field(description="shown once; works once, until expires_at")
    expires_at: datetime | None


class UserCreatedOut(UserOut):
    password_setup: PasswordSetupOut


class GateAccessOut(Schema):
    gate: str
    can_decide: bool


class GraphAccessOut(Schema):
    graph: str
    registered: bool
    external: bool  # an external engine's source, external:<source>
    visible: bool
    view_tasks: bool
    decide: bool
    gates: list[GateAccessOut]
    approve_final: bool
    view_sensitive: bool
    start: bool
    retry: bool


class EffectiveOut(Schema):
    active: bool
    superuser: bool
    view_audit: bool
    manage_users: bool
    permissions: list[str]
    graphs: list[GraphAccessOut]


class UserDetailOut(UserOut):
    effective: EffectiveOut


class UsersQuery(Schema):
    q: str = Field(default="", max_length=150)
    active: bool | None = None
    limit: int = Field(default=200, ge=1, le=1000)


class RolesIn(BodyIn):
    roles: list[str] = Field(max_length=20)


class AssignmentsIn(BodyIn):
    assignments: list[AssignmentIO] = Field(max_length=500)


class DeactivateIn(BodyIn):
    reason: str = Field(default="", max_length=500)


class PasswordIn(BodyIn):
    password: str | None = Field(default=None, max_length=4096, description="omit to get a set-password link")


class OtpResetOut(Schema):
    devices_removed: int


def _actor(request: AuthedRequest) -> User:
    return request.auth


def _out(user: User) -> dict[str, Any]:
    return {
        "id": user.pk,
        "username": user.username,
        "email": user.email,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "is_active": user.is_active,
        "roles": users.user_roles(user),
        "assignments": [AssignmentIO(graph=a.graph, gate=a.gate) for a in users.user_assignments(user)],
        "sso": users.user_is_sso(user),
        "last_login": user.last_login,
        "date_joined": user.date_joined,
    }


def _setup_out(request: AuthedRequest, setup: users.PasswordSetup | None) -> PasswordSetupOut:
    if setup is None:
        return PasswordSetupOut(set_password_url=None, expires_at=None)
    url = reverse("console:password-set", kwargs={"uidb64": setup.uidb64, "token": setup.token})
    return PasswordSetupOut(set_password_url=request.build_absolute_uri(url), expires_at=setup.expires_at)


def _assignments(items: list[AssignmentIO]) -> list[users.Assignment]:
    return [users.Assignment(graph=a.graph.strip(), gate=a.gate.strip()) for a in items]


@router.get("/users", response=list[UserOut])
def user_list(request: AuthedRequest, query: Query[UsersQuery]) -> list[dict[str, Any]]:
    listed = users.users_list(actor=_actor(request), query=query.q.strip(), active=query.active)
    return [_out(u) for u in listed[: query.limit]]


@router.post("/users", response={201: UserCreatedOut})
@token_needs("approvals.manage_users")
def user_create(request: AuthedRequest, body: UserIn) -> Status[dict[str, Any]]:
    actor = _actor(request)
    user = users.user_create(
        actor=actor,
        username=body.username,
        email=body.email,
        first_name=body.first_name,
        last_name=body.last_name,
        roles=body.roles,
        assignments=_assignments(body.assignments),
        password=body.password,
    )
    setup = users.user_password_reset(actor=actor, user_id=user.pk) if body.password is None else None
    return Status(201, {**_out(user), "password_setup": _setup_out(request, setup)})


@router.get("/users/{user_id}", response=UserDetailOut)
def user_detail(request: AuthedRequest, user_id: int = Path(..., ge=1, le=MAX_PK)) -> dict[str, Any]:
    user = users.user_get(actor=_actor(request), user_id=user_id)
    e = users.user_effective_permissions(actor=_actor(request), user_id=user.pk)
    effective = {
        "active": e.active,
        "superuser": e.superuser,
        "view_audit": e.view_audit,
        "manage_users": e.manage_users,
        "permissions": [code for code, _ in e.permissions],
        "graphs": [
            {**g.__dict__, "gates": [{"gate": x.gate, "can_decide": x.can_decide} for x in g.gates]} for g in e.graphs
        ],
    }
    return {**_out(user), "effective": effective}


@router.post("/users/{user_id}/roles", response=UserOut)
@token_needs("approvals.manage_users")
def user_roles(request: AuthedRequest, body: RolesIn, user_id: int = Path(..., ge=1, le=MAX_PK)) -> dict[str, Any]:
    return _out(users.user_roles_set(actor=_actor(request), user_id=user_id, roles=body.roles))


@router.post("/users/{user_id}/assignments", response=UserOut)
@token_needs("approvals.manage_users")
def user_assignments(
    request: AuthedRequest, body: AssignmentsIn, user_id: int = Path(..., ge=1, le=MAX_PK)
) -> dict[str, Any]:
    wanted = _assignments(body.assignments)
    return _out(users.user_assignments_set(actor=_actor(request), user_id=user_id, assignments=wanted))


@router.post("/users/{user_id}/deactivate", response=UserOut)
@token_needs("approvals.manage_users")
def user_deactivate(
    request: AuthedRequest, body: DeactivateIn, user_id: int = Path(..., ge=1, le=MAX_PK)
) -> dict[str, Any]:
    return _out(users.user_deactivate(actor=_actor(request), user_id=user_id, reason=body.reason))


@router.post("/users/{user_id}/reactivate", response=UserOut)
@token_needs("approvals.manage_users")
def user_reactivate(request: AuthedRequest, user_id: int = Path(..., ge=1, le=MAX_PK)) -> dict[str, Any]:
    return _out(users.user_reactivate(actor=_actor(request), user_id=user_id))


@router.post("/users/{user_id}/password", response=PasswordSetupOut)
@token_needs("approvals.manage_users")
def user_password(request: AuthedRequest, body: PasswordIn, user_id: int = Path(..., ge=1, le=MAX_PK)) -> Any:
    setup = users.user_password_reset(actor=_actor(request), user_id=user_id, password=body.password)
    return _setup_out(request, setup)


@router.post("/users/{user_id}/otp-reset", response=OtpResetOut)
@token_needs("approvals.manage_users")
def user_otp_reset(request: AuthedRequest, user_id: int = Path(..., ge=1, le=MAX_PK)) -> dict[str, Any]:
    return {"devices_removed": users.user_otp_reset(actor=_actor(request), user_id=user_id)}
