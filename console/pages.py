"""What each page and live fragment shows, built once for views and websocket consumers alike.

Every builder takes the viewing user and reads through ``approvals.permissions``
and ``approvals.gateway``, so a fragment pushed over a websocket shows exactly
what a page load by the same user would.
"""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import urlencode

from django.http import QueryDict

from approvals import gateway, permissions
from approvals import selectors as approvals_selectors
from approvals.errors import DomainError
from approvals.models import ApprovalTask
from approvals.payloads import payload_kind
from console import selectors
from console.forms import DecisionForm, InboxFilterForm, decision_form_for
from console.services import can_release_any, claim_active
from runtime.models import ACTIVE_RUN_STATUSES, Thread
from runtime.registry import REASON_OUTCOMES, UnknownGraph, graph_get
from runtime.schema import json_schema_for

INBOX_PAGE_SIZE = 50


def inbox_context(user: Any, params: QueryDict, *, limit: int = INBOX_PAGE_SIZE) -> dict[str, Any]:
    form = InboxFilterForm(params)
    error = ""
    page = selectors.Page(items=[], next_cursor=None)
    filters: dict[str, str] = {}
    if form.is_valid():
        filters = form.filters()
        try:
            page = selectors.inbox_list(user=user, limit=limit, **filters)
        except DomainError as exc:
            error = exc.message
    else:
        error = "; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items())
    live_params = {k: v for k, v in params.items() if k in form.fields and v}
    base = {k: v for k, v in live_params.items() if k != "cursor"}
    next_url = "?" + urlencode({**base, "cursor": page.next_cursor}) if page.next_cursor else ""
    return {
        "form": form,
        "page": page,
        "filters": filters,
        "error": error,
        "facets": selectors.inbox_facets(user=user),
        "claimed_ids": {t.pk for t in page.items if _claim_of(t) is not None},
        "rows": [(t, _claim_of(t)) for t in page.items],
        "live_url": "/ws/inbox/" + (f"?{urlencode(live_params)}" if live_params else ""),
        "first_page": not filters.get("cursor"),
        "first_url": "?" + urlencode(base),
        "next_url": next_url,
        "me": user,
    }


def _claim_of(task: ApprovalTask) -> Any:
    claim = getattr(task, "claim", None)
    try:
        return claim if claim is not None and claim.is_active else None
    except Exception:  # noqa: BLE001 - RelatedObjectDoesNotExist when unclaimed
        return None


def task_live_context(user: Any, task_id: Any) -> dict[str, Any]:
    """The part of the task page that changes while the reviewer looks at it."""
    task = permissions.task_get_for(user, task_id)
    thread = task.thread
    claim = claim_active(task) if task.is_open else None
    quorum = selectors.quorum_for(user=user, task=task)
    signed = next((d for d in quorum.decisions if d.actor_id == user.pk), None)
    recent = list(thread.effects.order_by("-created_at")[:5])
    effects = selectors.effects_shown(user=user, thread=thread, effects=recent)
    return {
        "task": task,
        "thread": thread,
        "claim": claim,
        "can_decide": approvals_selectors.task_can_decide(user=user, task=task, decisions=quorum.decisions),
        "my_decision": signed,
        "quorum": quorum,
        "can_release": claim is not None and (claim.user_id == user.pk or can_release_any(user)),
        "claim_is_mine": claim is not None and claim.user_id == user.pk,
        "runs": list(thread.runs.order_by("-created_at")[:5]),
        "effects": effects,
        "decisions": quorum.decisions,
        # Only a finished thread's values are shown, and only as the gateway masks them for this viewer.
        "result": gateway.thread_values_for(user, thread) if thread.is_finished else None,
        "me": user,
    }


def task_context(user: Any, task_id: Any, form: DecisionForm | None = None) -> dict[str, Any]:
    ctx = task_live_context(user, task_id)
    task: ApprovalTask = ctx["task"]
    state = gateway.task_state_for(user, task)
    values = state.values if state else {}
    diff: list[selectors.DiffRow] = []
    previous_id = state.parent_id if state else ""
    if state and state.parent_id:
        before = gateway.state_for(user, task.thread_id, state.parent_id)
        diff = selectors.state_diff(before.values if before else {}, values)
    try:
        entry = graph_get(task.graph)
        schema = json_schema_for(entry.state_schema)
        # The graph's reason policy for this gate (langgraph.json "gatehouse": {"reasons": ...}).
        reasons_required = [o for o in REASON_OUTCOMES if entry.reason_required(gate=task.node, outcome=o)]
    except UnknownGraph:
        schema = {"type": "object", "properties": {}}
        reasons_required = ["reject", "edit"]
    payload, _ = gateway.payload_for(user, task)
    if form is None:
        # Edit fields are prefilled from the masked payload too: a reviewer never receives a hidden value.
        form = decision_form_for(_task_as_shown(task, payload), values, schema)
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
        }
    )
    return ctx


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
    return {
        "thread": thread,
        "pending": pending,
        "timeline": selectors.timeline_for(user=user, thread=thread),
        "runs": list(thread.runs.order_by("-created_at")[:10]),
        "effects": selectors.effects_shown(
            user=user, thread=thread, effects=list(thread.effects.order_by("created_at"))
        ),
        "can_retry": thread.status == "failed" and user.has_perm("runtime.retry_thread"),
        "me": user,
        # Cancelling the active run (approvals.run_cancel): operators and admins.
        "active_run": active,
        "can_cancel_run": active is not None and permissions.can(user, "runtime.retry_thread"),
    }


def thread_context(user: Any, thread_id: Any, checkpoint_id: str = "") -> dict[str, Any]:
    ctx = thread_live_context(user, thread_id)
    current = gateway.state_for(user, thread_id)
    shown = gateway.state_for(user, thread_id, checkpoint_id) if checkpoint_id else current
    diff: list[selectors.DiffRow] = []
    if shown and shown.parent_id:
        before = gateway.state_for(user, thread_id, shown.parent_id)
        diff = selectors.state_diff(before.values if before else {}, shown.values)
    ctx.update({"current": current, "shown": shown, "diff": diff, "checkpoint_id": checkpoint_id})
    return ctx
