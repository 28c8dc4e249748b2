"""Reads of the approvals domain, always scoped by ``permissions``."""

from __future__ import annotations

import base64
import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Exists, F, Field, Model, OuterRef, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from approvals import permissions
from approvals.assignment import assigned_to_q
from approvals.audit_filters import AuditFilters
from approvals.columns import columns_filter
from approvals.deadlines import tasks_due_filter
from approvals.errors import InvalidInput
from approvals.inbox_filter import InboxFilter
from approvals.inputs import range_check
from approvals.models import (
    ApprovalTask,
    AuditAction,
    AuditEvent,
    Decision,
    ExternalSource,
    ExternalTask,
    TaskStatus,
)
from approvals.task_rows import tasks_pending
from approvals.text_search import ContainsText
from runtime import rows
from runtime.models import ACTIVE_RUN_STATUSES, Run, RunKind, Thread, ThreadStatus
from runtime.registry import EXTERNAL_GRAPH_PREFIX, graph_get, graph_names

# --- keyset cursors: one codec (a JSON list, URL-safe base64); each list says what it holds ----------


def cursor_pack(parts: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode()


def cursor_unpack(cursor: str, *, count: int) -> list[Any]:
    """The ``count`` parts of ``cursor``; ValueError for anything this codec did not produce."""
    parts = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    if not isinstance(parts, list) or len(parts) != count:
        raise ValueError("not a cursor")
    return parts


def cursor_encode(created_at: datetime, pk: Any) -> str:
    return cursor_pack([created_at.isoformat(), str(pk)])


def cursor_decode(cursor: str) -> tuple[datetime, str]:
    try:
        created, pk = cursor_unpack(cursor, count=2)
        return datetime.fromisoformat(created), str(uuid.UUID(pk))  # every list it pages has UUID keys
    except Exception:  # noqa: BLE001 - any malformed cursor is the caller's 400
        raise InvalidInput("cursor is not one this API returned", field="cursor") from None


def task_current_for(*, user: permissions.Principal, task: ApprovalTask) -> ApprovalTask | None:
    """Where ``task``'s thread waits now: its newest pending task other than ``task`` that ``user`` may see.

    A task superseded by a replay or fork was a dead end ("no longer pending… Reload the task", and the
    reload said the same); its page links here, or to the thread when this is None.
    """
    return (
        permissions.tasks_visible(user)
        .filter(thread_id=task.thread_id, status=TaskStatus.PENDING)
        .exclude(pk=task.pk)
        .order_by("-created_at", "-id")
        .first()
    )


def tasks_list(
    *,
    user: permissions.Principal,
    filter: InboxFilter,
    limit: int = 50,
    cursor: str | None = None,
) -> tuple[list[ApprovalTask], str | None]:
    """Newest first, keyset-paginated on (created_at, id) so deep pages stay fast."""
    qs = tasks_inbox(user=user, filter=filter).select_related("assigned_group")
    return newest_page(qs, limit=limit, cursor=cursor)


_Row = TypeVar("_Row", bound=Model)


def newest_page(qs: QuerySet[_Row], *, limit: int, cursor: str | None) -> tuple[list[_Row], str | None]:
    """One page of ``qs`` newest first, keyset-paginated on (created_at, id): the page after ``cursor``
    (None: the first) and the cursor of the page after it (None: this is the last)."""
    if cursor:
        created, pk = cursor_decode(cursor)
        qs = qs.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=pk))
    page = list(qs.order_by("-created_at", "-id")[: limit + 1])
    last = page[limit - 1] if len(page) > limit else None
    next_cursor = cursor_encode(last.created_at, last.pk) if last is not None else None  # type: ignore[attr-defined]
    return page[:limit], next_cursor


def tasks_pending_for_thread(*, user: permissions.Principal, thread: Thread) -> list[ApprovalTask]:
    """``thread``'s pending tasks ``user`` may see, oldest first: what ``tasks_visible(user)`` holds of
    them, by one fixed statement and the same rule applied to the rows (``permissions.task_visible``);
    every long poll that ends at a pause answers with them."""
    return [task for task in tasks_pending(thread) if permissions.task_visible(user, task)]


def thread_active_run_id(*, thread: Thread) -> uuid.UUID | None:
    """The id of ``thread``'s queued or running run (one at a time), or None: the run a client of a busy
    thread watches. Read only while the thread is busy (a run is queued or running makes it so), so a
    read of a thread at rest costs no statement more."""
    if thread.status != ThreadStatus.BUSY:
        return None
    active = Run.objects.filter(thread=thread, status__in=ACTIVE_RUN_STATUSES).order_by("-created_at")
    run_id: uuid.UUID | None = active.values_list("id", flat=True).first()
    return run_id


