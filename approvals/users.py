"""User administration: accounts, roles, graph and gate assignments, credentials, single sign-on.

Who may change access: an admin (``approvals.manage_users``, through the one policy in
``approvals.permissions``), the command line (whoever can run ``manage.py`` holds the
database already) and single sign-on (the identity provider's claims, mapped by
configuration). Every change is audited in its own transaction with the user's access
before and after; access changes are serialised so that "the last active admin" is a
rule the database keeps, not a race two admins can lose.

Roles are the groups ``approvals.roles.roles_ensure`` keeps; assignments are
``GraphAssignment`` rows (graph "*" = every graph; a gate narrows a graph to one node).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps as django_apps
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.contrib.auth.password_validation import validate_password
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import connection, transaction
from django.db.models import BooleanField, Exists, ExpressionWrapper, F, OuterRef, Prefetch, Q, QuerySet
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from approvals import permissions
from approvals.audit import audit_record
from approvals.errors import Conflict, Forbidden, InvalidInput, NotFound
from approvals.models import (
    ApiToken,
    ApprovalTask,
    AuditAction,
    ExternalIdentity,
    GraphAssignment,
)
from approvals.roles import roles_ensure
from approvals.selectors import external_graphs
from approvals.text_search import ContainsText
from runtime.registry import (
    EXTERNAL_GRAPH_PREFIX,
    UnknownGraph,
    graph_external_valid,
    graph_gates,
    graph_is_external,
    graph_names,
)

MANAGE_USERS = "approvals.manage_users"
VIEW_ALL_GRAPHS = "approvals.view_all_graphs"  # auditors and admins: every graph, no assignment needed
# Webhook principals hold the "service" role; it is never given to a person.
ASSIGNABLE_ROLES: tuple[str, ...] = tuple(r for r in permissions.ROLES if r != "service")
_LOCK_KEY = 0x67687573  # "ghus": one user-administration change at a time (PostgreSQL advisory lock)
_DB_SESSION_ENGINES = ("django.contrib.sessions.backends.db", "django.contrib.sessions.backends.cached_db")
_GATE_RE = re.compile(r"^[^\s:\x00-\x1f\x7f]{1,200}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class SystemActor:
    """A change made by no signed-in person: the command line, or single sign-on."""

    label: str


CLI = SystemActor("cli")
SSO = SystemActor("sso")
Actor = User | SystemActor


@dataclass(frozen=True, order=True)
class Assignment:
    """A graph ("*" = all) a user works on, optionally narrowed to one gate (node)."""

    graph: str
    gate: str = ""

    def __str__(self) -> str:
        return f"{self.graph}:{self.gate}" if self.gate else self.graph

    @classmethod
    def parse(cls, text: str, *, field: str = "assignments") -> Assignment:
        """``graph`` or ``graph:gate`` (LangGraph reserves ":" in node names, so it cannot be ambiguous); an
        external engine's graph keeps its prefix: ``external:<source>`` or ``external:<source>:gate`` (it was
        read as the graph "external" narrowed to the gate "<source>", and refused)."""
        text = str(text).strip()
        prefix = EXTERNAL_GRAPH_PREFIX if graph_is_external(text) else ""
        graph, _, gate = text.removeprefix(prefix).partition(":")
        return cls(graph=prefix + graph.strip(), gate=gate.strip())


# --- reads ------------------------------------------------------------------------------


def require_admin(actor: Actor) -> None:
    if isinstance(actor, SystemActor):
        return
    permissions.require(actor, MANAGE_USERS, "administer users")


def users_list(*, actor: Actor, query: str = "", active: bool | None = None) -> QuerySet[User]:
    require_admin(actor)
    query = _plain(query, field="q", max_length=150)
    users = User.objects.exclude(username__startswith="webhook:").order_by("username")
    if query:
        users = users.filter(Q(ContainsText(F("username"), query)) | Q(ContainsText(F("email"), query)))
    if active is not None:
        users = users.filter(is_active=active)
    return (
        users.select_related("external_identity")
        .prefetch_related(
            Prefetch("groups", queryset=Group.objects.order_by("name")),
            Prefetch("graph_assignments", queryset=GraphAssignment.objects.order_by("graph", "gate")),
        )
        # Auditors and admins see every graph by role, with no assignment: the list said "none" for them.
        .annotate(sees_every_graph=ExpressionWrapper(_holds_q(VIEW_ALL_GRAPHS), output_field=BooleanField()))
    )


def _holds_q(perm: str) -> Q:
    """Users who hold ``perm`` (``app.codename``) through a role, a direct grant, or as superuser — as
    ``User.has_perm`` decides for an active user, in one condition a list can annotate its rows with."""
    app_label, codename = perm.split(".", 1)
    granted = Permission.objects.filter(content_type__app_label=app_label, codename=codename)
    by_role = Group.objects.filter(user=OuterRef("pk"), permissions__in=granted)
    by_grant = User.user_permissions.through.objects.filter(user_id=OuterRef("pk"), permission__in=granted)
    return Q(is_superuser=True) | Q(Exists(by_role)) | Q(Exists(by_grant))


def _pk(user_id: Any) -> int:
    try:
        pk = int(user_id)
    except (TypeError, ValueError):
        pk = 0
    if not 1 <= pk < 2**31:  # auth.User's key is a 32-bit integer
        raise NotFound(f"user {user_id} not found", field="user_id")
    return pk


def user_get(*, actor: Actor, user_id: Any) -> User:
    require_admin(actor)
    user = users_list(actor=actor).filter(pk=_pk(user_id)).first()
    if user is None:
        raise NotFound(f"user {user_id} not found", field="user_id")
    return user


def user_by_username(username: str) -> User:
    user = User.objects.filter(username=username).first()
    if user is None:
        raise NotFound(f"no user named {username!r}", field="username")
    return user


def user_roles(user: User) -> list[str]:
    return sorted(user.groups.values_list("name", flat=True))


def access_missing(user: User) -> tuple[bool, bool]:
    """(no role, no graph): an account lacking either can sign in and see and do nothing."""
    fresh = User.objects.get(pk=user.pk)  # no permissions cached from before its roles were set
    return not user_roles(fresh), permissions.graphs_visible(fresh) == set()


def user_assignments(user: User) -> list[Assignment]:
    return sorted(Assignment(g, n) for g, n in GraphAssignment.objects.filter(user=user).values_list("graph", "gate"))


def access_snapshot(user: User) -> dict[str, Any]:
    return {
        "active": user.is_active,
        "roles": user_roles(user),
        "assignments": [str(a) for a in user_assignments(user)],
    }


def admins_active() -> QuerySet[User]:
    """Active users who may administer users (the admin role, a direct grant, or superuser)."""
    perm = Permission.objects.filter(content_type__app_label="approvals", codename="manage_users").first()
    admin_q = Q(is_superuser=True)
    if perm is not None:
        admin_q |= Q(groups__permissions=perm) | Q(user_permissions=perm)
    return User.objects.filter(admin_q, is_active=True).distinct()


@dataclass
class GateAccess:
    gate: str
    can_decide: bool


@dataclass
class GraphAccess:
    graph: str
    registered: bool
    external: bool  # an external engine's source (``external:<source>``): never registered, still a graph
    visible: bool
    view_tasks: bool
    decide: bool  # some gate of the graph
    gates: list[GateAccess]  # known gates (nodes, gates seen in tasks, assigned gates)
    approve_final: bool
    view_sensitive: bool
    start: bool
    retry: bool

    @property
    def decide_everywhere(self) -> bool:
        return bool(self.gates) and all(g.can_decide for g in self.gates)


@dataclass
class EffectivePermissions:
    active: bool
    superuser: bool
    roles: list[str]
    assignments: list[Assignment]
    permissions: list[tuple[str, str]]  # (app.codename, label), from roles and direct grants
    view_audit: bool
    manage_users: bool
    graphs: list[GraphAccess] = field(default_factory=list)


def graphs_assignable(assigned: Iterable[str] = ()) -> list[str]:
    """Graphs an admin may pick (every form offers the same): the registered ones, external sources with
    tasks, and, so that no assignment disappears from the form, graphs assigned already."""
    graphs = set(graph_names()) | set(external_graphs()) | set(assigned)
    return sorted(g for g in graphs if g and g != permissions.ALL_GRAPHS)


def gates_assignable(graph: str, assigned: Iterable[str] = ()) -> list[str]:
    """Gates an admin may pick: the graph's gates (``runtime.registry.graph_gates``), and, so that no
    assignment disappears from the form, gates seen in its tasks and gates assigned already."""
    gates = set(assigned)
    with contextlib.suppress(UnknownGraph):  # unregistered since: its tasks and assignments remain
        gates |= set(graph_gates(graph))
    gates |= set(ApprovalTask.objects.filter(graph=graph).values_list("node", flat=True).distinct()[:200])
    return sorted(g for g in gates if g)


def user_effective_permissions(*, actor: Actor, user_id: Any) -> EffectivePermissions:
    """What ``user`` can see and do per graph and gate, computed by the same predicates every
    surface uses (``permissions.can``, ``graph_visible``, ``can_decide``), not re-derived here."""
    require_admin(actor)
    user = User.objects.get(pk=user_get(actor=actor, user_id=user_id).pk)  # fresh: no cached permissions
    assignments = user_assignments(user)
    labels = {
        f"{ct}.{code}": name
        for ct, code, name in Permission.objects.values_list("content_type__app_label", "codename", "name")
    }
    perms = sorted(user.get_all_permissions()) if user.is_active else []
    graphs = graphs_assignable(a.graph for a in assignments)
    registered = set(graph_names())
    out = []
    for graph in graphs:
        visible = permissions.graph_visible(user, graph)
        gates = [
            GateAccess(gate, permissions.can_decide(user, ApprovalTask(graph=graph, node=gate)))
            for gate in gates_assignable(graph, [a.gate for a in assignments if a.graph == graph])
        ]
        out.append(
            GraphAccess(
                graph=graph,
                registered=graph in registered,
                external=graph_is_external(graph),
                visible=visible,
                view_tasks=visible and permissions.can(user, "approvals.view_approvaltask"),
                decide=any(g.can_decide for g in gates),
                gates=gates,
                approve_final=visible and permissions.can(user, "approvals.approve_final"),
                view_sensitive=visible and permissions.can(user, "approvals.view_sensitive"),
                start=visible and permissions.can(user, "runtime.start_thread"),
                retry=visible and permissions.can(user, "runtime.retry_thread"),
            )
        )
    return EffectivePermissions(
        active=user.is_active,
        superuser=user.is_superuser,
        roles=user_roles(user),
        assignments=assignments,
        permissions=[(p, labels.get(p, p)) for p in perms],
        view_audit=permissions.can(user, "approvals.view_audit"),
        manage_users=permissions.can(user, MANAGE_USERS),
        graphs=out,
    )


# --- validation ----------------------------------------------------------------------------


def _roles_check(roles: Iterable[str], *, field: str = "roles") -> set[str]:
    wanted = {str(r).strip() for r in roles if str(r).strip()}
    unknown = wanted - set(ASSIGNABLE_ROLES)
    if unknown:
        raise InvalidInput(
            f"unknown role {sorted(unknown)[0]!r}; choose from {', '.join(ASSIGNABLE_ROLES)}", field=field
        )
    return wanted


def _assignments_check(
    assignments: Iterable[Assignment],
    *,
    keep: Iterable[Assignment] = (),
    field: str = "assignments",
    indexed: bool = False,
    gates_known: bool = False,
) -> set[Assignment]:
    """Graphs must be registered (or "*", or an external engine's ``external:<source>``); ``keep`` lists
    assignments already held, which stay valid even if their graph was unregistered since (so an admin
    can still remove them).

    ``indexed``: a refusal names the item, ``{field}[i].graph`` or ``{field}[i].gate``, as the API's and the
    commands' lists are numbered. ``gates_known``: a gate must be one :func:`gates_assignable` offers for
    its graph (its gates, gates seen in its tasks, gates the user holds): a made-up gate was accepted and
    decided nothing. An external engine's graph has no gates of its own to check against: any is kept.
    """
    kept = list(keep)
    held = set(kept)
    registered: set[str] | None = None  # read when a name needs it: the registry imports every graph module
    out = set()
    for index, item in enumerate(assignments):
        if item in held:
            out.add(item)
            continue
        at_graph = f"{field}[{index}].graph" if indexed else field
        at_gate = f"{field}[{index}].gate" if indexed else field
        if not item.graph:
            raise InvalidInput("a graph name is required", field=at_graph)
        if item.graph != permissions.ALL_GRAPHS and not graph_external_valid(item.graph):
            if registered is None:
                registered = set(graph_names())
            if item.graph not in registered:
                raise InvalidInput(
                    f"unknown graph {item.graph!r} (registered: {', '.join(sorted(registered)) or 'none'}; "
                    "or external:<source> for an external engine's tasks)",
                    field=at_graph,
                )
        if item.gate and (item.graph == permissions.ALL_GRAPHS or not _GATE_RE.match(item.gate)):
            raise InvalidInput(f"{item} is not a gate: use graph:node with a registered graph", field=at_gate)
        if item.gate and gates_known and not graph_is_external(item.graph):
            offered = gates_assignable(item.graph, [a.gate for a in kept if a.graph == item.graph])
            if item.gate not in offered:
                raise InvalidInput(
                    f"{item.gate!r} is not a gate of {item.graph!r} (its gates: {', '.join(offered) or 'none'})",
                    field=at_gate,
                )
        out.add(item)
    return _assignments_reduce(out)


def _assignments_reduce(assignments: Iterable[Assignment]) -> set[Assignment]:
    """A whole-graph assignment covers every gate of that graph ("*" every gate of every graph): drop the
    redundant gate rows."""
    out = set(assignments)
    whole = {a.graph for a in out if not a.gate}
    if permissions.ALL_GRAPHS in whole:
        return {a for a in out if not a.gate}
    return {a for a in out if not a.gate or a.graph not in whole}


def _plain(value: str, *, field: str, max_length: int) -> str:
    """Free text stored as is: no control characters (PostgreSQL refuses NUL), bounded length."""
    value = (value or "").strip()
    if _CONTROL.search(value):
        raise InvalidInput("control characters are not allowed", field=field)
    if len(value) > max_length:
        raise InvalidInput(f"at most {max_length} characters", field=field)
    return value


def _username_check(username: str) -> str:
    username = (username or "").strip()
    if not username:
        raise InvalidInput("a username is required", field="username")
    if len(username) > 150:
        raise InvalidInput("a username has at most 150 characters", field="username")
    if username.startswith("webhook:"):
        raise InvalidInput('usernames starting with "webhook:" belong to webhook principals', field="username")
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError:
        raise InvalidInput("a username may contain only letters, digits and @ . + - _", field="username") from None
    return username


def _email_check(email: str) -> str:
    email = (email or "").strip()
    if not email:
        return ""
    if len(email) > 254:
        raise InvalidInput("an e-mail address has at most 254 characters", field="email")
    try:
        validate_email(email)
    except ValidationError:
        raise InvalidInput(f"{email!r} is not an e-mail address", field="email") from None
    return email


def _password_check(password: str, user: User) -> None:
    if "\x00" in password:
        raise InvalidInput("a password cannot contain NUL characters", field="password")
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise InvalidInput(" ".join(exc.messages), field="password") from None


# --- writes ----------------------------------------------------------------------------------


def _lock() -> None:
    # SQLite takes the write lock at BEGIN (IMMEDIATE transactions) already.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])


def _audit(actor: Actor, action: AuditAction, user: User, details: dict[str, Any]) -> None:
    audit_record(
        actor=actor if isinstance(actor, User) else None,
        actor_label=actor.label if isinstance(actor, SystemActor) else None,
        action=action,
        subject_type="user",
        subject_id=user.pk,
        details={"user": user.get_username(), **details},
    )


def _locked_user(user_id: Any) -> User:
    # Webhook principals' access belongs to their endpoint (approvals.inbound.webhooks), not to user administration.
    user = User.objects.select_for_update().filter(pk=_pk(user_id)).exclude(username__startswith="webhook:").first()
    if user is None:
        raise NotFound(f"user {user_id} not found", field="user_id")
    return user


def _last_admin_guard(user: User, *, field: str) -> None:
    """Refuse a change that leaves no active admin: checked after the change, under the lock."""
    if not admins_active().exists():
        raise Conflict(f"{user.get_username()} is the last active admin: make another user admin first", field=field)


def _access_apply(
    *,
    actor: Actor,
    user: User,
    roles: set[str] | None = None,
    assignments: set[Assignment] | None = None,
    reason: str = "",
    guard_last_admin: bool = True,
) -> bool:
    """Set the user's roles and/or assignments; one ``user.access_changed`` event if anything changed."""
    before = access_snapshot(user)
    was_admin = admins_active().filter(pk=user.pk).exists()
    if roles is not None:
        groups = roles_ensure()
        user.groups.remove(*[g for name, g in groups.items() if name not in roles and name in before["roles"]])
        user.groups.add(*[groups[name] for name in sorted(roles) if name not in before["roles"]])
    if assignments is not None:
        current = set(user_assignments(user))
        for item in current - assignments:
            # Deleted one by one so the existing permission receivers see each removal.
            for row in GraphAssignment.objects.filter(user=user, graph=item.graph, gate=item.gate):
                row.delete()
        for item in sorted(assignments - current):
            GraphAssignment.objects.create(user=user, graph=item.graph, gate=item.gate)
    user = User.objects.get(pk=user.pk)
    after = access_snapshot(user)
    if after == before:
        return False
    if guard_last_admin and was_admin:
        _last_admin_guard(user, field="roles")
    details: dict[str, Any] = {"before": before, "after": after}
    if reason:
        details["reason"] = reason
    _audit(actor, AuditAction.USER_ACCESS_CHANGED, user, details)
    return True


@transaction.atomic
def user_create(
    *,
    actor: Actor,
    username: str,
    email: str = "",
    first_name: str = "",
    last_name: str = "",
    roles: Iterable[str] = (),
    assignments: Iterable[Assignment] = (),
    password: str | None = None,
) -> User:
    """A new user with roles and assignments. Without ``password`` the account has none usable:
    hand the person a set-password link (``user_password_reset``) instead."""
    require_admin(actor)
    username = _username_check(username)
    email = _email_check(email)
    first_name = _plain(first_name, field="first_name", max_length=150)
    last_name = _plain(last_name, field="last_name", max_length=150)
    wanted_roles = _roles_check(roles)
    wanted = _assignments_check(assignments, indexed=True, gates_known=True)
    _lock()
    if User.objects.filter(username__iexact=username).exists():
        raise Conflict(f"a user named {username!r} already exists", field="username")
    user = User(username=username, email=email, first_name=first_name, last_name=last_name)
    if password is None:
        user.set_unusable_password()
    else:
        _password_check(password, user)
        user.set_password(password)
    user.save()
    groups = roles_ensure()
    user.groups.add(*[groups[r] for r in sorted(wanted_roles)])
    for item in sorted(wanted):
        GraphAssignment.objects.create(user=user, graph=item.graph, gate=item.gate)
    _audit(
        actor,
        AuditAction.USER_CREATED,
        user,
        {"email": email, "after": access_snapshot(user), "password": "set" if password else "none (set-password link)"},
    )
    return user


@transaction.atomic
def user_roles_set(*, actor: Actor, user_id: Any, roles: Iterable[str]) -> User:
    require_admin(actor)
    wanted = _roles_check(roles)
    _lock()
    user = _locked_user(user_id)
    _access_apply(actor=actor, user=user, roles=wanted)
    return User.objects.get(pk=user.pk)


@transaction.atomic
def user_assignments_set(*, actor: Actor, user_id: Any, assignments: Iterable[Assignment]) -> User:
    """Replace every graph and gate assignment of the user."""
    require_admin(actor)
    _lock()
    user = _locked_user(user_id)
    wanted = _assignments_check(assignments, keep=user_assignments(user), indexed=True, gates_known=True)
    _access_apply(actor=actor, user=user, assignments=wanted)
    return User.objects.get(pk=user.pk)


def user_graphs_assign(*, actor: Actor, user_id: Any, graphs: Iterable[str]) -> User:
    """Replace the user's whole-graph assignments, keeping their gate assignments."""
    with transaction.atomic():
        require_admin(actor)
        _lock()
        gates = [a for a in user_assignments(_locked_user(user_id)) if a.gate]
        return user_assignments_set(
            actor=actor, user_id=user_id, assignments=[*gates, *(Assignment(str(g).strip()) for g in graphs)]
        )


def user_gates_assign(*, actor: Actor, user_id: Any, graph: str, gates: Iterable[str]) -> User:
    """Replace the user's gate assignments of one graph (other graphs are untouched)."""
    with transaction.atomic():
        require_admin(actor)
        _lock()
        others = [a for a in user_assignments(_locked_user(user_id)) if a.graph != graph or not a.gate]
        wanted = [Assignment(graph, str(g).strip()) for g in gates if str(g).strip()]
        return user_assignments_set(actor=actor, user_id=user_id, assignments=[*others, *wanted])


@transaction.atomic
def user_grant(
    *, actor: Actor, user_id: Any, roles: Iterable[str] = (), assignments: Iterable[Assignment] = ()
) -> User:
    """Add roles and assignments to what the user has."""
    require_admin(actor)
    add_roles = _roles_check(roles)
    _lock()
    user = _locked_user(user_id)
    current = user_assignments(user)
    # Numbered as the caller's list (what it added), then merged with what the user holds.
    added = _assignments_check(assignments, keep=current, indexed=True, gates_known=True)
    wanted = _assignments_reduce([*current, *added])
    _access_apply(actor=actor, user=user, roles=set(user_roles(user)) | add_roles, assignments=wanted)
    return User.objects.get(pk=user.pk)


@transaction.atomic
def user_revoke(
    *,
    actor: Actor,
    user_id: Any,
    roles: Iterable[str] = (),
    graphs: Iterable[str] = (),
    assignments: Iterable[Assignment] = (),
) -> User:
    """Remove roles, whole graphs (with every gate of them) or single gate assignments.

    A graph or gate the user does not hold is refused, naming it (``graphs[i]``, ``assignments[i].gate``),
    and nothing changes: a typo (``loan_aproval``) was a silent no-op that looked like a revocation."""
    require_admin(actor)
    drop_roles = _roles_check(roles)
    drop_graphs = [str(g).strip() for g in graphs]
    drop = list(assignments)
    _lock()
    user = _locked_user(user_id)
    current = user_assignments(user)
    _revocations_held(user, current, drop_graphs, drop)
    wanted = {a for a in current if a.graph not in drop_graphs and a not in drop}
    _access_apply(actor=actor, user=user, roles=set(user_roles(user)) - drop_roles, assignments=wanted)
    return User.objects.get(pk=user.pk)


def _revocations_held(user: User, current: list[Assignment], graphs: list[str], gates: list[Assignment]) -> None:
    held = ", ".join(str(a) for a in current) or "none"
    whole = {a.graph for a in current if not a.gate}
    for index, graph in enumerate(graphs):
        if not any(a.graph == graph for a in current):
            raise InvalidInput(
                f"{user.get_username()} holds no graph {graph!r} (graphs held: {held})", field=f"graphs[{index}]"
            )
    for index, item in enumerate(gates):
        if item in current:
            continue
        if item.graph in whole or permissions.ALL_GRAPHS in whole:
            graph = item.graph if item.graph in whole else permissions.ALL_GRAPHS
            message = f"{user.get_username()} holds the whole graph {graph!r}, not the gate {str(item)!r} alone"
        else:
            message = f"{user.get_username()} does not hold the gate {str(item)!r} (graphs held: {held})"
        raise InvalidInput(message, field=f"assignments[{index}].gate")


def _sessions_end(user: User) -> int:
    """Delete the user's database sessions (signed-in browsers and their websockets)."""
    if settings.SESSION_ENGINE not in _DB_SESSION_ENGINES:
        return 0  # other engines cannot be listed; the inactive flag still refuses those sessions
    ended = 0
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator(chunk_size=500):
        if str(session.get_decoded().get("_auth_user_id")) == str(user.pk):
            session.delete()
            ended += 1
    if ended and settings.SESSION_ENGINE.endswith("cached_db"):
        from django.core.cache import caches

        caches[settings.SESSION_CACHE_ALIAS].clear()
    return ended


def _tokens_revoke(user: User) -> list[str]:
    now = timezone.now()
    live = list(ApiToken.objects.select_for_update().filter(user=user, revoked_at__isnull=True))
    ApiToken.objects.filter(pk__in=[t.pk for t in live]).update(revoked_at=now)
    return sorted(t.prefix for t in live)


@transaction.atomic
def user_deactivate(*, actor: Actor, user_id: Any, reason: str = "") -> User:
    """Sign the user out everywhere and keep them out: inactive, API tokens revoked, sessions ended.
    Their decisions and audit history stay (users are never deleted)."""
    require_admin(actor)
    reason = _plain(reason, field="reason", max_length=500)
    _lock()
    user = _locked_user(user_id)
    if not user.is_active:
        return user
    before = access_snapshot(user)
    was_admin = admins_active().filter(pk=user.pk).exists()
    user.is_active = False
    user.save(update_fields=["is_active"])
    if was_admin:
        _last_admin_guard(user, field="user_id")
    tokens = _tokens_revoke(user)
    sessions = _sessions_end(user)
    details: dict[str, Any] = {
        "before": before,
        "after": access_snapshot(user),
        "tokens_revoked": tokens,
        "sessions_ended": sessions,
    }
    if reason:
        details["reason"] = reason
    _audit(actor, AuditAction.USER_DEACTIVATED, user, details)
    return user


@transaction.atomic
def user_reactivate(*, actor: Actor, user_id: Any) -> User:
    """Let the user sign in again, with the roles they had; revoked tokens stay revoked."""
    require_admin(actor)
    _lock()
    user = _locked_user(user_id)
    if user.is_active:
        return user
    before = access_snapshot(user)
    user.is_active = True
    user.save(update_fields=["is_active"])
    _audit(actor, AuditAction.USER_REACTIVATED, user, {"before": before, "after": access_snapshot(user)})
    return user


@dataclass(frozen=True)
class PasswordSetup:
    """The parts of a set-password link; the console turns them into a URL. Never stored."""

    uidb64: str
    token: str
    expires_at: datetime


@transaction.atomic
def user_password_reset(*, actor: Actor, user_id: Any, password: str | None = None) -> PasswordSetup | None:
    """Set ``password``, or (without one) void the current password and return a set-password link
    for the person to choose one. Either way the old password stops working, and every session
    signed in with it ends (Django ties sessions to the password hash)."""
    require_admin(actor)
    _lock()
    user = _locked_user(user_id)
    if password is not None:
        _password_check(password, user)
        user.set_password(password)
    else:
        user.set_unusable_password()
    user.save(update_fields=["password"])
    setup = None
    if password is None:
        setup = PasswordSetup(
            uidb64=urlsafe_base64_encode(force_bytes(user.pk)),
            token=default_token_generator.make_token(user),
            expires_at=timezone.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT),
        )
    _audit(
        actor,
        AuditAction.USER_PASSWORD_RESET,
        user,
        {"method": "password set by admin" if password is not None else "set-password link issued"},
    )
    return setup


