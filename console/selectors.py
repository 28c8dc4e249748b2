"""Console reads: the inbox, timelines, diffs, audit search — always scoped by ``approvals.permissions``."""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.contrib.auth.models import Group, User
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import F, OuterRef, Q, QuerySet, Subquery
from django.utils.dateparse import parse_datetime

from approvals import dashboard, gateway, permissions
from approvals import selectors as approvals_selectors
from approvals.abilities import approvals_given, in_order, proposal_current, proposes, superseded
from approvals.audit_filters import AuditFilters
from approvals.columns import Column, PayloadValue, column_for_sort, gate_columns
from approvals.errors import InvalidInput, NotFound
from approvals.inbox_filter import InboxFilter
from approvals.inputs import range_check
from approvals.intent import action_edits
from approvals.models import ApprovalTask, AuditAction, AuditEvent, Comment, Decision, TaskClaim
from approvals.selectors import audit_filter, cursor_pack, cursor_unpack, tasks_inbox
from console import words
from runtime import rows
from runtime.branches import branches_before
from runtime.models import Branch, Effect, Run, RunStatus, Thread

SORTS = {
    # name: (order_by, label)
    "newest": (("-created_at", "-id"), "Newest first"),
    "oldest": (("created_at", "id"), "Oldest first"),
    "due": (("due_at", "id"), "Due soonest"),
}


@dataclass
class Page:
    items: list[Any]
    next_cursor: str | None
    prev_cursor: str | None = None  # keyset cursor for the page before (``before=``); None on the first page
    columns: tuple[Column, ...] = ()  # the gate's inbox columns (approvals.columns)


# Column sorts (issue 14): "col:<key>" ascending, "-col:<key>" descending, by the gate's inbox column.
COLUMN_SORT_PREFIXES = ("col:", "-col:")


@dataclass(frozen=True)
class _Order:
    """A keyset order: a field (or annotation), its direction, whether it may be NULL (NULLs last), then id."""

    field: str
    descending: bool
    nullable: bool
    datetime: bool
    numeric: bool = False  # a column sort's kind: a page link's value must be a number, else text

    def ordering(self, *, reverse: bool = False) -> tuple[Any, ...]:
        down = self.descending != reverse
        value = F(self.field)
        # NULLs sort last going forward, so first going backward. Said only for a nullable field: an
        # explicit NULLS clause on a NOT NULL one no longer matches its index (task_status_newest is
        # "created_at DESC", i.e. NULLS FIRST), and PostgreSQL sorts every pending task instead.
        nulls = ({"nulls_first": True} if reverse else {"nulls_last": True}) if self.nullable else {}
        expr = value.desc(**nulls) if down else value.asc(**nulls)
        return (expr, "-id" if down else "id")

    def after(self, value: Any, pk: str) -> Q:
        """Rows after (value, pk) in this order."""
        f = self.field
        if value is None:
            return Q(**{f"{f}__isnull": True, "id__lt" if self.descending else "id__gt": pk})
        op = "lt" if self.descending else "gt"
        q = Q(**{f"{f}__{op}": value}) | Q(**{f: value, f"id__{op}": pk})
        if self.nullable:
            return q | Q(**{f"{f}__isnull": True})
        # The same rows, with a bound an index scan can start at: the OR alone is a filter, and a page
        # deep in 100k tasks read every row before it (bench/console_scale.py: 17 ms for the query).
        return Q(**{f"{f}__{op}e": value}) & q

    def before(self, value: Any, pk: str) -> Q:
        """Rows before (value, pk) in this order."""
        f = self.field
        if value is None:
            return Q(**{f"{f}__isnull": False}) | Q(
                **{f"{f}__isnull": True, "id__gt" if self.descending else "id__lt": pk}
            )
        op = "gt" if self.descending else "lt"
        # Bounded as in ``after`` (NULLs are after every value, so the bound drops none that belong).
        return Q(**{f"{f}__{op}e": value}) & (Q(**{f"{f}__{op}": value}) | Q(**{f: value, f"id__{op}": pk}))


_SORT_ORDERS = {
    "newest": _Order("created_at", True, False, True),
    "oldest": _Order("created_at", False, False, True),
    # "due": tasks with a due time first (soonest first), then those without, by id.
    "due": _Order("due_at", False, True, True),
}
_SORT_VALUE = "sort_value"


