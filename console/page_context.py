"""What each page and live fragment shows (its template context), built once for views and websocket consumers alike.

Every builder takes the viewing user and reads through ``approvals.permissions``
and ``approvals.gateway``, so a fragment pushed over a websocket shows exactly
what a page load by the same user would.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.core.exceptions import ValidationError
from django.http import QueryDict

from approvals import assignment, bulk, columns, comments, dashboard, gateway, permissions, time_travel
from approvals import selectors as approvals_selectors
from approvals.abilities import FINAL_APPROVER_RULE, Refusal, signature_standing, task_abilities
from approvals.claims import can_release_any, claim_for, claim_held_message, claim_release_last
from approvals.errors import DomainError, InvalidInput
from approvals.inbox_filter import InboxFilter
from approvals.models import ApprovalTask
from approvals.payloads import REASON_MAX_CHARS, payload_kind
from approvals.services import evidence_digest, reason_required, redaction_policy
from console import charts, selectors, words
from console.conversation import conversation_context  # Conversation (comments)
from console.decision_panel import DecisionPanel, decision_panel_for
from console.forms import InboxFilterForm
from runtime.branches import branch_at, effect_key_branch
from runtime.models import ACTIVE_RUN_STATUSES, Effect, Run, RunStatus, Thread, ThreadStatus
from runtime.registry import REASON_OUTCOMES, UnknownGraph, graph_get, graph_is_external, graph_is_registered
from runtime.state_schema import json_schema_for
from runtime.threads import thread_stopped_midway

INBOX_PAGE_SIZE = 50


def filter_errors_ignored(form: Any, params: QueryDict) -> tuple[QueryDict, str]:
    """A hand-typed filter's invalid values, named and left out: ``params`` without them, and what the page
    says ("sort: 'bogus' is not a valid choice; ignored"). The list then shows what its controls show: it
    said "No tasks match" under a sort menu reading "Newest first"."""
    kept = params.copy()
    said = []
    for name, errors in form.errors.items():
        value = params.get(name, "")
        if name in form.fields and isinstance(form.fields[name], forms.ChoiceField):
            said.append(f"{name}: {value!r} is not a valid choice; ignored")
        else:
            said.append(f"{name}: {' '.join(str(e) for e in errors)} ({value[:40]!r} ignored)")
        kept.pop(name, None)
    return kept, "; ".join(said)


# Filters of GET /api/tasks the inbox page does not take: named when a URL carries one, not dropped
# without a word (a list filtered by nothing looked filtered by it).
INBOX_API_ONLY = {
    "thread": "the inbox does not filter by thread; a thread's tasks are listed on its page",
}


def inbox_gate_named(params: QueryDict) -> tuple[QueryDict, str]:
    """``params`` with the API's ``gate=`` read as the page's ``node=`` (its form, links and live socket say
    ``node``, so old bookmarks keep working), and what the page says when both name different gates.

    A link built from ``GET /api/tasks``' names listed every gate under a notice that ``gate`` was ignored."""
    gate = params.get("gate", "")
    if "gate" not in params:
        return params, ""
    named = params.copy()
    named.pop("gate")
    node = params.get("node", "")
    if node and gate and node != gate:
        return named, f"gate: {gate[:40]!r} is another name for node, which says {node[:40]!r}; gate ignored"
    if gate:
        named["node"] = gate
    return named, ""