@transaction.atomic
def user_password_set_by_link(*, user: User, password: str) -> None:
    """The person sets their own password from a set-password link (the view checked the token)."""
    if not user.is_active:
        # The link was issued before an admin deactivated the account: it must not set a password that
        # then shows as "set" on a user who cannot sign in (and would on reactivation).
        raise Forbidden("this account is deactivated: ask an admin for a new link once it is reactivated")
    _password_check(password, user)
    user.set_password(password)
    user.save(update_fields=["password"])
    audit_record(
        actor=user,
        action=AuditAction.USER_PASSWORD_SET,
        subject_type="user",
        subject_id=user.pk,
        details={"user": user.get_username(), "method": "set-password link"},
    )


@transaction.atomic
def user_otp_reset(*, actor: Actor, user_id: Any) -> int:
    """Remove every OTP device of the user (lost phone); returns how many."""
    require_admin(actor)
    _lock()
    user = _locked_user(user_id)
    if not django_apps.is_installed("django_otp"):
        return 0
    from django_otp import devices_for_user

    devices = list(devices_for_user(user, confirmed=None))
    for device in devices:
        device.delete()
    _audit(
        actor,
        AuditAction.USER_OTP_RESET,
        user,
        {"devices_removed": [f"{type(d).__name__}:{d.name}" for d in devices]},
    )
    return len(devices)


