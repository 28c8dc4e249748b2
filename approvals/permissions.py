"""One access policy for every surface (API, console, websockets, exports, commands).

Helpers return the object or raise: ``NotFound`` for what the principal may
not see (so existence does not leak), ``Forbidden`` for actions it may not take.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from approvals.errors import Forbidden, NotFound
from approvals.models import ApprovalTask, AuditEvent, GraphAssignment
from runtime.models import Thread

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
    ],
    "operator": [
        "approvals.view_approvaltask",
        "runtime.view_thread",
        "runtime.start_thread",
        "runtime.retry_thread",
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
        "console.release_any_claim",
        "approvals.manage_webhooks",  # an inbound endpoint's secret is a decision credential
        "approvals.manage_users",  # user administration (approvals.users); a token needs the "admin" action
    ],
    # Webhook principals (``webhook:<endpoint>``): decide tasks of their endpoint's graph, nothing else.
    "service": ["approvals.view_approvaltask", "approvals.decide_task", "runtime.view_thread"],
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
}
TOKEN_SCOPE_ATTR = "gatehouse_token_scope"  # noqa: S105 - set on the user by token authentication


def can(user: Principal, perm: str) -> bool:
    if not (user.is_authenticated and user.is_active and user.has_perm(perm)):
        return False
    scope = getattr(user, TOKEN_SCOPE_ATTR, None)
    if scope and scope[1]:
        return TOKEN_ACTIONS.get(perm, "admin") in scope[1]
    return True


def require(user: Principal, perm: str, action: str) -> None:
    if not can(user, perm):
        raise Forbidden(f"you may not {action}")


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


def _scope(qs: QuerySet[Any], user: Principal, field: str = "graph") -> QuerySet[Any]:
    visible = graphs_visible(user)
    return qs if visible is None else qs.filter(**{f"{field}__in": visible})


def threads_visible(user: Principal) -> QuerySet[Thread]:
    if not can(user, "runtime.view_thread"):
        return Thread.objects.none()
    return _scope(Thread.objects.all(), user)


def tasks_visible(user: Principal) -> QuerySet[ApprovalTask]:
    if not can(user, "approvals.view_approvaltask"):
        return ApprovalTask.objects.none()
    return _scope(ApprovalTask.objects.all(), user)


def audit_visible(user: Principal) -> QuerySet[AuditEvent]:
    if not can(user, "approvals.view_audit"):
        return AuditEvent.objects.none()
    return _scope(AuditEvent.objects.all(), user)


def thread_get_for(user: Principal, thread_id: Any) -> Thread:
    thread = threads_visible(user).filter(pk=thread_id).first()
    if thread is None:
        raise NotFound(f"thread {thread_id} not found", field="thread_id")
    return thread


def task_get_for(user: Principal, task_id: Any, *, lock: bool = False) -> ApprovalTask:
    """The task if ``user`` may see it; ``lock`` also locks it and its thread (in one statement)."""
    qs = tasks_visible(user).select_related("thread")
    if lock:
        qs = qs.select_for_update()
    task = qs.filter(pk=task_id).first()
    if task is None:
        raise NotFound(f"task {task_id} not found", field="task_id")
    return task


def can_decide(user: Principal, task: ApprovalTask) -> bool:
    return can(user, "approvals.decide_task") and graph_visible(user, task.graph) and gate_assigned(user, task)


def gate_assigned(user: Principal, task: ApprovalTask) -> bool:
    """Assignments may name gates: a reviewer assigned only to some gates of a graph decides only those.

    An assignment without a gate (or to every graph) covers every gate; a principal with
    no assignment for the graph (admins, who see every graph) is not narrowed.
    """
    gates = {gate for graph, gate in _assignments(user) if graph in (task.graph, ALL_GRAPHS)}
    return not gates or "" in gates or task.node in gates


def require_decide(user: Principal, task: ApprovalTask) -> None:
    if not can_decide(user, task):
        if can(user, "approvals.decide_task") and graph_visible(user, task.graph):
            raise Forbidden(f"you are not assigned to the gate {task.node!r} of {task.graph!r}")
        raise Forbidden("you may not decide approval tasks")


def require_start(user: Principal, graph: str) -> None:
    require(user, "runtime.start_thread", "start threads")
    if not graph_visible(user, graph):
        raise Forbidden(f"you are not assigned to graph {graph!r}", field="graph")


def require_retry(user: Principal, thread: Thread) -> None:
    require(user, "runtime.retry_thread", "retry threads")


# Cancelling runs (approvals.run_cancel): an operator's run control, as retrying is.
def require_run_cancel(user: Principal, thread: Thread) -> None:
    require(user, "runtime.retry_thread", "cancel runs")
    if not graph_visible(user, thread.graph):
        raise Forbidden(f"you are not assigned to graph {thread.graph!r}", field="graph")