def inbox_context(user: Any, params: QueryDict, *, limit: int = INBOX_PAGE_SIZE) -> dict[str, Any]:
    gate = str(params.get("gate", ""))
    params, gate_ignored = inbox_gate_named(params)
    # As the page was asked for (a gate by the page's name, node): its live socket re-renders it, notes on
    # what was ignored included. A gate= that contradicts node= stays, for its note.
    asked = {**params.dict(), **({"gate": gate} if gate_ignored else {})}
    form = InboxFilterForm(params)
    ignored = ""
    if not form.is_valid():
        params, ignored = filter_errors_ignored(form, params)
        form = InboxFilterForm(params)
    api_only = [f"{k}: {why} ({params[k][:40]!r} ignored)" for k, why in INBOX_API_ONLY.items() if params.get(k)]
    ignored = "; ".join(e for e in (gate_ignored, ignored, *api_only) if e)
    error = ""
    page = selectors.Page(items=[], next_cursor=None)
    filters: dict[str, str] = {}
    wanted: InboxFilter | None = None
    columns = inbox_column_filters(params)  # inbox columns per gate (issue 14): "c.<key>" parameters
    if form.is_valid():
        filters = form.filters()
        wanted = form.inbox_filter(columns=columns)
        try:
            page = selectors.inbox_list(user=user, filter=wanted, limit=limit, **form.paging())
        except DomainError as exc:
            error = f"{exc.field}: {exc.message}" if exc.field else exc.message  # c.amount, sort, cursor
    else:
        error = "; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items())
    error = "; ".join(e for e in (ignored, error) if e)
    live_params = {k: str(v) for k, v in params.items() if (k in form.fields or k[2:] in columns) and v}
    # The socket's catch-up render had only the parameters kept, and dropped the notes on the others: the
    # page went on listing something other than what was asked for, without saying so.
    socket_params = {
        k: str(v)
        for k, v in asked.items()
        if (k in form.fields or k in INBOX_API_ONLY or k == "gate" or k[2:] in columns) and v
    }
    base = {k: v for k, v in live_params.items() if k not in ("cursor", "before")}
    next_url = "?" + urlencode({**base, "cursor": page.next_cursor}) if page.next_cursor else ""
    return {
        "form": form,
        "page": page,
        "filters": filters,
        "error": error,
        "facets": selectors.inbox_facets(user=user),
        "claimed_ids": {t.pk for t in page.items if _claim_of(t) is not None},
        "rows": [(t, _claim_of(t)) for t in page.items],
        "live_url": "/ws/inbox/" + (f"?{urlencode(socket_params)}" if socket_params else ""),
        "first_page": not filters.get("cursor") and not (filters.get("before") and not page.prev_cursor),
        "first_url": "?" + urlencode(base),
        "next_url": next_url,
        "me": user,
        "reason_max": REASON_MAX_CHARS,  # the bulk reason: the limit every decision's reason has
        "away": assignment.away_get(user),  # hand-offs: the header says when you are away and who covers
        # Conversation (comments): per row, an open question and a mention of the viewer (one query)
        "conversation": comments.inbox_conversation(user=user, tasks=page.items),
        "bulk": bulk_inbox_context(user, wanted, filters, page),  # bulk decisions (issue 14)
        # inbox columns per gate and previous-page navigation (issue 14)
        **inbox_columns_context(user, page, filters, columns, base),
    }


def inbox_row_context(user: Any, params: QueryDict, task_id: Any) -> dict[str, Any] | None:
    """A new task's row as the inbox with these ``params`` shows it, or None if it would not show it at
    the top of the page the reader is on (another page or sort order, filtered out, not visible to them).

    What a live inbox sends the moment a task opens, ahead of re-rendering the whole list: the row is
    one prepared statement and one small template, the list is everything (console.consumers.InboxConsumer).
    """
    parsed = _row_filter(inbox_gate_named(params)[0].urlencode())
    if parsed is None:
        return None
    wanted, cached = parsed
    filters = dict(cached)  # the cache's own stays as parsed
    try:
        task = selectors.inbox_row(user=user, filter=wanted, task_id=task_id)
    except (DomainError, ValidationError):
        return None
    if task is None:
        return None
    page = selectors.Page(
        items=[task], next_cursor=None, columns=columns.gate_columns(user=user, graph=wanted.graph, node=wanted.node)
    )
    inbox_columns_context(user, page, filters, dict(wanted.columns), {})  # the row's gate column cells
    if task.thread_commented:  # type: ignore[attr-defined]
        conversation = comments.inbox_conversation(user=user, tasks=page.items)
    else:  # a new thread has no comments: its conversation badges need no query of their own
        conversation = comments.InboxConversation(waiting=set(), mentioned=set())
    return {
        "rows": [(task, _claim_of(task))],
        "me": user,
        "conversation": conversation,
        "bulk": {"enabled": bool(filters) and permissions.can(user, "approvals.decide_task")},
    }


@functools.lru_cache(maxsize=512)
def _row_filter(query: str) -> tuple[InboxFilter, dict[str, str]] | None:
    """What a live inbox's query asks for, or None if a new task can never top its page: parsed once
    per query, not once per task opened (a socket's query never changes; the form reads no database)."""
    params = QueryDict(query)
    form = InboxFilterForm(params)
    if not form.is_valid():
        return None
    filters = form.filters()
    if filters.get("cursor") or filters.get("before") or filters.get("sort") != "newest":
        return None
    try:
        return form.inbox_filter(columns=inbox_column_filters(params)), filters
    except (DomainError, ValidationError):
        return None