# --- single sign-on --------------------------------------------------------------------------


@dataclass(frozen=True)
class SsoGrant:
    roles: frozenset[str]
    assignments: frozenset[Assignment]


@dataclass(frozen=True)
class SsoMapping:
    """Claim value → roles and assignments. Values of ``claim`` (a string or a list) are looked up;
    a user gets the union of every matching entry, and nothing when none matches."""

    claim: str
    entries: Mapping[str, SsoGrant]

    def grant_for(self, claims: Mapping[str, Any]) -> SsoGrant:
        raw = claims.get(self.claim)
        values = [raw] if isinstance(raw, str) else [v for v in raw or [] if isinstance(v, str)]
        if not isinstance(raw, str | list):
            values = []
        roles: set[str] = set()
        assignments: set[Assignment] = set()
        for value in values:
            entry = self.entries.get(value)
            if entry is not None:
                roles |= entry.roles
                assignments |= entry.assignments
        return SsoGrant(frozenset(roles), frozenset(_assignments_check(assignments) if roles else ()))


def sso_mapping_parse(claim: str, raw: Mapping[str, Any]) -> SsoMapping:
    """Validate the configured mapping (``GATEHOUSE_OIDC_MAPPING``); InvalidInput names the entry."""
    entries = {}
    for value, spec in raw.items():
        where = f"GATEHOUSE_OIDC_MAPPING[{value!r}]"
        if not isinstance(spec, Mapping) or set(spec) - {"roles", "graphs", "gates"}:
            raise InvalidInput(f"{where} must be an object with roles, graphs and gates", field=where)
        lists = {k: spec.get(k, []) for k in ("roles", "graphs", "gates")}
        for key, items in lists.items():
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise InvalidInput(f"{where}.{key} must be a list of strings", field=f"{where}.{key}")
        roles = _roles_check(lists["roles"], field=f"{where}.roles")
        assignments = [Assignment(g) for g in lists["graphs"]]
        for gate in lists["gates"]:
            parsed = Assignment.parse(gate)
            if not parsed.gate:
                raise InvalidInput(f"{where}.gates: {gate!r} is not graph:gate", field=f"{where}.gates")
            assignments.append(parsed)
        checked = _assignments_check(assignments, field=f"{where}.graphs")
        entries[value] = SsoGrant(frozenset(roles), frozenset(checked))
    return SsoMapping(claim=claim, entries=entries)


