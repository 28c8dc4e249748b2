"""The rows the console renders in bulk — the inbox's, the audit trail's — and the due badge, in Python.

A row is the one piece of markup a page renders fifty or a hundred times (and an inbox row again for
every task a live inbox receives): as Django templates they cost ~0.2–0.3 ms a row, more than half of
the inbox's and the audit trail's server time, spent resolving ~40 variables, reversing URLs and
formatting dates per row. Written out here they are the same HTML for a fraction of that
(docs/performance.md, "Round 6"). Every value is escaped as the template engine escapes it
(``SafeString`` as it is, anything else ``str()`` then HTML-escaped); times are shown in UTC, as
everywhere in the console.
"""

from __future__ import annotations

import contextlib
import html
import json
from datetime import datetime
from typing import Any

from django.urls import get_script_prefix
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from approvals.bulk import bulk_reasons_at
from approvals.deadlines import due_state
from approvals.models import TaskStatus
from console.words import actor_short, case_of, case_shown, escalation_words, graph_label
from runtime.deadlines import duration_human


def task_url(task_id: Any) -> str:
    """``reverse("console:task", args=[task_id])`` without the resolver (tests/console/test_rows_html.py)."""
    return f"{get_script_prefix()}tasks/{task_id}/"


def thread_url(thread_id: Any) -> str:
    """``reverse("console:thread", args=[thread_id])`` without the resolver."""
    return f"{get_script_prefix()}threads/{thread_id}/"


def _e(value: Any) -> str:
    return value if isinstance(value, SafeString) else html.escape(str(value))


def _iso(value: datetime) -> str:
    return timezone.localtime(value).isoformat()


def _utc(value: datetime, fmt: str) -> str:
    return timezone.localtime(value).strftime(fmt)


def _g(value: Any) -> str:
    try:  # the template's |stringformat:'g', which shows nothing for what is not a number
        return f"{value:g}"
    except (ValueError, TypeError):
        return ""


def _clip(value: Any, length: int) -> str:
    """The template's ``|truncatechars``: at most ``length`` characters, the last an ellipsis if cut."""
    text = str(value)
    return text if len(text) <= length else text[: length - 1] + "…"


def overdue(value: datetime | None) -> bool:
    """Past ``value`` (a due time) already."""
    return bool(value and value < timezone.now())


def field(mapping: Any, key: str) -> Any:
    """``mapping[key]`` of a dict, or the attribute of anything else; "" when absent (the ``get`` filter)."""
    if isinstance(mapping, dict):
        return mapping.get(key, "")
    return getattr(mapping, key, "")


def ago(value: datetime | None) -> str:
    """How long ago (or, prefixed "in", how far ahead) ``value`` is: "42 s ago", "3 h 5 min ago", "in 2 d 1 h".

    The same words as a due badge beside it ("overdue 20 min": ``runtime.deadlines.duration_human``). A
    ``<time data-ago>`` showing it keeps counting in the browser (console.js ``agoText``, same words).
    """
    if not value:
        return ""
    seconds = int((timezone.now() - value).total_seconds())
    text = duration_human(seconds)
    return f"in {text}" if seconds < 0 else f"{text} ago"


def due_badge_html(task: Any) -> SafeString:
    """The task's due badge ("due in 3 h", "overdue 20 min") and, once escalated, since when and why.

    console.js ticks the countdown from the badge's ISO time, so an open page turns overdue on time.
    """
    due_at = task.due_at
    if not due_at:
        return mark_safe('<span class="muted">—</span>')
    shown = due_state(due_at, remind_at=task.remind_at) if task.is_open else None
    iso, when = _iso(due_at), _utc(due_at, "%Y-%m-%d %H:%M")
    if shown is not None:
        tone = "badge-danger is-overdue" if shown.overdue else "badge-warn" if shown.soon else ""
        out = (
            f'<span class="due"><time class="badge due-badge {tone}" datetime="{iso}" title="Due {when} UTC" '
            f"data-due-badge>{_e(shown.text)}</time>"
        )
    else:
        # Closed: the deadline no longer applies, so it is told in the past (beside "Due" of an open task), and
        # "was due" only if it had passed: a task decided the day before its due time read "was due <tomorrow>".
        closed_at = getattr(task, "decided_at", None) or timezone.now()
        if due_at > closed_at:
            verb = "decided" if getattr(task, "status", "") == TaskStatus.DECIDED else "closed"
            said = f"{verb} before its due time ({when} UTC)"
        else:
            said = f"was due {when} UTC"
        out = f'<span class="due"><time class="muted" datetime="{iso}">{said}</time>'
    if task.escalated_at:
        out += (
            f' <span class="badge badge-escalated" data-escalated title="Escalated '
            f'{_utc(task.escalated_at, "%Y-%m-%d %H:%M")} UTC: {_e(task.escalation_reason)}">'
            f"{_e(escalation_words(task))} · "
            f'<time datetime="{_iso(task.escalated_at)}" data-ago>{ago(task.escalated_at)}</time></span>'
        )
    return mark_safe(out + "</span>")  # noqa: S308 - every value above is escaped