def _claim_of(task: ApprovalTask) -> Any:
    claim = getattr(task, "claim", None)
    try:
        return claim if claim is not None and claim.is_active else None
    except Exception:  # noqa: BLE001 - RelatedObjectDoesNotExist when unclaimed
        return None


def effect_lines_shown(thread: Thread, effects: list[Effect]) -> dict[Any, str]:
    """Each action's line in words by effect id ("on the original line"; "" on the line shown): a replayed
    thread's pages listed the original line's payment as though it had been made on the replay."""
    lines = time_travel.effects_lines(thread=thread, effects=effects) if effects else {}
    return {pk: words.effect_where(line) for pk, line in lines.items()}


def task_live_context(user: Any, task_id: Any) -> dict[str, Any]:
    """The part of the task page that changes while the reviewer looks at it."""
    task = permissions.task_get_for(user, task_id)
    thread = task.thread
    claim = claim_for(task) if task.is_open else None
    quorum = selectors.quorum_for(user=user, task=task)
    signed = signature_standing(user, quorum.decisions)  # an approval a later proposal superseded is not
    recent = list(thread.effects.select_related("run").order_by("-created_at")[:5])
    effects = selectors.effects_shown(user=user, thread=thread, effects=recent)
    abilities = task_abilities(user, task, quorum.decisions, claim=claim)
    return {
        "task": task,
        "thread": thread,
        "claim": claim,
        "can_decide": abilities.decide,
        # Nobody may decide it: its node is gone from the graph (approvals.abilities.node_gone_refusal).
        "decide_refused": abilities.decide_refused,
        # Their approval would complete the task and a rule keeps it from them (the approver role, separation
        # of duties): said beforehand, and Approve is not offered (task_context), rather than refused on submit.
        "approve_refused": abilities.approve_refused,
        "my_decision": signed,
        "quorum": quorum,
        "can_release": claim is not None and (claim.user_id == user.pk or can_release_any(user)),
        "claim_is_mine": claim is not None and claim.user_id == user.pk,
        "released": claim_release_last(task) if task.is_open and claim is None else None,
        # Someone else's claim: the decision form waits, saying whose it is (decision_form, console.js).
        "claim_held_note": (
            f"{claim_held_message(claim)}: the form opens again when the claim is released or lapses."
            if claim is not None and claim.user_id != user.pk
            else ""
        ),
        # A closed task leads on: to where its thread waits now, else to the thread (decision_form, task_live).
        "current_task": None if task.is_open else approvals_selectors.task_current_for(user=user, task=task),
        "runs": list(thread.runs.order_by("-created_at")[:5]),
        "effects": effects,
        # Where each was recorded on a branched thread, as the thread page says it (effect_lines_shown).
        "effect_lines": effect_lines_shown(thread, effects),
        "decisions": quorum.decisions,
        # Only a finished thread's values are shown, and only as the gateway masks them for this viewer.
        "result": gateway.thread_values_for(user, thread) if thread.is_finished else None,
        "me": user,
        **_handoff_context(user, task, claim),
        **conversation_context(user, task=task),  # Conversation (comments)
    }


# --- hand-offs (approvals.assignment): who the task is assigned to, and the reassign/delegate forms ---


def _handoff_shown(user: Any, task: ApprovalTask) -> assignment.HandOff | None:
    """The latest hand-off, its note masked as a comment's would be (``gateway.text_shown``)."""
    handoff = assignment.last_handoff(task)
    if handoff is None or not handoff.note:
        return handoff
    texts = [(handoff.note, handoff.note_by_sighted, ())]
    [note] = gateway.text_shown(user, task.thread, texts, subject=f"task:{task.pk}")
    return dataclasses.replace(handoff, note=note)


def _handoff_context(user: Any, task: ApprovalTask, claim: Any) -> dict[str, Any]:
    can_reassign = task.is_open and permissions.can_reassign(user, task)
    can_delegate = task.is_open and claim is not None and claim.user_id == user.pk
    return {
        "assignees": assignment.task_assignees(task),
        "last_handoff": _handoff_shown(user, task) if task.assigned_at else None,
        "can_reassign": can_reassign,
        "can_delegate": can_delegate,
        # Pickers only for whoever sees a form; the services check each choice.
        "colleagues": assignment.colleagues_for(user) if can_reassign or can_delegate else [],
        "groups": assignment.groups_for_reassign(task) if can_reassign else [],
    }