def audit_list(
    *,
    user: permissions.Principal,
    filters: AuditFilters,
    limit: int = 100,
    before_id: int | None = None,
) -> list[AuditEvent]:
    """Newest first, filtered as the console's audit page and the export filter (``audit_filter``); the page
    after ``before_id`` is the next ``limit`` matching events below it, so paging skips none."""
    qs = audit_filter(permissions.audit_visible(user), **filters.query())
    if before_id:
        qs = qs.filter(id__lt=before_id)
    return list(qs.order_by("-id")[:limit])


def audit_action_check(qs: QuerySet[AuditEvent], action: str) -> None:
    """A filter's action must be one the trail records (or, ending in ".", a family of them): a typo
    answers with what is wrong, not with an empty trail that reads as "nothing happened"."""
    known = AuditAction.values
    if action.endswith("."):
        if any(a.startswith(action) for a in known) or qs.filter(action__startswith=action).exists():
            return
    elif action in known or qs.filter(action=action).exists():
        return
    raise InvalidInput(
        f"action: {action[:64]!r} is not an audit action (for example thread.started, or webhook. for a family)",
        field="action",
    )


def audit_filter(
    qs: QuerySet[AuditEvent],
    *,
    actor: str = "",
    action: str = "",
    graph: str = "",
    thread_id: Any = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """The audit page's and the export's filters: an actor label (any case), an action or, ending in ".",
    a family of actions ("webhook."), a graph, a thread, and a half-open time window [since, until)."""
    range_check(since, until)
    if action:
        audit_action_check(qs, action)  # against the whole visible trail, before the other filters
    if actor:
        qs = qs.filter(actor_label__iexact=actor)
    if action:
        qs = qs.filter(action__startswith=action) if action.endswith(".") else qs.filter(action=action)
    if graph:
        qs = qs.filter(graph=graph)
    if thread_id:
        qs = qs.filter(thread_id=thread_id)
    if since:
        qs = qs.filter(at__gte=since)
    if until:
        qs = qs.filter(at__lt=until)
    return qs


# --- the inbox: one filter (approvals.inbox_filter) for the inbox page, its live updates, the API and bulk ---


def tasks_inbox(*, user: permissions.Principal, filter: InboxFilter) -> QuerySet[ApprovalTask]:
    """The approval tasks ``user`` may see that match ``filter`` (unordered).

    ``columns``: filters on the gate's inbox columns ({key: expression}, ``approvals.columns``);
    ``assigned="me"``: asked of the user by name or through one of their groups (hand-offs);
    ``due``: overdue, escalated or due soon (deadlines).
    """
    qs = permissions.tasks_visible(user)
    if filter.status:
        qs = qs.filter(status=filter.status)
    if filter.graph:
        qs = qs.filter(graph=filter.graph)
    if filter.node:
        qs = qs.filter(node=filter.node)
    if filter.thread:
        qs = qs.filter(thread_id=filter.thread)
    now = timezone.now()
    if filter.claimed == "mine":
        qs = qs.filter(claim__user_id=user.pk or 0, claim__expires_at__gt=now)
    elif filter.claimed == "unclaimed":
        qs = qs.filter(Q(claim__isnull=True) | Q(claim__expires_at__lte=now))
    elif filter.claimed == "others":
        qs = qs.filter(claim__expires_at__gt=now).exclude(claim__user_id=user.pk or 0)
    q = filter.q.strip()
    if q:
        qs = qs.filter(_inbox_search(q))
    if filter.assigned == "me":  # the one rule for reading assignments (approvals.assignment)
        qs = qs.filter(assigned_to_q(user))
    if filter.due:
        qs = tasks_due_filter(qs, filter.due, now=now)
    if filter.columns:
        qs = columns_filter(qs, user=user, graph=filter.graph, node=filter.node, filters=filter.columns)
    return qs


def _inbox_search(q: str) -> Q:
    try:
        ident = uuid.UUID(q)
    except ValueError:
        return Q(ContainsText(F("title"), q)) | _metadata_search(q)
    return Q(thread_id=ident) | Q(id=ident)


def _metadata_search(q: str, metadata: str = "thread__metadata") -> Q:
    """The thread metadata each graph names as searchable (``search_metadata`` in langgraph.json), as a
    match on ``metadata`` (a task's thread's, or a thread's own: ``"metadata"``). Matches nothing where no
    graph names a key."""
    names = graph_names()
    graphs_by_key: dict[str, list[str]] = {}
    for name in names:
        for key in graph_get(name).options.get("search_metadata", ()):
            graphs_by_key.setdefault(key, []).append(name)
    if not graphs_by_key:
        return Q(pk__in=[])
    match = Q()
    for key, graphs in sorted(graphs_by_key.items()):
        found = Q(ContainsText(KeyTextTransform(key, metadata), q))
        match |= found if len(graphs) == len(names) else Q(graph__in=graphs) & found
    return match


@dataclass(frozen=True)
class ThreadFilter:
    """Which threads a thread list shows (empty text: no filter)."""

    status: str = ""  # a ThreadStatus value
    graph: str = ""
    q: str = ""  # a thread id, or text of the metadata its graph makes searchable (case, applicant)


def threads_list(
    *, user: permissions.Principal, filter: ThreadFilter, limit: int = 50, cursor: str | None = None
) -> tuple[list[Thread], str | None]:
    """The threads ``user`` may see that match ``filter``, newest first, a page at a time (``newest_page``):
    the console's list and the native API's."""
    qs = permissions.threads_visible(user)
    if filter.status:
        qs = qs.filter(status=filter.status)
    if filter.graph:
        qs = qs.filter(graph=filter.graph)
    q = filter.q.strip()
    if q:
        try:
            qs = qs.filter(id=uuid.UUID(q))
        except ValueError:
            qs = qs.filter(_metadata_search(q, "metadata"))
    return newest_page(qs, limit=limit, cursor=cursor)


def external_graphs() -> list[str]:
    """``external:<source>`` for every external engine's source that has created tasks (each has its thread):
    graphs of their own, though no ``langgraph.json`` registers them."""
    with_tasks = ExternalTask.objects.filter(source=OuterRef("pk"))
    names = ExternalSource.objects.filter(Exists(with_tasks)).values_list("name", flat=True)
    return sorted(EXTERNAL_GRAPH_PREFIX + name for name in names)


def threads_graphs(*, user: permissions.Principal) -> list[str]:
    """The graphs the threads list's filter offers: every graph a thread ``user`` may see can have. The
    registered ones they may see (the registry's order), then the rest: external sources with tasks, or,
    for a reader narrowed to some graphs, those of them no ``langgraph.json`` registers (external, retired)."""
    registered = permissions.graph_names_visible(user)
    visible = permissions.graphs_visible(user)
    others = set(external_graphs()) if visible is None else set(visible)
    return [*registered, *sorted(others - set(registered) - {permissions.ALL_GRAPHS, ""})]


_METADATA_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def search_metadata_from_config(graph: str, gatehouse: dict[str, Any]) -> tuple[str, ...]:
    """Registered with the graph registry for ``"gatehouse": {"search_metadata": {graph | "*": [key, ...]}}``:
    the thread metadata keys whose values the inbox search matches for the graph's tasks ("*": every graph
    not named)."""
    section = gatehouse.get("search_metadata", {})
    if not isinstance(section, dict):
        raise ValueError('gatehouse.search_metadata: must map graph names (or "*") to lists of metadata keys')
    where = graph if graph in section else "*"
    keys = section.get(where, [])
    if not isinstance(keys, list) or not all(isinstance(k, str) and _METADATA_KEY.fullmatch(k) for k in keys):
        raise ValueError(f"gatehouse.search_metadata.{where}: must be a list of metadata keys (letters, digits, _ . -)")
    return tuple(keys)


def status_read(*, model: type[Model], pk: Any) -> str | None:
    """One row's ``status``, or None once the row is gone: what a long poll re-reads on every wake.

    No visibility check: the caller has checked that the reader may see the row. Fixed SQL (names
    from the model): the ORM would compose and compile the same one-column lookup on every wake,
    for several times the cost of the round trip.
    """
    meta, q = model._meta, connection.ops.quote_name
    field = meta.get_field("status")
    if not isinstance(field, Field):
        raise TypeError(f"{meta.label}.status is not a column")
    status, table, key = q(str(field.column)), q(meta.db_table), q(str(meta.pk.column))
    with rows.fixed_cursor() as cursor:
        cursor.execute(f"SELECT {status} FROM {table} WHERE {key} = %s", [meta.pk.get_db_prep_value(pk, connection)])  # noqa: S608
        row = cursor.fetchone()
    return None if row is None else str(row[0])


# --- what a decision's action did: its resume run and the retries that carried it on ------------------

DECISION_RUNS_MAX = 20  # retries of one failed resume an auditor is shown; an operator stops long before


def decision_runs(*, decision: Decision) -> list[Run]:
    """The run that resumed the thread with ``decision``, then each retry that continued it, oldest first.

    A resume run that fails leaves its action half done; an operator's retry (``RunKind.RETRY``, the same
    thread) re-applies the decision and carries on, and its effects are that decision's too. The line
    ends at the thread's next run of another kind (a later decision's resume, a replay): what follows
    belongs to that.
    """
    if decision.run is None:
        return []
    first = decision.run
    later = (
        Run.objects.filter(thread_id=first.thread_id, created_at__gt=first.created_at)
        .select_related("created_by")
        .order_by("created_at", "id")
    )
    runs = [first]
    for run in later[:DECISION_RUNS_MAX]:
        if run.kind != RunKind.RETRY:
            break
        runs.append(run)
    return runs