# What a list page says of a page link it did not make (hand-edited, truncated).
BROKEN_PAGE_LINK = "this page link is broken; start again from the first page"


def _cursor_encode(sort: str, value: datetime | None, pk: Any) -> str:
    return cursor_pack([sort, value.isoformat() if value else None, str(pk)])


def _cursor_decode(cursor: str, sort: str) -> tuple[datetime | None, str]:
    try:
        cursor_sort, value, pk = cursor_unpack(cursor, count=3)
        when = datetime.fromisoformat(value) if value is not None else None
        uuid.UUID(pk)
    except Exception:  # noqa: BLE001 - any malformed cursor is the caller's 400
        raise InvalidInput(BROKEN_PAGE_LINK, field="cursor") from None
    if cursor_sort != sort:
        raise InvalidInput("this page link belongs to another sort order", field="cursor")
    return when, pk


def _keyset_encode(sort: str, order: _Order, row: ApprovalTask) -> str:
    value = getattr(row, order.field)
    if order.datetime:
        value = value.isoformat() if value else None
    return cursor_pack([sort, value, str(row.pk)])


def _keyset_decode(cursor: str, sort: str, order: _Order, field: str) -> tuple[Any, str]:
    try:
        cursor_sort, value, pk = cursor_unpack(cursor, count=3)
        if order.datetime:
            value = datetime.fromisoformat(value) if value is not None else None
        elif value is not None and (
            isinstance(value, bool) or not isinstance(value, (int | float) if order.numeric else str)
        ):
            raise ValueError("not a value of the sorted column's kind")
        uuid.UUID(pk)
    except Exception:  # noqa: BLE001 - any malformed cursor is the caller's 400
        raise InvalidInput(BROKEN_PAGE_LINK, field=field) from None
    if cursor_sort != sort:
        raise InvalidInput("this page link belongs to another sort order", field=field)
    return value, pk


def inbox_list(
    *,
    user: permissions.Principal,
    filter: InboxFilter,
    sort: str = "newest",
    cursor: str = "",
    before: str = "",
    limit: int = 50,
) -> Page:
    """One page of approval tasks; keyset-paginated both ways so page 2,000 costs what page 1 does.

    ``cursor`` pages forward from a page's last row, ``before`` back from its first: a task
    inserted meanwhile never shifts a page (no offsets). ``filter.columns`` and a ``col:<key>``
    sort use the gate's inbox columns (``approvals.columns``), refused when redacted for ``user``.
    """
    graph, node = filter.graph, filter.node
    qs = tasks_inbox(user=user, filter=filter)
    qs = qs.select_related("thread", "claim", "claim__user", "assigned_user", "assigned_group")
    # Not shown in a row: the thread's whole state and the answer's schema (JSON decoded per row for nothing).
    qs = qs.defer("thread__values", "response_schema")
    # A task on a fork or replay branch is badged (its approval acts again): read in the list's own query.
    qs = qs.annotate(
        branch_kind=Subquery(
            branches_before(thread=OuterRef("thread_id"), at=OuterRef("created_at")).values("kind")[:1]
        )
    )
    if sort.startswith(COLUMN_SORT_PREFIXES):
        column = column_for_sort(user=user, graph=graph, node=node, key=sort.split(":", 1)[1])
        qs = qs.annotate(**{_SORT_VALUE: PayloadValue(column)})
        order = _Order(_SORT_VALUE, sort.startswith("-"), True, False, column.numeric)
    elif sort in _SORT_ORDERS:
        order = _SORT_ORDERS[sort]
    else:
        raise InvalidInput(f"unknown sort {sort!r}", field="sort")
    if cursor and before:
        raise InvalidInput("a page link goes either forward (cursor) or back (before), not both", field="before")
    shown = gate_columns(user=user, graph=graph, node=node)
    if before:
        value, pk = _keyset_decode(before, sort, order, "before")
        rows = list(qs.filter(order.before(value, pk)).order_by(*order.ordering(reverse=True))[: limit + 1])
        items = list(reversed(rows[:limit]))
        prev_cursor = _keyset_encode(sort, order, items[0]) if len(rows) > limit else None
        next_cursor = _keyset_encode(sort, order, items[-1]) if items else None
        return Page(items=items, next_cursor=next_cursor, prev_cursor=prev_cursor, columns=shown)
    if cursor:
        value, pk = _keyset_decode(cursor, sort, order, "cursor")
        qs = qs.filter(order.after(value, pk))
    rows = list(qs.order_by(*order.ordering())[: limit + 1])
    items = rows[:limit]
    next_cursor = _keyset_encode(sort, order, items[-1]) if len(rows) > limit else None
    prev_cursor = _keyset_encode(sort, order, items[0]) if cursor and items else None
    return Page(items=items, next_cursor=next_cursor, prev_cursor=prev_cursor, columns=shown)