def _graph_retired(graph: str) -> bool:
    """A thread whose graph this instance no longer registers: readable from its checkpoints, not resumable."""
    return bool(graph) and not graph_is_external(graph) and not graph_is_registered(graph)


def task_context(user: Any, task_id: Any, form: DecisionPanel | None = None) -> dict[str, Any]:
    ctx = task_live_context(user, task_id)
    task: ApprovalTask = ctx["task"]
    ctx["graph_retired"] = _graph_retired(task.graph)
    state = gateway.task_state_for(user, task)
    values = state.values if state else {}
    diff: list[selectors.DiffRow] = []
    previous_id = state.parent_id if state else ""
    if state and state.parent_id:
        before = gateway.state_for(user, task.thread_id, state.parent_id)
        diff = selectors.state_diff(before.values if before else {}, values)
    try:
        schema = json_schema_for(graph_get(task.graph).state_schema)
    except UnknownGraph:
        schema = {"type": "object", "properties": {}}
    payload, _ = gateway.payload_for(user, task)
    if form is None:
        # Edit fields are prefilled from the masked payload too: a reviewer never receives a hidden value.
        form = decision_panel_for(_task_as_shown(task, payload), values, schema)
    refused: Refusal | None = ctx["approve_refused"]
    if refused is not None:
        role = refused.rule == FINAL_APPROVER_RULE
        form.withhold("approve", f"{refused.message}, which you do not have" if role else refused.message)
    # The gate's reason policy (langgraph.json "gatehouse": {"reasons": ...}; the service's rule), for the
    # decisions this task offers only: an external task (approve or reject) read "required to reject or edit".
    reasons_required = [o for o in REASON_OUTCOMES if o in form.allowed and reason_required(task.graph, task.node, o)]
    ctx.update(
        {
            "state": state,
            "values": values,
            "diff": diff,
            "previous_checkpoint": previous_id,
            "kind": payload_kind(payload, task.kind),
            "payload": payload,
            "form": form,
            "timeline": selectors.timeline_for(user=user, thread=task.thread),
            "proposed": payload.get("proposed_action") if isinstance(payload, dict) else None,
            "inbox_item": _inbox_item(payload),
            "reasons_required": reasons_required,
            "reason_max": REASON_MAX_CHARS,
            # What the form posts back (decision_form): a proposal made after the page was rendered refuses it.
            "evidence_digest": evidence_digest(
                task=task, redaction=redaction_policy(user, task), decisions=ctx["decisions"]
            ),
            **what_if_context(user, task),
        }
    )
    return ctx


@dataclass(frozen=True)
class EffectElsewhere:
    effect: Any
    line: str  # "the original line", or which other branch


def what_if_context(user: Any, task: ApprovalTask) -> dict[str, Any]:
    """A task opened on a fork or replay branch: the branch (who, when, why) and what the thread's other
    lines already did. A reviewer approved a forked loan that had paid on its original line, and it paid
    a second time: on a branch the effects are new effects (``runtime.branches.scoped_effect_key``)."""
    branch = branch_at(thread_id=task.thread_id, at=task.created_at)
    if branch is None:
        return {"what_if": None}
    mine = str(branch.pk)
    effects = task.thread.effects.select_related("run").order_by("created_at", "id")
    others = [e for e in effects if effect_key_branch(e.key) != mine]
    shown = selectors.effects_shown(user=user, thread=task.thread, effects=others)
    elsewhere = [
        EffectElsewhere(e, "the original line" if effect_key_branch(e.key) is None else "another branch") for e in shown
    ]
    return {"what_if": branch, "what_if_effects": elsewhere}


def _task_as_shown(task: ApprovalTask, payload: Any) -> ApprovalTask:
    """The task with its payload as the viewer may see it, for the form builder (which reads ``task.payload``)."""
    shown = copy.copy(task)
    shown.payload = payload
    return shown


def _inbox_item(payload: Any) -> Any:
    item = payload[0] if isinstance(payload, list) and len(payload) == 1 else payload
    return item if isinstance(item, dict) and "action_request" in item else None