def _group_ids(me: Any) -> set[Any]:
    """The reader's group ids, read once per reader object (a page's rows share it), and only when a row is
    assigned to a group alone."""
    cached = getattr(me, "_gatehouse_group_ids", None)
    if cached is None:
        groups = getattr(me, "groups", None)
        cached = set(groups.values_list("pk", flat=True)) if groups is not None else set()
        with contextlib.suppress(AttributeError):
            me._gatehouse_group_ids = cached
    return cached


def inbox_row_html(task: Any, claim: Any, *, me: Any, bulk_enabled: bool, conversation: Any) -> SafeString:
    """One ``<tr>`` of the inbox: the task, its claim, due badge, assignee and its gate's columns."""
    url = task_url(task.pk)
    title = _e(task.title or task.node)
    is_open = task.is_open
    me_pk = getattr(me, "pk", None)
    parts = [
        f'<tr data-task-id="{task.pk}" data-href="{url}" '
        f'class="{"is-overdue" if is_open and overdue(task.due_at) else ""}">'
    ]
    if bulk_enabled:
        # Whose task it is, if not the reader's: the bulk confirmation names them (console/static/console/bulk.js).
        other = task.assigned_user if task.assigned_user_id and task.assigned_user_id != me_pk else None
        elsewhere = f' data-assignee="{_e(other.get_username())}"' if other is not None else ""
        if not task.assigned_user_id and task.assigned_group_id and task.assigned_group_id not in _group_ids(me):
            # Reassigned or escalated to a group the reader is not in: named too ("group lead").
            elsewhere = f' data-assignee="group {_e(task.assigned_group.name)}"'
        # The outcomes its gate needs a reason for: bulk.js asks for the reason before the confirmation.
        reasons = _e(" ".join(bulk_reasons_at(task.graph, task.node))) if is_open else ""
        box = (
            f'<input type="checkbox" name="task_ids" value="{task.pk}" form="bulk-form"{elsewhere} '
            f'data-reasons="{reasons}" '
            f'aria-label="Select {title}">'
            if is_open
            else ""
        )
        parts.append(f'<td class="pick">{box}</td>')
    badges = ""
    if conversation is not None and task.pk in conversation.waiting:
        badges += ' <span class="badge badge-waiting">waiting for answer</span>'
    if conversation is not None and task.pk in conversation.mentioned:
        badges += ' <span class="badge badge-mention">mentioned</span>'
    branch_kind = getattr(task, "branch_kind", None)
    if branch_kind:  # on a fork or replay branch: approving acts again (console.page_context.what_if_context)
        kind = _e(branch_kind)
        badges += (
            f' <span class="badge badge-warn badge-branch" data-branch="{kind}" title="On a what-if {kind} branch: '
            f'the original line of this thread may already have acted">what-if: {kind}</span>'
        )
    metadata = task.thread.metadata
    case, applicant = case_shown(task.graph, metadata)  # the graph's own naming keys (search_metadata), clipped
    whole = " · ".join(v for v in case_of(task.graph, metadata) if v)
    clip_title = f' title="{_e(whole)}"' if whole != " · ".join(v for v in (case, applicant) if v) else ""
    who = f' <span class="muted">· {_e(applicant)}</span>' if applicant else ""
    parts.append(
        f'<td class="title"><a href="{url}">{title}</a>{badges}</td>'
        f'<td title="{_e(task.graph)}">{_e(graph_label(task.graph))}</td>'
        f"<td><code>{_e(task.node)}</code></td>"
        f'<td class="case"{clip_title}>{_e(case)}{who}</td>'
        f'<td><time datetime="{_iso(task.created_at)}" data-ago '
        f'title="{_utc(task.created_at, "%Y-%m-%d %H:%M:%S")} UTC">'
        f"{ago(task.created_at)}</time></td><td>{due_badge_html(task)}</td>"
    )
    if claim:
        mine = claim.user_id == me_pk
        holder = "you" if mine else _e(claim.user.get_username())
        parts.append(
            f'<td><span class="badge {"badge-mine" if mine else "badge-held"}" '
            f'title="until {_utc(claim.expires_at, "%H:%M")} UTC">{holder}</span></td>'
        )
    else:
        parts.append('<td><span class="muted">—</span></td>')
    parts.append(f'<td><span class="status status-{_e(task.status)}">{_e(task.get_status_display())}</span></td>')
    assigned = ""
    user, group = task.assigned_user, task.assigned_group
    if user:
        mine = task.assigned_user_id == me_pk
        name = "you" if mine else _e(user.get_username())
        assigned += f'<span class="badge {"badge-mine" if mine else ""}">{name}</span>'
    if group:
        assigned += f' <span class="muted">group {_e(group.name)}</span>'
    if not user and not group:
        assigned = '<span class="muted">—</span>'
    parts.append(f'<td class="assigned">{assigned}</td>')
    for cell in getattr(task, "inbox_cells", ()):
        column = cell.column
        if cell.masked:
            inner = f'<span class="muted">{_e(cell.text)}</span>'
        elif cell.fraction is not None:
            low, high = column.scale[0], column.scale[1]
            inner = (
                f'<span class="risk"><meter class="risk-bar" min="{_g(low)}" max="{_g(high)}" low="{_g(cell.low)}" '
                f'high="{_g(cell.high)}" optimum="{_g(low)}" value="{_g(cell.value)}" aria-hidden="true"></meter> '
                f"{_e(cell.text)}</span>"
            )
        else:
            inner = _e(cell.text)
        parts.append(f'<td class="gate-col col-{_e(column.type)}" data-column="{_e(column.key)}">{inner}</td>')
    parts.append("</tr>")
    return mark_safe("".join(parts))  # noqa: S308 - every value above is escaped