# What an inbox row shows, read with the task (``inbox_list``'s select_related, its deferred fields
# left out): (model, alias, fields left deferred, the task's field that holds it).
_ROW_PARTS: tuple[tuple[type[Any], str, tuple[str, ...], str], ...] = (
    (ApprovalTask, "t", ("response_schema",), ""),
    (Thread, "th", ("values",), "thread"),
    (User, "au", (), "assigned_user"),
    (Group, "ag", (), "assigned_group"),
    (TaskClaim, "c", (), "claim"),
    (User, "cu", (), "claim.user"),
)


def inbox_row(*, user: permissions.Principal, filter: InboxFilter, task_id: Any) -> ApprovalTask | None:
    """The task ``task_id`` as ``inbox_list`` lists it under ``filter`` (its thread, assignee, group and
    claim with its holder read with it), or None if the list leaves it out; ``thread_commented`` says
    whether its thread has any comment. What a live inbox pushes the moment a task opens.

    Which tasks match is the list's own rule (``tasks_inbox``), composed by the ORM and sent as a
    subquery; the row's seven tables are fixed SQL on ``rows.fixed_cursor``. Composing and planning
    the ORM's query of those tables was most of a pushed row's time. On PostgreSQL the subquery is
    written in with its values as Django sends them, so one reader's statement keeps its text and
    is planned once; the task is its one parameter.
    """
    key = ApprovalTask._meta.pk.get_db_prep_value(task_id, connection)  # not a UUID: ValidationError
    try:
        matching, params = tasks_inbox(user=user, filter=filter).order_by().values("pk").query.sql_with_params()
    except EmptyResultSet:  # nothing visible to this reader at all
        return None
    if connection.vendor == "postgresql":
        composed: str = connection.ops.compose_sql(matching, params)  # type: ignore[attr-defined]  # PostgreSQL's
        matching, params = composed.replace("%", "%%"), ()
    with rows.fixed_cursor() as cursor:
        cursor.execute(f"{_inbox_row_sql(connection.vendor)}{matching})", [key, *params])
        row = cursor.fetchone()
    if row is None:
        return None
    loaded: dict[str, Any] = {}
    start = 0
    for model, _, deferred, attr in _ROW_PARTS:
        end = start + rows.width(model, exclude=deferred)
        part = row[start:end]
        start = end
        # An outer join that found nothing reads as a row of NULLs: no related object.
        loaded[attr] = rows.model_from_row(model, part, exclude=deferred) if part[0] is not None else None
    task: ApprovalTask = loaded[""]
    meta = ApprovalTask._meta
    meta.get_field("thread").set_cached_value(task, loaded["thread"])
    meta.get_field("assigned_user").set_cached_value(task, loaded["assigned_user"])
    meta.get_field("assigned_group").set_cached_value(task, loaded["assigned_group"])
    claim, holder = loaded["claim"], loaded["claim.user"]
    claim_task = TaskClaim._meta.get_field("task")
    claim_task.remote_field.set_cached_value(task, claim)  # None: task.claim raises DoesNotExist, as the ORM's
    if claim is not None:
        claim_task.set_cached_value(claim, task)
        TaskClaim._meta.get_field("user").set_cached_value(claim, holder)
    task.thread_commented = bool(row[start])  # type: ignore[attr-defined]
    task.branch_kind = row[start + 1]  # type: ignore[attr-defined]  # as inbox_list annotates it
    return task