class SsoRefused(Exception):
    """Single sign-on authenticated the person but gives them no access here (audited)."""


def sso_refused(*, issuer: str, subject: str, username: str, reason: str) -> SsoRefused:
    """Audit a refused single sign-on (its own transaction) and return the exception to raise."""
    issuer, subject, username = (_CONTROL.sub("", v) for v in (issuer, subject, username))
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label=f"sso:{username[:140]}",
            action=AuditAction.AUTH_SSO_REFUSED,
            subject_type="user",
            subject_id=username[:64],
            details={"issuer": issuer, "subject": subject, "reason": reason},
        )
    return SsoRefused(reason)


def user_sso_sync(*, issuer: str, subject: str, username: str, email: str, name: str, grant: SsoGrant) -> User:
    """The user behind an SSO identity, created on first sign-in and updated on every later one
    from the mapped claims (the provider is the source of truth for SSO users' roles). Audited
    when anything changes. Raises ``SsoRefused`` (audited) when the claims give no access, the
    account is deactivated, or the username belongs to a local account."""
    if _CONTROL.search(issuer + subject) or len(subject) > 255 or len(issuer) > 300:
        raise sso_refused(issuer=issuer, subject=subject[:255], username=username, reason="malformed subject")
    with transaction.atomic():
        _lock()
        identity = ExternalIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
        if identity is None:
            if not grant.roles:
                refuse = "the identity provider's claims map to no role"
            elif User.objects.filter(username__iexact=username).exists():
                refuse = f"the username {username!r} belongs to an account not linked to this identity"
            else:
                refuse = ""
            if not refuse:
                try:
                    username = _username_check(username)
                    email = _email_check(email)
                except InvalidInput as exc:
                    refuse = f"claim rejected: {exc.message}"
            if not refuse:
                first, _, last = _CONTROL.sub("", name).partition(" ")
                user = User(username=username, email=email, first_name=first[:150], last_name=last[:150])
                user.set_unusable_password()
                user.save()
                ExternalIdentity.objects.create(user=user, issuer=issuer, subject=subject)
                groups = roles_ensure()
                user.groups.add(*[groups[r] for r in sorted(grant.roles)])
                for item in sorted(grant.assignments):
                    GraphAssignment.objects.create(user=user, graph=item.graph, gate=item.gate)
                _audit(
                    SSO,
                    AuditAction.USER_CREATED,
                    user,
                    {
                        "source": "oidc",
                        "issuer": issuer,
                        "subject": subject,
                        "email": email,
                        "after": access_snapshot(user),
                    },
                )
                return user
        else:
            user = _locked_user(identity.user_id)
            if not user.is_active:
                refuse = "the account is deactivated"
            else:
                if email and email != user.email:
                    try:
                        user.email = _email_check(email)
                        user.save(update_fields=["email"])
                    except InvalidInput:
                        pass
                _access_apply(
                    actor=SSO,
                    user=user,
                    roles=set(grant.roles),
                    assignments=set(grant.assignments),
                    reason="identity provider claims at sign-in",
                    guard_last_admin=False,
                )
                if grant.roles:
                    return User.objects.get(pk=user.pk)
                refuse = "the identity provider's claims map to no role"
    # Outside the transaction above: a stripped role stays stripped even though sign-in is refused.
    raise sso_refused(issuer=issuer, subject=subject, username=username, reason=refuse)


def user_is_sso(user: User) -> bool:
    return ExternalIdentity.objects.filter(user=user).exists()


def user_credentials(user: User) -> dict[str, Any]:
    """What the user can sign in with: a password, live API tokens, OTP devices, SSO."""
    devices = 0
    if django_apps.is_installed("django_otp"):
        from django_otp import devices_for_user

        devices = sum(1 for _ in devices_for_user(user, confirmed=None))
    now = timezone.now()
    tokens = ApiToken.objects.filter(user=user, revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    )
    return {
        "password": user.has_usable_password(),
        "tokens": list(tokens.order_by("-created_at").values("prefix", "name", "last_used_at", "expires_at")),
        "otp_devices": devices,
        "sso": user_is_sso(user),
    }