def thread_live_context(user: Any, thread_id: Any) -> dict[str, Any]:
    thread: Thread = permissions.thread_get_for(user, thread_id)
    pending = list(permissions.tasks_visible(user).filter(thread=thread, status="pending").order_by("created_at"))
    active = thread.runs.filter(status__in=ACTIVE_RUN_STATUSES).first()
    ledger = list(thread.effects.select_related("run").order_by("created_at"))
    effects = selectors.effects_shown(user=user, thread=thread, effects=ledger)
    runs = list(thread.runs.order_by("-created_at")[:10])
    return {
        "thread": thread,
        "pending": pending,
        "timeline": selectors.timeline_for(user=user, thread=thread),
        "runs": runs,
        "effects": effects,
        # On a branched thread, where each was recorded: the original line's payment was listed beside
        # "Waiting for a decision" on the replay as though it had been made there.
        "effect_lines": effect_lines_shown(thread, effects),
        "can_retry": thread.status == "failed" and permissions.can(user, "runtime.retry_thread"),
        # An operator's cancel stopped it with steps left (a payment made, its state short of it): continue it.
        "can_continue": thread.status == "idle"
        and permissions.can(user, "runtime.retry_thread")
        and thread_stopped_midway(thread, runs[0] if runs else None),
        "me": user,
        **conversation_context(user, thread=thread),  # Conversation (comments)
        # Cancelling the active run (approvals.run_cancel): operators and admins.
        "active_run": active,
        "can_cancel_run": active is not None and permissions.can(user, "runtime.retry_thread"),
    }


def thread_state_context(user: Any, thread_id: Any, checkpoint_id: str = "") -> dict[str, Any]:
    """The thread page's state card: the current state (or a checkpoint's) and what its step changed."""
    current = gateway.state_for(user, thread_id)
    shown = gateway.state_for(user, thread_id, checkpoint_id) if checkpoint_id else current
    diff: list[selectors.DiffRow] = []
    ran: list[str] = []
    if shown and shown.parent_id:
        before = gateway.state_for(user, thread_id, shown.parent_id)
        diff = selectors.state_diff(before.values if before else {}, shown.values)
        ran = before.next if before else []  # the nodes that ran between it and this checkpoint
    summary = words.checkpoint_summary(shown, ran=ran) if shown else ""
    return {"current": current, "shown": shown, "shown_summary": summary, "diff": diff, "checkpoint_id": checkpoint_id}


def thread_context(user: Any, thread_id: Any, checkpoint_id: str = "") -> dict[str, Any]:
    ctx = thread_live_context(user, thread_id)
    ctx.update(thread_state_context(user, thread_id, checkpoint_id))
    shown = ctx["shown"]
    ctx["graph_retired"] = _graph_retired(ctx["thread"].graph)
    ctx.update(time_travel_context(user, ctx["thread"], shown))  # time travel: branches, subgraph states, forms
    return ctx


THREADS_PAGE_SIZE = 50
THREADS_GRAPH_MAX = 100  # a graph filter's length, as the list reads it (and its live socket listens to it)
# What the threads list reads from its URL: the live socket's URL carries the same, so it re-renders
# the page the reader is on (filter and page), not the first page unfiltered.
THREADS_PARAMS = ("q", "graph", "status", "cursor")


def threads_context(user: Any, params: QueryDict) -> dict[str, Any]:
    """The thread list: its filter (status, graph, search) and one page, newest first."""
    status = params.get("status", "")
    graph = params.get("graph", "")[:THREADS_GRAPH_MAX]
    # Every graph the listed threads can have: external sources (and retired graphs) are listed too.
    graphs = approvals_selectors.threads_graphs(user=user)
    # A hand-typed status no control offers is named and ignored, not silently dropped: the list shows
    # what the controls show. (A graph is not checked: a retired graph's threads are still listed by name.)
    ignored = []
    if status and status not in ThreadStatus.values:
        ignored.append(f"status: {status[:40]!r} is not a valid choice; ignored")
        status = ""
    wanted = approvals_selectors.ThreadFilter(status=status, graph=graph, q=params.get("q", "")[:200])
    cursor = params.get("cursor", "")[:400]
    threads: list[Thread] = []
    next_cursor = None
    # A hand-edited or truncated page link, as the inbox says it: the API's words ("cursor is not one this
    # API returned") were a bare error page with no list and no way back. The list pages forward only, so
    # any ``before`` is such a link too (it was ignored without a word).
    if params.get("before"):
        ignored.append(f"before: {selectors.BROKEN_PAGE_LINK}")
    else:
        try:
            threads, next_cursor = approvals_selectors.threads_list(
                user=user, filter=wanted, limit=THREADS_PAGE_SIZE, cursor=cursor or None
            )
        except InvalidInput as exc:
            if exc.field != "cursor":
                raise
            ignored.append(f"cursor: {selectors.BROKEN_PAGE_LINK}")

    def page(at: str | None) -> str:
        """This list's filters at another page (``at``: its cursor; None: the first), as a relative URL."""
        query = params.copy()
        query.pop("cursor", None)
        query.pop("before", None)
        if at:
            query["cursor"] = at
        return f"?{query.urlencode()}"

    live_params = {k: params[k] for k in THREADS_PARAMS if params.get(k)}
    return {
        "threads": threads,
        "live_url": "/ws/threads/" + (f"?{urlencode(live_params)}" if live_params else ""),
        "filter": wanted,
        "statuses": ThreadStatus.choices,
        "graphs": graphs,
        "error": "; ".join(ignored),
        "next_url": page(next_cursor) if next_cursor else "",
        "first_url": page(None) if cursor or params.get("before") else "",
    }