@functools.cache
def _inbox_row_sql(vendor: str) -> str:
    """The row's statement up to the subquery of matching tasks (``inbox_row``), which ends it."""
    q = connection.ops.quote_name

    def col(model: type[Any], name: str) -> str:
        return q(str(model._meta.get_field(name).column))

    def table(model: type[Any]) -> str:
        return q(model._meta.db_table)

    selected = ", ".join(rows.columns(model, alias, exclude=deferred) for model, alias, deferred, _ in _ROW_PARTS)
    task_key, user_key, group_key = col(ApprovalTask, "id"), col(User, "id"), col(Group, "id")
    return (
        f"SELECT {selected}, EXISTS(SELECT 1 FROM {table(Comment)} cm "  # noqa: S608 - names from the models
        f"WHERE cm.{col(Comment, 'thread')} = t.{col(ApprovalTask, 'thread')}), "
        f"(SELECT b.{col(Branch, 'kind')} FROM {table(Branch)} b WHERE b.{col(Branch, 'thread')} = "
        f"t.{col(ApprovalTask, 'thread')} AND b.{col(Branch, 'created_at')} <= t.{col(ApprovalTask, 'created_at')} "
        f"ORDER BY b.{col(Branch, 'created_at')} DESC LIMIT 1) "
        f"FROM {table(ApprovalTask)} t "
        f"INNER JOIN {table(Thread)} th ON th.{col(Thread, 'id')} = t.{col(ApprovalTask, 'thread')} "
        f"LEFT OUTER JOIN {table(User)} au ON au.{user_key} = t.{col(ApprovalTask, 'assigned_user')} "
        f"LEFT OUTER JOIN {table(Group)} ag ON ag.{group_key} = t.{col(ApprovalTask, 'assigned_group')} "
        f"LEFT OUTER JOIN {table(TaskClaim)} c ON c.{col(TaskClaim, 'task')} = t.{task_key} "
        f"LEFT OUTER JOIN {table(User)} cu ON cu.{user_key} = c.{col(TaskClaim, 'user')} "
        f"WHERE t.{task_key} = %s AND t.{task_key} IN ("
    )


_FACETS_TTL_SECONDS = 60.0
_facet_cache: dict[tuple[str, ...], tuple[float, Any]] = {}


_T = TypeVar("_T")


def _cached(key: tuple[str, ...], compute: Callable[[], _T]) -> _T:
    """Menus of distinct values scan whole tables (100k tasks, 1M events): compute them at most once a minute."""
    now = time.monotonic()
    hit = _facet_cache.get(key)
    if hit is not None and now - hit[0] < _FACETS_TTL_SECONDS:
        cached: _T = hit[1]
        return cached
    value = compute()
    _facet_cache[key] = (now, value)
    return value


def inbox_facets(*, user: permissions.Principal) -> dict[str, list[str]]:
    """Graphs and gates present in the user's visible tasks, for the filter menus."""
    visible = permissions.graphs_visible(user)
    key = ("facets", *sorted(visible)) if visible is not None else ("facets", "*")

    def compute() -> dict[str, list[str]]:
        pairs = permissions.tasks_visible(user).order_by().values_list("graph", "node").distinct()[:500]
        return {"graphs": sorted({g for g, _ in pairs}), "nodes": sorted({n for _, n in pairs})}

    if not permissions.can(user, "approvals.view_approvaltask"):
        return {"graphs": [], "nodes": []}
    return _cached(key, compute)


# --- timeline --------------------------------------------------------------------------


@dataclass
class TimelineEntry:
    at: datetime
    kind: str  # checkpoint | decision | run | effect | error | task
    title: str
    detail: Any = None
    actor: str = ""
    checkpoint_id: str = ""
    link: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kind_label(self) -> str:
        """What the timeline calls the entry's kind ("checkpoint" and "effect" are the runtime's words)."""
        return _TIMELINE_KIND_LABELS.get(self.kind, self.kind)


_TIMELINE_KIND_LABELS = {
    "checkpoint": "step",
    "task": "paused",
    "decision": "decision",
    "run": "run",
    "effect": "action",
    "error": "error",
}