def audit_row_html(event: Any, details: Any, *, subject_name: str = "", hashes: bool = True) -> SafeString:
    """One ``<tr>`` of the audit trail: the event, its subject (linked) and its details (as the reader may see them).

    Actor and subject are said in words (``console.words.actor_short``; a user subject by ``subject_name``,
    their username); the stored label and ids stay in the cells' ``title``. ``hashes``: the chain hashes
    are shown (``gateway.audit_hashes_withheld``).
    """
    full = f"{event.subject_type} {event.subject_id}"
    if event.subject_type == "task":
        subject = (
            f'<a href="{_e(task_url(event.subject_id))}" title="{_e(full)}">task {_e(_clip(event.subject_id, 10))}</a>'
        )
    elif event.thread_id:
        subject = (
            f'<a href="{_e(thread_url(event.thread_id))}" title="{_e(full)}">{_e(event.subject_type)} '
            f"{_e(_clip(event.subject_id, 14))}</a>"
        )
    elif subject_name:
        subject = f'<span title="{_e(full)}">user {_e(subject_name)}</span>'
    else:
        subject = f"{_e(event.subject_type)} {_e(event.subject_id)}"
    actor = actor_short(event.actor_label)
    actor_title = event.actor_label + (f" (user id {event.actor_id})" if getattr(event, "actor_id", None) else "")
    short = _clip(compact(details), 60)
    return mark_safe(  # noqa: S308 - every value is escaped
        f'<tr><td class="num">{event.id}</td><td><time datetime="{_iso(event.at)}">'
        f'{_utc(event.at, "%Y-%m-%d %H:%M:%S")}</time></td><td title="{_e(actor_title)}">{_e(actor)}</td>'
        f"<td><code>{_e(event.action)}</code></td><td>{subject}</td><td>{_e(event.graph)}</td>"
        f"<td><details><summary><code>{_e(short)}</code></summary><pre>{_e(pretty(details))}</pre>"
        + (
            f'<p class="small muted">hash {_e(_clip(event.hash, 17))} ← {_e(_clip(event.prev_hash, 17))}</p>'
            if hashes
            else '<p class="small muted">hash withheld (it covers values masked for you)</p>'
        )
        + "</details></td></tr>"
    )


def compact(value: Any) -> str:
    """A one-line JSON rendering for tables (strings without quotes)."""
    if isinstance(value, str):
        return value
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 160 else text[:157] + "…"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)