DASHBOARD_PARAMS = ("graph", "since", "until")


def dashboard_page_context(user: Any, params: QueryDict) -> dict[str, Any]:
    """The team dashboard for ``params`` (graph, since, until): its numbers and charts, or, when a filter
    is refused, the form with ``error`` beside it and nothing counted (and no live socket: nothing to follow)."""
    dashboard.require_viewer(user)  # before parsing: who may not see it learns nothing from validation
    shown = {k: params.get(k, "") for k in DASHBOARD_PARAMS}
    try:
        filters = dashboard.dashboard_filters_parse(
            user=user, graph=shown["graph"], since=shown["since"], until=shown["until"]
        )
    except DomainError as exc:
        return {"nav": "dashboard", "params": shown, "error": exc, "graphs": dashboard.dashboard_graphs(user=user)}
    live_params = {k: v for k, v in shown.items() if v}
    return {
        "nav": "dashboard",
        "params": shown,
        "live_url": "/ws/dashboard/" + (f"?{urlencode(live_params)}" if live_params else ""),
        **dashboard_charts_context(dashboard.dashboard_for(user=user, filters=filters)),
    }


def dashboard_charts_context(d: dashboard.Dashboard) -> dict[str, Any]:
    """The dashboard's charts (SVG) and the numbers they draw, for the template's tables."""
    timing_bars = []
    for t in d.timing:
        label = f"{t.graph} / {t.node}"
        timing_bars.append(
            charts.Bar(
                f"{label} p50",
                t.p50_seconds,
                charts.duration_text(t.p50_seconds),
                t.link,
                f"{label}:p50",
                charts.PALETTE[0],
            )
        )
        timing_bars.append(
            charts.Bar(
                f"{label} p95",
                t.p95_seconds,
                charts.duration_text(t.p95_seconds),
                t.link,
                f"{label}:p95",
                charts.PALETTE[1],
            )
        )
    pending_now = sum(s.now for s in d.pending)
    return {
        "d": d,
        "graphs": d.graphs,
        "pending_now": pending_now,
        "step": dashboard.step_name(d.filters),
        "webhook_percent": round(d.webhook_share * 100, 1),
        "timing_rows": [
            (t, charts.duration_text(t.p50_seconds), charts.duration_text(t.p95_seconds)) for t in d.timing
        ],
        "pending_chart": charts.line_chart(
            "chart-pending",
            "Pending tasks over time by graph and gate",
            [charts.Series(f"{s.graph} / {s.node}", [(p.at, p.count) for p in s.points], s.link) for s in d.pending],
        ),
        "pending_rows": [(s, charts.colour_of(i)) for i, s in enumerate(d.pending)],
        "timing_chart": charts.bar_chart("chart-timing", "Time to decision per gate (p50 and p95)", timing_bars),
        "outcome_chart": charts.bar_chart(
            "chart-outcomes",
            "Decisions by outcome",
            [charts.Bar(c.label, c.count, str(c.count), c.link, c.key) for c in d.outcomes],
        ),
        "reviewer_chart": charts.bar_chart(
            "chart-reviewers",
            "Decisions per reviewer",
            [charts.Bar(c.label, c.count, str(c.count), c.link, c.key) for c in d.reviewers],
        ),
    }