def timeline_for(*, user: permissions.Principal, thread: Thread, limit: int = 100) -> list[TimelineEntry]:
    """Checkpoints, tasks, decisions, runs, effects and errors of one thread, oldest first."""
    entries: list[TimelineEntry] = []
    views = gateway.history_for(user, thread.pk, limit=limit)  # newest first
    for index, view in enumerate(views):
        at = parse_datetime(view.created_at) if view.created_at else None
        if at is None:
            continue
        # An operator's update whose parent is not the checkpoint before it branched the thread there.
        older = views[index + 1] if index + 1 < len(views) else None
        forked = older is not None and older.checkpoint_id != view.parent_id
        entries.append(
            TimelineEntry(
                at=at,
                kind="checkpoint",
                title=words.checkpoint_summary(view, forked=forked),
                checkpoint_id=view.checkpoint_id,
                detail={"next": view.next},
                extra={"step": view.step, "source": view.source},
            )
        )
    tasks = permissions.tasks_visible(user).filter(thread=thread).order_by("created_at")
    for task in tasks:
        entries.append(
            TimelineEntry(
                at=task.created_at,
                kind="task",
                title=f"Paused for a decision: {task.title or task.node}",
                link=f"/tasks/{task.pk}/",
                extra={"status": task.status, "status_label": task.get_status_display(), "node": task.node},
            )
        )
    decisions = list(
        Decision.objects.filter(task__thread=thread, task__in=tasks)
        .select_related("actor", "task")
        .order_by("created_at")
    )
    effects = list(thread.effects.select_related("run").order_by("created_at"))
    # Edits and effect results can quote sensitive state: mask them in one gateway call (one audited reveal).
    shown, _ = gateway.guard(
        user,
        thread.graph,
        {
            "edits": [d.state_patch for d in decisions],
            "args": [_args_edited(d) for d in decisions],
            "results": [e.result for e in effects],
        },
        subject=f"thread:{thread.pk}",
        thread_id=thread.pk,
    )
    for decision, edits, args in zip(decisions, shown["edits"], shown["args"], strict=True):
        detail = {"reason": decision.reason, "edits": edits}
        if args:
            detail["action_args"] = args
        entries.append(
            TimelineEntry(
                at=decision.created_at,
                kind="decision",
                title=f"{decision.outcome_shown} at {decision.task.node}",
                actor=decision.actor.get_username(),
                detail=detail,
                link=f"/tasks/{decision.task_id}/",
            )
        )
    for run in thread.runs.order_by("created_at"):
        entries.append(
            TimelineEntry(
                # Its outcome where it happened: after the steps and effects of the run, not before them.
                at=run.finished_at or run.started_at or run.created_at,
                kind="run",
                # Its error, if any, is the entry after it (summary and full text): said once.
                title=words.run_summary(run, with_error=False),
                extra={"status": run.status, "attempts": run.attempts},
            )
        )
        if run.error:
            entries.append(
                TimelineEntry(
                    at=run.finished_at or run.created_at,
                    kind="error",
                    # A cancelled run's error names who cancelled it, the action and the reason.
                    title="Run cancelled" if run.status == RunStatus.CANCELLED else "Run failed",
                    detail=run.error,
                )
            )
    for effect, result in zip(effects, shown["results"], strict=True):
        entries.append(
            TimelineEntry(
                at=effect.completed_at or effect.created_at,
                kind="effect",
                title=f"Action {effect.name}: {words.effect_status(effect)}",
                detail={
                    "key": effect.key,
                    "result": result,
                    "error": effect.error or None,
                    "hint": words.effect_hint(effect),
                },
                extra={"calls": effect.calls},
            )
        )
    entries.sort(key=lambda e: e.at)
    return entries


def _args_edited(decision: Decision) -> dict[str, Any]:
    return {a.name: {"proposed": a.proposed, "signed": a.signed} for a in action_edits(decision)}


def effects_shown(*, user: permissions.Principal, thread: Thread, effects: list[Effect]) -> list[Effect]:
    """Effects with their results masked for ``user`` (copies: the rows themselves are never touched)."""
    return gateway.effects_masked(user, thread, effects)


@dataclass
class ActionDiff:
    """Proposed vs signed arguments of one action, masked for the viewer."""

    name: str
    rows: list[DiffRow]


