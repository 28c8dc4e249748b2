"""One access policy for every surface (API, console, websockets, exports, commands).

Helpers return the object or raise: ``NotFound`` for what the principal may
not see (so existence does not leak), ``Forbidden`` for actions it may not take.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import Q, QuerySet
from django.db.transaction import TransactionManagementError

from approvals.errors import Forbidden, NotFound
from approvals.models import ApprovalTask, AuditEvent, GraphAssignment
from runtime import rows
from runtime.models import Thread
from runtime.registry import graph_names

Principal = User | AnonymousUser
ALL_GRAPHS = "*"

ROLES: dict[str, list[str]] = {
    "reviewer": ["approvals.view_approvaltask", "approvals.decide_task", "runtime.view_thread"],
    "approver": [
        "approvals.view_approvaltask",
        "approvals.decide_task",
        "approvals.approve_final",
        "approvals.view_sensitive",
        "runtime.view_thread",
    ],
    "auditor": [
        "approvals.view_approvaltask",
        "runtime.view_thread",
        "approvals.view_audit",
        "approvals.view_all_graphs",
        "approvals.view_sensitive",
        "approvals.view_dashboard",  # team dashboard
    ],
    "operator": [
        "approvals.view_approvaltask",
        "runtime.view_thread",
        "runtime.start_thread",
        "runtime.retry_thread",
        "runtime.time_travel",  # time travel: replay and fork from a past checkpoint
    ],
    "admin": [
        "approvals.view_approvaltask",
        "approvals.decide_task",
        "approvals.approve_final",
        "approvals.view_sensitive",
        "approvals.view_audit",
        "approvals.view_all_graphs",
        "runtime.view_thread",
        "runtime.start_thread",
        "runtime.retry_thread",
        "approvals.release_any_claim",
        "approvals.manage_webhooks",  # an inbound endpoint's secret is a decision credential
        "approvals.manage_users",  # user administration (approvals.users); a token needs the "admin" action
        "approvals.reassign_task",  # hand-offs: move a task to a person or a group
        "approvals.view_dashboard",  # team dashboard
        "runtime.time_travel",  # time travel: replay and fork from a past checkpoint
    ],
    # Webhook principals (``webhook:<endpoint>``): decide tasks of their endpoint's graph, nothing else.
    "service": ["approvals.view_approvaltask", "approvals.decide_task", "runtime.view_thread"],
    # A team lead reviews, moves tasks between people and groups (hand-offs), breaks stale claims,
    # watches the team dashboard and follows its numbers to the decision history behind them.
    "lead": [
        "approvals.view_approvaltask",
        "approvals.decide_task",
        "runtime.view_thread",
        "approvals.reassign_task",
        "approvals.release_any_claim",
        "approvals.view_audit",
        "approvals.view_dashboard",
    ],
}


# What an API token scoped to some actions may still do: each permission belongs to one action.
TOKEN_ACTIONS: dict[str, str] = {
    "approvals.view_approvaltask": "read",
    "runtime.view_thread": "read",
    "approvals.view_audit": "read",
    "approvals.view_all_graphs": "read",
    "approvals.view_sensitive": "read",
    "approvals.decide_task": "decide",
    "approvals.approve_final": "decide",
    "runtime.start_thread": "start",
    "runtime.retry_thread": "retry",
    "approvals.reassign_task": "decide",  # hand-offs: routing decision work is decision work
    "approvals.view_dashboard": "read",  # team dashboard
}
TOKEN_SCOPE_ATTR = "gatehouse_token_scope"  # noqa: S105 - set on the user by token authentication


def _perms_preload(user: Principal) -> None:
    """Read the user's permissions and graph assignments in one query where three were made.

    Django's ModelBackend reads the user's own permissions and their groups' in
    separate queries and keeps the union on the user object (``_perm_cache``);
    ``_assignments`` then read the assignments. One UNION ALL fills both caches
    with the same sets. Superusers never reach the backend (``User.has_perm``
    answers for them), so they are left to it.

    The statement is fixed text (``_perms_sql``): every request runs it once, and
    composing it with the ORM cost several times the round trip.
    """
    if not isinstance(user, User) or user.pk is None or user.is_superuser or hasattr(user, "_perm_cache"):
        return
    with_assignments = getattr(user, _ASSIGNMENTS_CACHE, None) is None
    with rows.fixed_cursor() as cursor:
        cursor.execute(_perms_sql(with_assignments, connection.vendor), [user.pk] * (3 if with_assignments else 2))
        granted = cursor.fetchall()
    access_keep(user, granted, with_assignments=with_assignments)


def access_load(user: Principal) -> None:
    """Read now what ``user`` may do (its permissions and assignments), unless already read: a later check makes
    no query (an async view's error handler, on the event loop, may make none)."""
    if getattr(user, "is_active", False):
        _perms_preload(user)


def access_keep(user: User, granted: list[Any], *, with_assignments: bool = True) -> None:
    """Keep on ``user`` what ``access_sql`` (or the preload's own statement) found it allowed: rows of
    (kind, app label or graph, codename or gate), the caches the permission checks read."""
    perms: set[str] = set()
    assignments: list[tuple[str, str]] = []
    for kind, first, second in granted:
        if kind == "perm":
            perms.add(f"{first}.{second}")
        else:
            assignments.append((first, second))
    user._perm_cache = perms  # type: ignore[attr-defined]
    if with_assignments:
        setattr(user, _ASSIGNMENTS_CACHE, assignments)


# Where a user object keeps what it was found allowed: Django's ModelBackend, then ``_assignments``.
_ACCESS_CACHES = ("_perm_cache", "_user_perm_cache", "_group_perm_cache")


def access_forget(user: Principal) -> None:
    """Drop what ``user`` was found allowed (permissions, graph assignments): the next check reads it anew.

    A request's user object lives as long as the request. A websocket's lives as long as the socket,
    and its reader's access may be withdrawn meanwhile (a role removed, an assignment deleted):
    consumers forget before every push, so what they send is what the reader may see now.
    """
    for attr in (*_ACCESS_CACHES, _ASSIGNMENTS_CACHE):
        if hasattr(user, attr):
            delattr(user, attr)


@functools.cache
def access_sql(user_column: str) -> str:
    """The preload's UNION ALL with all three parts, for the user whose id is ``user_column`` (an
    enclosing statement's column): one statement can read a user and what it may do (approvals.tokens)."""
    return _perms_sql(True, connection.vendor, user=user_column)


@functools.cache
def _perms_sql(with_assignments: bool, vendor: str, user: str = "%s") -> str:
    """The preload's UNION ALL: the user's own permissions, their groups', and (optionally) their
    assignments, as (kind, app label or graph, codename or gate); names from the models' metadata.
    ``user``: the user's id as SQL (a parameter by default)."""
    q = connection.ops.quote_name

    def col(model: Any, field: str) -> str:
        return f"{q(model._meta.db_table)}.{q(str(model._meta.get_field(field).column))}"

    perm, ctype = Permission, ContentType
    own, groups = User.user_permissions.through, Group.permissions.through
    members = User.groups.through
    perm_cols = f"'perm', {col(ctype, 'app_label')}, {col(perm, 'codename')}"
    perm_ctype = f"INNER JOIN {q(ctype._meta.db_table)} ON {col(perm, 'content_type')} = {col(ctype, 'id')}"
    # Table and column names from the models; the user id is bound.
    parts = [
        f"SELECT {perm_cols} FROM {q(perm._meta.db_table)}",  # noqa: S608
        f"INNER JOIN {q(own._meta.db_table)} ON {col(perm, 'id')} = {col(own, 'permission')} {perm_ctype}",
        f"WHERE {col(own, 'user')} = {user}",
        f"UNION ALL SELECT {perm_cols} FROM {q(perm._meta.db_table)}",  # noqa: S608
        f"INNER JOIN {q(groups._meta.db_table)} ON {col(perm, 'id')} = {col(groups, 'permission')}",
        f"INNER JOIN {q(members._meta.db_table)} ON {col(groups, 'group')} = {col(members, 'group')} {perm_ctype}",
        f"WHERE {col(members, 'user')} = {user}",
    ]
    if with_assignments:
        a = GraphAssignment
        assigned = f"'assigned', {col(a, 'graph')}, {col(a, 'gate')}"
        parts.append(f"UNION ALL SELECT {assigned} FROM {q(a._meta.db_table)}")  # noqa: S608
        parts.append(f"WHERE {col(a, 'user')} = {user}")
    return " ".join(parts)


def can(user: Principal, perm: str) -> bool:
    if user.is_authenticated and user.is_active:
        _perms_preload(user)
    if not (user.is_authenticated and user.is_active and user.has_perm(perm)):
        return False
    scope = getattr(user, TOKEN_SCOPE_ATTR, None)
    if scope and scope[1]:
        return TOKEN_ACTIONS.get(perm, "admin") in scope[1]
    return True


def token_refusal(user: Principal, perms: tuple[str, ...], action: str) -> Forbidden | None:
    """The refusal to give when ``user``'s role grants one of ``perms`` but the API token it came with is
    limited to other actions: the token is the reason, so it is named first, whatever else would refuse.
    ``action`` is a verb phrase that reads after "to" ("decide approval tasks", "set yourself away").
    """
    scope = getattr(user, TOKEN_SCOPE_ATTR, None)
    if not scope or not scope[1] or not (user.is_authenticated and user.is_active):
        return None
    needed = [TOKEN_ACTIONS.get(perm, "admin") for perm in perms if user.has_perm(perm)]
    if not needed or any(n in scope[1] for n in needed):
        return None
    return Forbidden(
        f"this API token is limited to {', '.join(sorted(scope[1]))}: to {action} it needs the "
        f"{' or '.join(repr(n) for n in dict.fromkeys(needed))} action"
    )


# Where ``token_needs`` keeps, on an API view, the permissions it acts under.
TOKEN_NEEDS_ATTR = "gatehouse_token_needs"  # noqa: S105 - an attribute's name, not a secret

_View = TypeVar("_View", bound=Callable[..., Any])


def token_needs(*perms: str) -> Callable[[_View], _View]:
    """Declare on an API view the permissions one of which it acts under, those its service checks with
    ``require`` (``TOKEN_ACTIONS`` turns them into token actions). ``GatehouseAPI`` reads it: a token whose
    actions hold none of them is refused there before anything it sent is judged. A POST that only reads (a
    search with its filters in a body) declares a reading permission. Every POST, PUT, PATCH and DELETE an
    API token may call declares one: ``GatehouseAPI`` refuses to build its URLs otherwise."""
    if not perms:
        raise ValueError("token_needs: name the permissions the view acts under")

    def declare(view: _View) -> _View:
        setattr(view, TOKEN_NEEDS_ATTR, perms)
        return view

    return declare


def token_actions_for(perms: tuple[str, ...]) -> frozenset[str]:
    """The token actions one of which a token needs to act under one of ``perms``."""
    return frozenset(TOKEN_ACTIONS.get(perm, "admin") for perm in perms)


def require(user: Principal, perm: str, action: str, *, why: str = "") -> None:
    """Refuse unless ``user`` may ``perm``. ``action`` reads after "you may not" and after the token's "to";
    ``why`` (the role's reason) is added to the role's refusal only: a token's refusal has its own."""
    if not can(user, perm):
        raise token_refusal(user, (perm,), action) or Forbidden(f"you may not {action}" + (f": {why}" if why else ""))


_ASSIGNMENTS_CACHE = "_gatehouse_assignments"


def _assignments(user: Principal) -> list[tuple[str, str]]:
    """The user's (graph, gate) assignments, read once per user object.

    Cached on the instance like Django's own permission cache (``_perm_cache``):
    a request loads its user afresh, so one request sees one consistent set and
    pays one query for it however many checks it makes.
    """
    cached: list[tuple[str, str]] | None = getattr(user, _ASSIGNMENTS_CACHE, None)
    if cached is None:
        cached = list(GraphAssignment.objects.filter(user_id=user.pk or 0).values_list("graph", "gate"))
        setattr(user, _ASSIGNMENTS_CACHE, cached)
    return cached


def graphs_visible(user: Principal) -> set[str] | None:
    """The graph names ``user`` may see; None means every graph."""
    if not user.is_authenticated or not user.is_active:
        return set()
    if can(user, "approvals.view_all_graphs"):
        return _token_graphs(user, None)
    names = {graph for graph, _ in _assignments(user)}
    visible = None if ALL_GRAPHS in names else names
    return _token_graphs(user, visible)


def _token_graphs(user: Principal, visible: set[str] | None) -> set[str] | None:
    """A token scoped to graphs narrows what its user may see; it never widens it."""
    scope = getattr(user, TOKEN_SCOPE_ATTR, None)
    if not scope or not scope[0]:
        return visible
    return set(scope[0]) if visible is None else visible & set(scope[0])


def graph_visible(user: Principal, graph: str) -> bool:
    visible = graphs_visible(user)
    return visible is None or graph in visible


def graph_names_visible(user: Principal) -> list[str]:
    """The registered graphs ``user`` may see, in the registry's order (menus, assistants, choices)."""
    visible = graphs_visible(user)
    return [name for name in graph_names() if visible is None or name in visible]


def _scope(qs: QuerySet[Any], user: Principal, field: str = "graph") -> QuerySet[Any]:
    visible = graphs_visible(user)
    return qs if visible is None else qs.filter(**{f"{field}__in": visible})


def threads_visible(user: Principal) -> QuerySet[Thread]:
    if not can(user, "runtime.view_thread"):
        return Thread.objects.none()
    return _scope(Thread.objects.all(), user)


def threads_visible_or_own_unbound(user: Principal) -> QuerySet[Thread]:
    """``threads_visible``, plus the threads ``user`` created that no run has bound to a graph yet.

    The LangGraph-Platform API creates a thread before its first run names the
    graph; graph scoping cannot see such a thread, so its creator always may. The
    creator needs the view permission, whatever its token's action scope: a token
    scoped to ``start`` starts the thread it has just created.
    """
    if not user.has_perm("runtime.view_thread"):
        return Thread.objects.none()
    own_unbound = Q(graph="", created_by_id=user.pk) if user.is_authenticated else Q(pk__in=[])
    return Thread.objects.filter(Q(pk__in=threads_visible(user).values("pk")) | own_unbound)


def tasks_visible(user: Principal) -> QuerySet[ApprovalTask]:
    if not can(user, "approvals.view_approvaltask"):
        return ApprovalTask.objects.none()
    return _scope(ApprovalTask.objects.all(), user)


def audit_visible(user: Principal) -> QuerySet[AuditEvent]:
    if not can(user, "approvals.view_audit"):
        return AuditEvent.objects.none()
    return _scope(AuditEvent.objects.all(), user)


def thread_get_for(user: Principal, thread_id: Any) -> Thread:
    """The thread if ``user`` may see it (``threads_visible``), else ``NotFound``.

    Every long poll and thread read starts here, so the lookup is fixed SQL (``_thread_by_key``)
    rather than ``threads_visible(user).filter(pk=...)``, whose composing and compiling cost
    several times the round trip; the rule is the same: the view permission, and the graph
    among the visible ones.
    """
    thread = None
    if can(user, "runtime.view_thread"):
        thread = _thread_by_key(thread_id, graphs_visible(user))
    if thread is None:
        raise NotFound(f"thread {thread_id} not found", field="thread_id")
    return thread


def _thread_by_key(thread_id: Any, graphs: set[str] | None) -> Thread | None:
    """The thread with key ``thread_id`` whose graph is one of ``graphs`` (None: any graph).

    An id that is no UUID raises the ``ValidationError`` the ORM's lookup raises.
    """
    if graphs is not None and not graphs:
        return None
    meta, q = Thread._meta, connection.ops.quote_name
    where, params = _key_among_graphs(Thread, "", thread_id, graphs)
    with rows.fixed_cursor() as cursor:
        cursor.execute(f"SELECT {rows.columns(Thread)} FROM {q(meta.db_table)} WHERE {where}", params)  # noqa: S608
        row = cursor.fetchone()
    return None if row is None else rows.model_from_row(Thread, row)


def _key_among_graphs(model: Any, prefix: str, key: Any, graphs: set[str] | None) -> tuple[str, list[Any]]:
    """The WHERE of a key lookup scoped to ``graphs`` (None: any graph), columns prefixed ``prefix``, and
    its values: the key as the ORM's lookup prepares it (a non-UUID raises its ``ValidationError``)."""
    meta, q = model._meta, connection.ops.quote_name
    where = f"{prefix}{q(str(meta.pk.column))} = %s"
    params = [meta.pk.get_db_prep_value(key, connection)]
    if graphs is not None:
        where += f" AND {prefix}{q(str(meta.get_field('graph').column))} IN ({', '.join(['%s'] * len(graphs))})"
        params += sorted(graphs)
    return where, params


def thread_visible(user: Principal, thread: Thread) -> bool:
    """Whether ``threads_visible(user)`` holds ``thread``, a row already read: the same rule, no query."""
    return graph_threads_visible(user, thread.graph)


def graph_threads_visible(user: Principal, graph: str) -> bool:
    """Whether ``user`` may read the threads of ``graph`` (``thread_visible`` before a thread exists)."""
    return can(user, "runtime.view_thread") and graph_visible(user, graph)


def task_visible(user: Principal, task: ApprovalTask) -> bool:
    """Whether ``tasks_visible(user)`` holds ``task``, a row already read: the same rule, no query."""
    return can(user, "approvals.view_approvaltask") and graph_visible(user, task.graph)


def thread_require_visible(user: Principal, thread: Thread) -> None:
    """``thread_get_for``'s 404 for a thread row in hand (a re-check that needs no re-read)."""
    if not thread_visible(user, thread):
        raise NotFound(f"thread {thread.pk} not found", field="thread_id")


def task_require_visible(user: Principal, task: ApprovalTask) -> None:
    """``task_get_for``'s 404 for a task row in hand (a re-check that needs no re-read)."""
    if not task_visible(user, task):
        raise NotFound(f"task {task.pk} not found", field="task_id")


def task_get_for(user: Principal, task_id: Any, *, lock: bool = False) -> ApprovalTask:
    """The task, with its thread, if ``user`` may see it (``tasks_visible``), else ``NotFound``; ``lock``
    also locks both rows (in the same statement).

    Every decision, claim and task read starts here: fixed SQL (``_task_by_key``), as ``thread_get_for``,
    where ``tasks_visible(user).select_related("thread").filter(pk=...)`` was composed, compiled and
    planned on every call.
    """
    task = None
    if can(user, "approvals.view_approvaltask"):
        task = _task_by_key(task_id, graphs_visible(user), lock=lock)
    if task is None:
        raise NotFound(f"task {task_id} not found", field="task_id")
    return task


def _task_by_key(task_id: Any, graphs: set[str] | None, *, lock: bool) -> ApprovalTask | None:
    """The task with key ``task_id`` whose graph is one of ``graphs`` (None: any graph), its thread
    read with it; ``lock``: ``FOR UPDATE`` on both, refused outside a transaction as the ORM refuses it.

    An id that is no UUID raises the ``ValidationError`` the ORM's lookup raises.
    """
    if lock and not connection.in_atomic_block:
        raise TransactionManagementError("select_for_update cannot be used outside of a transaction.")
    if graphs is not None and not graphs:
        return None
    meta, q = ApprovalTask._meta, connection.ops.quote_name
    where, params = _key_among_graphs(ApprovalTask, "t.", task_id, graphs)
    locking = " FOR UPDATE" if lock and connection.features.has_select_for_update else ""
    thread_key, task_thread = q(str(Thread._meta.pk.column)), q(str(meta.get_field("thread").column))
    with rows.fixed_cursor() as cursor:
        cursor.execute(
            f"SELECT {rows.columns(ApprovalTask, 't')}, {rows.columns(Thread, 'th')} "  # noqa: S608 - names from the models
            f"FROM {q(meta.db_table)} t INNER JOIN {q(Thread._meta.db_table)} th ON th.{thread_key} = t.{task_thread} "
            f"WHERE {where}{locking}",
            params,
        )
        row = cursor.fetchone()
    return None if row is None else rows.model_and_related(ApprovalTask, "thread", Thread, row)


def can_decide(user: Principal, task: ApprovalTask) -> bool:
    return can(user, "approvals.decide_task") and graph_visible(user, task.graph) and gate_assigned(user, task)


FINAL_APPROVER_NEEDED = "the final approval of a multi-approver task needs the approver role"


def final_approval_allowed(user: Principal, task: ApprovalTask, *, approvals_before: int) -> bool:
    """Whether ``user`` may give the approval that comes after ``approvals_before`` others on ``task``.

    The quorum's rule: the approval that completes a multi-approver task needs ``approvals.approve_final``
    (the approver role); an earlier one, or a single-approval task's, is anyone's who may decide it.
    ``task_decide`` refuses by it (``FINAL_APPROVER_NEEDED``) and the task page asks it before offering
    Approve, so a reviewer is not offered a signature the service then refuses.
    """
    completes = approvals_before + 1 >= task.required_approvals
    return not completes or task.required_approvals <= 1 or can(user, "approvals.approve_final")


def gate_assigned(user: Principal, task: ApprovalTask) -> bool:
    """Assignments may name gates: a reviewer assigned only to some gates of a graph decides only those.

    An assignment without a gate (or to every graph) covers every gate; a principal with
    no assignment for the graph (admins, who see every graph) is not narrowed.
    """
    gates = {gate for graph, gate in _assignments(user) if graph in (task.graph, ALL_GRAPHS)}
    return not gates or "" in gates or task.node in gates


def require_decide(user: Principal, task: ApprovalTask) -> None:
    if not can_decide(user, task):
        refusal = token_refusal(user, ("approvals.decide_task",), "decide approval tasks")
        if refusal is not None:
            raise refusal
        if can(user, "approvals.decide_task") and graph_visible(user, task.graph):
            raise Forbidden(f"you are not assigned to the gate {task.node!r} of {task.graph!r}")
        raise Forbidden("you may not decide approval tasks")


def require_dashboard(user: Principal) -> None:
    """The team dashboard: leads, auditors and admins (its numbers are scoped like every other read)."""
    require(user, "approvals.view_dashboard", "see the team dashboard")


def require_start(user: Principal, graph: str) -> None:
    require(user, "runtime.start_thread", "start threads")
    if not graph_visible(user, graph):
        raise Forbidden(f"you are not assigned to graph {graph!r}", field="graph")


def require_retry(user: Principal, thread: Thread) -> None:
    require(user, "runtime.retry_thread", "retry threads")


# --- hand-offs -----------------------------------------------------------------------------------


def can_reassign(user: Principal, task: ApprovalTask) -> bool:
    """Leads and admins move tasks of graphs they may see to people and groups."""
    return can(user, "approvals.reassign_task") and graph_visible(user, task.graph)


def require_reassign(user: Principal, task: ApprovalTask) -> None:
    if not can_reassign(user, task):
        raise token_refusal(user, ("approvals.reassign_task",), "reassign tasks") or Forbidden(
            "you may not reassign tasks (a lead's or an admin's right)"
        )


# --- Conversation (comments) -------------------------------------------------------------------
# Who may read a comment is who may see its task or thread (task_get_for / thread_get_for).
# Who may post works on the graph: a reviewer or approver (decides), an operator (starts or
# retries threads) or an admin — never an auditor (reads only) or a read-only token.
COMMENT_POST_PERMS = (
    "approvals.decide_task",
    "runtime.start_thread",
    "runtime.retry_thread",
    "approvals.reassign_task",
)


def can_comment(user: Principal, graph: str) -> bool:
    return graph_visible(user, graph) and any(can(user, perm) for perm in COMMENT_POST_PERMS)


def require_comment(user: Principal, graph: str) -> None:
    if not can_comment(user, graph):
        refusal = token_refusal(user, COMMENT_POST_PERMS, "comment") if graph_visible(user, graph) else None
        raise refusal or Forbidden(
            "you may not comment here: commenting is for reviewers, operators and leads of the graph"
        )


# --- time travel (approvals.time_travel) ---


def require_time_travel(user: Principal, thread: Thread) -> None:
    """Replaying or forking a thread (operators): it may re-run effects on a new branch."""
    require(user, "runtime.time_travel", "replay or fork threads")


# --- long-term memory store (approvals/store.py, lgplatform/store_api.py, console store pages) ---
# Readers: every role but webhook services; writers: operators and admins. A namespace is scoped by
# its first label's rule in langgraph.json (gatehouse.store.namespaces): a principal must see one of
# the rule's graphs; a namespace without a rule naming graphs is for principals who see every graph.
for _role in ("reviewer", "approver", "auditor", "operator", "admin", "lead"):
    ROLES[_role].append("runtime.view_store")
for _role in ("operator", "admin"):
    ROLES[_role].append("runtime.write_store")
TOKEN_ACTIONS.update({"runtime.view_store": "read", "runtime.write_store": "store"})


def store_namespace_visible(user: Principal, namespace: tuple[str, ...] | list[str]) -> bool:
    from runtime.store import store_config

    visible = graphs_visible(user)
    if visible is None:
        return True
    rule = store_config().rule(namespace)
    return rule is not None and bool(set(rule.graphs) & visible)


def store_require(user: Principal, namespace: tuple[str, ...] | list[str], *, write: bool = False) -> None:
    """Raise unless ``user`` may read (or write) items of ``namespace`` (403: the rule is configuration,
    not data, so refusing says nothing about which items exist)."""
    if write:
        require(user, "runtime.write_store", "write long-term memory")
    else:
        require(user, "runtime.view_store", "read long-term memory")
    if namespace and not store_namespace_visible(user, namespace):
        verb = "write" if write else "read"
        raise Forbidden(f"you may not {verb} the namespace {list(namespace)}", field="namespace")


def store_redaction(user: Principal, namespace: tuple[str, ...] | list[str]) -> list[str]:
    """The paths masked in ``namespace``'s item values for ``user``."""
    from runtime.store import store_config

    if can(user, "approvals.view_sensitive"):
        return []
    rule = store_config().rule(namespace)
    return list(rule.sensitive_paths) if rule else []


# Cancelling runs (approvals.run_cancel): an operator's run control, as retrying is.
def require_run_cancel(user: Principal, thread: Thread) -> None:
    require(user, "runtime.retry_thread", "cancel runs")
    if not graph_visible(user, thread.graph):
        raise Forbidden(f"you are not assigned to graph {thread.graph!r}", field="graph")