def task_push_context(user: Any, task_id: Any) -> dict[str, Any]:
    """What the task page's websocket pushes: the live panel plus, out of band, the header and the timeline.

    Read with the viewer's own permissions on every push, so redaction applies to what is pushed.
    """
    ctx = task_live_context(user, task_id)
    ctx["timeline"] = selectors.timeline_for(user=user, thread=ctx["thread"])
    return ctx


# --- time travel (approvals.time_travel) ---


BRANCH_INDENT_MAX = 6  # console.css has a .depth-N class up to this; deeper branches line up with it


@dataclass(frozen=True)
class BranchRow:
    branch: Any
    depth: int
    current: bool = False  # the line the thread is on: the newest branch (every fork or replay moves it there)

    @property
    def indent(self) -> int:
        """The CSS depth class (no inline style: the Content-Security-Policy refuses one)."""
        return min(self.depth, BRANCH_INDENT_MAX)


def _branch_rows(branches: list[Any]) -> list[BranchRow]:
    """The branch tree, depth-first (a branch under the branch its source checkpoint was on)."""
    children: dict[Any, list[Any]] = {}
    for branch in branches:
        children.setdefault(branch.parent_id, []).append(branch)
    rows: list[BranchRow] = []
    current = max(branches, key=lambda b: b.created_at).id if branches else None

    def walk(parent: Any, depth: int) -> None:
        for branch in children.get(parent, []):
            rows.append(BranchRow(branch, depth, current=branch.id == current))
            walk(branch.id, depth + 1)

    walk(None, 1)
    return rows


def time_travel_context(user: Any, thread: Thread, shown: Any) -> dict[str, Any]:
    checkpoint = shown.checkpoint_id if shown else None
    redone = time_travel.effects_redone_for(user, thread, checkpoint) if checkpoint else []
    return {
        **time_travel_live_context(user, thread, shown),
        # What replaying (or forking and running) from here does again, asked before it is done.
        "replay_confirm": words.travel_confirmation(redone, kind="replay"),
        "fork_confirm": words.travel_confirmation(redone, kind="fork"),
        "redone_ids": ",".join(str(e.pk) for e in redone),
        "subgraphs": time_travel.subgraph_states_for(user, thread.pk, checkpoint) if checkpoint else [],
        "fork_placeholder": fork_placeholder(thread.graph),
    }


def time_travel_live_context(user: Any, thread: Thread, shown: Any) -> dict[str, Any]:
    """What of the time-travel card follows the thread (``partials/time_travel_live.html``): its branch
    tree, and whether it may travel now (with ``active_run`` from ``thread_live_context``)."""
    return {
        "branch_rows": _branch_rows(time_travel.branches_for(user, thread.pk)),
        "line_state": words.line_state(thread),  # said of the current line, marked in the tree
        "can_time_travel": bool(shown) and permissions.can(user, "runtime.time_travel"),
        "time_travel_pushed": True,
    }


# An example value per JSON Schema type: the fork form's hint shows a shape, never a state value.
_SCALAR_EXAMPLES: dict[str, Any] = {"string": "new value", "integer": 1, "number": 1.5, "boolean": True}
_CONTAINER_EXAMPLES: dict[str, Any] = {"array": [], "object": {}}


def fork_placeholder(graph: str) -> str:
    """The fork form's hint: the graph's first plain state field (else its first list or object field)
    with an example of its type, or a neutral one: never a field the graph does not have."""
    try:
        properties = json_schema_for(graph_get(graph).state_schema).get("properties") or {}
    except UnknownGraph:
        properties = {}
    examples: list[tuple[str, Any]] = []
    for key, schema in properties.items():
        if not isinstance(schema, dict):
            continue
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            examples.append((key, schema["enum"][0]))
        elif schema.get("type") in _SCALAR_EXAMPLES:
            examples.append((key, _SCALAR_EXAMPLES[schema["type"]]))
    for key, schema in properties.items():
        if isinstance(schema, dict) and schema.get("type") in _CONTAINER_EXAMPLES:
            examples.append((key, _CONTAINER_EXAMPLES[schema["type"]]))
    key, example = examples[0] if examples else ("field", "new value")
    return json.dumps({key: example})


# --- Bulk decisions (issue 14) ---------------------------------------------------------------------