def action_diffs_shown(
    *, user: permissions.Principal, task: ApprovalTask, decisions: list[Decision]
) -> list[list[ActionDiff]]:
    """For each decision, the action arguments it changed (proposed → signed), masked as ``user`` may see them."""
    edits = [action_edits(d) for d in decisions]
    if not any(edits):
        return [[] for _ in decisions]
    pairs = [[{"proposed": e.proposed, "signed": e.signed} for e in each] for each in edits]
    shown, _ = gateway.guard(user, task.graph, pairs, subject=f"task:{task.pk}", thread_id=task.thread_id)
    return [
        [
            ActionDiff(name=e.name, rows=state_diff(pair["proposed"], pair["signed"]))
            for e, pair in zip(each, shown_each, strict=True)
        ]
        for each, shown_each in zip(edits, shown, strict=True)
    ]


def decision_edits_summarise(*, user: permissions.Principal, decisions: list[Decision]) -> None:
    """Set ``edits_summary`` on each decision: its state edits and changed action arguments, one line each, masked.

    One gateway call per graph on the page (so one audited reveal, not one per row). Lists, not
    tuples: the redaction walks dicts and lists.
    """
    by_graph: dict[str, list[Decision]] = {}
    for d in decisions:
        by_graph.setdefault(d.task.graph, []).append(d)
    for graph, group in by_graph.items():
        raw = [
            {"state": d.state_patch or {}, "args": [[e.name, e.proposed, e.signed] for e in action_edits(d)]}
            for d in group
        ]
        shown, _ = gateway.guard(user, graph, raw, subject=f"graph:{graph}")
        for d, item in zip(group, shown, strict=True):
            lines = [f"{key} = {_compact(value)}" for key, value in item["state"].items()]
            for name, proposed, signed in item["args"]:
                lines.extend(
                    f"{name}.{row.path}: {_compact(row.old)} → {_compact(row.new)}"
                    for row in state_diff(proposed, signed)
                )
            d.edits_summary = lines  # type: ignore[attr-defined]


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)[:80]


def patch_shown(*, user: permissions.Principal, task: ApprovalTask, decisions: list[Decision]) -> list[Any]:
    """Each decision's state edits as ``user`` may see them."""
    if not decisions:
        return []
    patches, _ = gateway.guard(
        user, task.graph, [d.state_patch for d in decisions], subject=f"task:{task.pk}", thread_id=task.thread_id
    )
    return list(patches)


# --- quorum ----------------------------------------------------------------------------


@dataclass
class Quorum:
    """Where a task stands against its required approvals (counted as the service counts: meaning "approved")."""

    required: int
    decisions: list[Decision]

    @property
    def approvals(self) -> int:
        return approvals_given(self.decisions)

    @property
    def rejected(self) -> bool:
        return any(d.meaning == "rejected" for d in self.decisions)

    @functools.cached_property
    def superseded_ids(self) -> set[Any]:
        """Approvals a later proposal superseded: on record, not counted (``abilities.superseded``)."""
        return {d.pk for d in superseded(self.decisions)}

    @property
    def met(self) -> bool:
        return self.approvals >= self.required

    @property
    def remaining(self) -> int:
        return max(self.required - self.approvals, 0)


def quorum_for(*, user: permissions.Principal, task: ApprovalTask) -> Quorum:
    permissions.task_get_for(user, task.pk)
    decisions = list(task.decisions.select_related("actor").order_by("created_at", "id"))
    for decision, patch in zip(decisions, patch_shown(user=user, task=task, decisions=decisions), strict=True):
        decision.patch_shown = patch  # type: ignore[attr-defined]
    for decision, diffs in zip(decisions, action_diffs_shown(user=user, task=task, decisions=decisions), strict=True):
        decision.action_diffs = diffs  # type: ignore[attr-defined]
    return Quorum(required=task.required_approvals, decisions=decisions)


# --- diffs -----------------------------------------------------------------------------


@dataclass
class DiffRow:
    path: str
    op: str  # added | removed | changed
    old: Any = None
    new: Any = None


def state_diff(before: Any, after: Any, path: str = "") -> list[DiffRow]:
    """Key-path differences between two JSON values; lists compare whole (order matters to reducers)."""
    if isinstance(before, dict) and isinstance(after, dict):
        rows: list[DiffRow] = []
        for key in sorted(set(before) | set(after), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in before:
                rows.append(DiffRow(sub, "added", new=after[key]))
            elif key not in after:
                rows.append(DiffRow(sub, "removed", old=before[key]))
            else:
                rows.extend(state_diff(before[key], after[key], sub))
        return rows
    if before != after:
        return [DiffRow(path or "(root)", "changed", old=before, new=after)]
    return []


# --- audit -----------------------------------------------------------------------------


def audit_search(
    *, user: permissions.Principal, filters: AuditFilters, before_id: int | None = None, limit: int = 100
) -> Page:
    """The audit page: ``filters`` as ``approvals.audit_filters`` parsed them (for the API and export too)."""
    qs = audit_filter(permissions.audit_visible(user), **filters.query())
    if before_id:
        qs = qs.filter(id__lt=before_id)
    rows: list[AuditEvent] = list(qs.order_by("-id")[: limit + 1])
    next_cursor = str(rows[limit - 1].id) if len(rows) > limit else None
    return Page(items=rows[:limit], next_cursor=next_cursor)


# Events about a sign-in attempt: their ``user`` subject is the username typed, not an account's id.
_SUBJECT_IS_TYPED_USERNAME = {AuditAction.AUTH_LOGIN_FAILED, AuditAction.AUTH_LOCKED_OUT, AuditAction.AUTH_SSO_REFUSED}


def _user_pk(text: str) -> bool:
    """A subject id that can be a user's primary key: ASCII digits ("²" is a digit too) within a bigint."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def audit_subject_names(*, events: list[AuditEvent]) -> dict[int, str]:
    """The username of the user each of ``events`` is about (subject ``user``), by event id: one query."""
    about = {
        e.id: e.subject_id
        for e in events
        if e.subject_type == "user" and _user_pk(e.subject_id) and e.action not in _SUBJECT_IS_TYPED_USERNAME
    }
    if not about:
        return {}
    users = User.objects.filter(pk__in=set(about.values())).values_list("pk", "username")
    names = {str(pk): name for pk, name in users}
    return {event_id: names[pk] for event_id, pk in about.items() if pk in names}


def audit_actions(*, user: permissions.Principal) -> list[str]:
    if not permissions.can(user, "approvals.view_audit"):
        return []
    visible = permissions.graphs_visible(user)
    key = ("actions", *sorted(visible)) if visible is not None else ("actions", "*")

    def compute() -> list[str]:
        actions = permissions.audit_visible(user).order_by().values_list("action", flat=True).distinct()
        return sorted(set(actions[:200]))

    return _cached(key, compute)


# --- decision history (auditors) -------------------------------------------------------

DECISIONS_SORT = "decisions"


def decisions_visible(*, user: permissions.Principal) -> QuerySet[Decision]:
    """Decisions on tasks ``user`` may see, for principals who may read the audit trail."""
    if not permissions.can(user, "approvals.view_audit"):
        return Decision.objects.none()
    return Decision.objects.filter(task__in=permissions.tasks_visible(user))


def decisions_search(
    *,
    user: permissions.Principal,
    graph: str = "",
    node: str = "",
    outcome: str = "",
    meaning: str = "",
    actor: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str = "",
    limit: int = 50,
    due: str = "",
    thread: uuid.UUID | None = None,
    via: str = "",
) -> Page:
    """Decisions, newest first, keyset-paginated on (created_at, id). A graph nobody could have decided in
    and a window the wrong way round are refused, as the dashboard linking here refuses them."""
    range_check(since, until)
    qs = decisions_visible(user=user).select_related("task", "actor", "run")
    if graph:
        dashboard.graph_require(user, graph)
        qs = qs.filter(task__graph=graph)
    if node:
        qs = qs.filter(task__node=node)
    if outcome:
        qs = qs.filter(outcome=outcome)
    if meaning:
        qs = qs.filter(meaning=meaning)
    if actor:
        qs = qs.filter(Q(actor__username__iexact=actor) | Q(signer_name__iexact=actor))
    if since:
        qs = qs.filter(created_at__gte=since)
    if until:
        qs = qs.filter(created_at__lt=until)
    # Thread and webhook-decided filters (team dashboard links).
    if thread:
        qs = qs.filter(task__thread_id=thread)
    if via == "webhook":
        qs = qs.filter(dashboard.decisions_by_webhook_q())
    elif via == "person":
        qs = qs.exclude(dashboard.decisions_by_webhook_q())
    elif via:
        raise InvalidInput(f"unknown decider {via!r}", field="via")
    if cursor:
        when, pk = _cursor_decode(cursor, DECISIONS_SORT)
        qs = qs.filter(Q(created_at__lt=when) | Q(created_at=when, id__lt=pk))
    rows: list[Decision] = list(qs.order_by("-created_at", "-id")[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        last = rows[limit - 1]
        next_cursor = _cursor_encode(DECISIONS_SORT, last.created_at, last.pk)
    return Page(items=rows[:limit], next_cursor=next_cursor)


def decision_facets(*, user: permissions.Principal) -> dict[str, list[str]]:
    pairs = decisions_visible(user=user).order_by().values_list("task__graph", "task__node").distinct()[:500]
    return {"graphs": sorted({g for g, _ in pairs}), "nodes": sorted({n for _, n in pairs})}


@dataclass
class DecisionEvidence:
    decision: Decision
    task: ApprovalTask
    seen: Any  # the CheckpointView the signer decided on, masked for the viewer; None if no longer stored
    seen_missing: str
    edits: Any
    resume: Any  # the resume value as the viewer may see it (masked like the edits)
    diff: list[DiffRow]
    action_diffs: list[ActionDiff]
    quorum: Quorum
    effects: list[Effect]
    # The decision's resume run, then each retry that continued it (``approvals.selectors.decision_runs``).
    runs: list[Run] = field(default_factory=list)
    # The proposal this decision approves (or, itself a proposal, amends): the last edit made before it, with
    # what that edit changed as the viewer may see it; and the later proposal that superseded this approval.
    proposal: Decision | None = None
    proposal_diff: list[DiffRow] = field(default_factory=list)
    superseded_by: Decision | None = None
    # The evidence and signed digests as the viewer may see them (``gateway.decision_digests_for``).
    evidence_digest: str = ""
    signed_digest: str = ""


def decision_evidence(*, user: permissions.Principal, decision_id: Any) -> DecisionEvidence:
    """One decision with what its signer saw, what they changed, where the quorum stood and what followed."""
    decision = (
        decisions_visible(user=user)
        .select_related("task", "task__thread", "actor", "run")
        .filter(pk=decision_id)
        .first()
    )
    if decision is None:
        raise NotFound(f"decision {decision_id} not found", field="decision_id")
    task = decision.task
    seen, missing = None, ""
    try:
        seen = gateway.state_for(user, task.thread_id, decision.checkpoint_id)
    except NotFound:
        missing = f"checkpoint {decision.checkpoint_id} is no longer stored (pruned by retention)"
    [shown] = gateway.decisions_shown(user, task, [decision])
    edits = shown.state_patch
    before = seen.values if seen else {}
    diff = state_diff(before, {**before, **edits}) if isinstance(edits, dict) and edits else []
    [action_diffs] = action_diffs_shown(user=user, task=task, decisions=[decision])
    quorum = quorum_for(user=user, task=task)
    made = in_order(quorum.decisions)
    at = next(i for i, d in enumerate(made) if d.pk == decision.pk)
    proposal = proposal_current(made[:at])
    proposal_diff: list[DiffRow] = []
    if proposal is not None:  # its edits as quorum_for masked them for this viewer
        patch = getattr(proposal, "patch_shown", None)
        proposal_diff = state_diff(before, {**before, **patch}) if isinstance(patch, dict) and patch else []
    later = next((d for d in made[at + 1 :] if proposes(d)), None)
    digests = gateway.decision_digests_for(user, task, decision)
    effects: list[Effect] = []
    # A failed resume's retries carried the same decision on: what they paid is what the decision did.
    runs = approvals_selectors.decision_runs(decision=decision)
    if runs:
        ran = list(Effect.objects.filter(run__in=runs).select_related("run").order_by("created_at", "id"))
        effects = effects_shown(user=user, thread=task.thread, effects=ran)
    return DecisionEvidence(
        decision=decision,
        task=task,
        seen=seen,
        seen_missing=missing,
        edits=edits,
        resume=shown.resume_value,
        diff=diff,
        action_diffs=action_diffs,
        quorum=quorum,
        effects=effects,
        runs=runs,
        proposal=proposal,
        proposal_diff=proposal_diff,
        superseded_by=later if decision.pk in quorum.superseded_ids else None,
        evidence_digest=digests[0],
        signed_digest=digests[1],
    )