def bulk_inbox_context(
    user: Any, wanted: InboxFilter | None, filters: dict[str, str], page: selectors.Page
) -> dict[str, Any]:
    """The inbox's bulk bar: may the user decide, and how many pending tasks the current filter matches."""
    if wanted is None or not permissions.can(user, "approvals.decide_task"):
        return {"enabled": False}
    whole = not (page.next_cursor or page.prev_cursor or filters.get("cursor") or filters.get("before"))
    listed = None  # the matching tasks' gates, when the page lists every one of them
    ids: list[Any] = []  # the tasks "select all matching" would take now, as the page counts them
    try:
        if wanted.status == "pending" and whole:
            listed = [(task.graph, task.node) for task in page.items]
            ids = [task.pk for task in page.items]  # the list is all there is: no query
        elif wanted.status in ("pending", ""):
            # Past the most an action takes the exact number changes nothing on the page (and every
            # live re-render would read them all): "more than BULK_MAX" is all it says.
            ids = bulk.bulk_matching_ids(user=user, filter=wanted)
    except DomainError:
        ids = []  # the list shows the error
    matching = len(ids)
    # What "select all matching" needs a reason for (bulk.js asks for it before the confirmation).
    reasons = (
        bulk.bulk_reasons_matching(user=user, filter=wanted, gates=listed) if 0 < matching <= bulk.BULK_MAX else []
    )
    return {
        "enabled": True,
        "filter": wanted.form_fields(),
        "matching": matching,
        "max": bulk.BULK_MAX,
        "reasons": " ".join(reasons),
        # The set the page counted: a bulk from it decides exactly these, or is refused (bulk.bulk_decide).
        "seen": bulk.selection_seen(ids) if 0 < matching <= bulk.BULK_MAX else "",
    }


# --- Inbox columns per gate and previous-page navigation (issue 14) --------------------------------


def inbox_column_filters(params: QueryDict) -> dict[str, str]:
    """The "c.<key>" column filters of an inbox request (at most MAX_COLUMNS, each bounded)."""
    found = {k[2:]: str(v)[:200] for k, v in params.items() if k.startswith("c.") and len(k) <= 42}
    return dict(list(found.items())[: columns.MAX_COLUMNS])


def inbox_columns_context(
    user: Any, page: selectors.Page, filters: dict[str, str], column_filters: dict[str, str], base: dict[str, str]
) -> dict[str, Any]:
    cells = columns.cells_for(user=user, tasks=page.items, columns=page.columns)
    for task in page.items:
        task.inbox_cells = cells.get(task.pk, [])
    paths = columns.masked_paths(user, filters.get("graph", "")) if page.columns else []
    masked = {c.key for c in page.columns if columns.column_redacted(c, paths)}
    sort = filters.get("sort", "")
    heads = [
        {
            "column": c,
            "masked": c.key in masked,
            "sorted": "asc" if sort == f"col:{c.key}" else "desc" if sort == f"-col:{c.key}" else "",
            "sort_url": "?"
            + urlencode({**base, "sort": f"-col:{c.key}" if sort == f"col:{c.key}" else f"col:{c.key}"}),
            "filter": column_filters.get(c.key, ""),
        }
        for c in page.columns
    ]
    return {
        "column_heads": heads,
        "prev_url": "?" + urlencode({**base, "before": page.prev_cursor}) if page.prev_cursor else "",
    }


# What a decided task's resume run did, in the bulk page's Thread column.
_BULK_RUN_WORDS: dict[str, str] = {
    RunStatus.QUEUED: "resuming",
    RunStatus.RUNNING: "resuming",
    RunStatus.SUCCEEDED: "resumed: completed",
    RunStatus.INTERRUPTED: "resumed: waits at its next gate",
    RunStatus.FAILED: "resumed: failed",
    RunStatus.CANCELLED: "resume cancelled",
}


def bulk_context(user: Any, bulk_id: Any) -> dict[str, Any]:
    action = bulk.bulk_get_for(user, bulk_id)
    percent = round(100 * action.done / action.total) if action.total else 100
    # Each resume run as it is now (one query): the column said "resuming" long after they had finished.
    run_ids = [item["run"] for item in action.decided if item.get("run")]
    statuses = dict(Run.objects.filter(pk__in=run_ids).values_list("id", "status")) if run_ids else {}
    runs = {str(pk): _BULK_RUN_WORDS.get(str(status), str(status)) for pk, status in statuses.items()}
    return {"bulk": action, "percent": percent, "elapsed": bulk.bulk_elapsed(action), "me": user, "runs": runs}
