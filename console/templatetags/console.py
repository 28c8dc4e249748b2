"""Template helpers: JSON as a collapsible tree, compact values, relative times."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from approvals import gateway
from approvals.assignment import SERVICE_PREFIX
from approvals.deadlines import SYSTEM_USERNAME
from approvals.models import AuditAction
from console import rows_html, words
from runtime.deadlines import DeadlineError, duration_human, duration_parse
from runtime.models import ThreadStatus

register = template.Library()

_OPEN_DEPTH = 2  # deeper objects start collapsed: state can be large
_MAX_NODES = 2000  # stop rendering absurdly large values rather than hang the page


def _scalar(value: Any) -> SafeString:
    if value is None:
        return mark_safe('<span class="j-null">null</span>')
    if isinstance(value, bool):
        return format_html('<span class="j-bool">{}</span>', "true" if value else "false")
    if isinstance(value, (int, float)):
        return format_html('<span class="j-num">{}</span>', value)
    text = str(value)
    if len(text) > 400:
        return format_html(
            '<details class="j-long"><summary><span class="j-str">"{}…"</span> ({} chars)</summary>'
            '<pre class="j-str">{}</pre></details>',
            text[:120],
            len(text),
            text,
        )
    return format_html('<span class="j-str">"{}"</span>', text)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _tree(value: Any, depth: int, budget: list[int]) -> str:
    budget[0] -= 1
    if budget[0] < 0:
        return '<span class="j-null">… (truncated)</span>'
    if isinstance(value, dict):
        if not value:
            return '<span class="j-punct">{}</span>'
        items = "".join(
            f'<li><span class="j-key">{escape(str(k))}</span>: {_tree(v, depth + 1, budget)}</li>'
            for k, v in value.items()
        )
        opened = " open" if depth < _OPEN_DEPTH else ""
        return (
            f'<details class="j-node"{opened}><summary>{{…}} <span class="j-count">{_count(len(value), "key")}</span>'
            f"</summary><ul>{items}</ul></details>"
        )
    if isinstance(value, list):
        if not value:
            return '<span class="j-punct">[]</span>'
        items = "".join(
            f'<li><span class="j-idx">{i}</span> {_tree(v, depth + 1, budget)}</li>' for i, v in enumerate(value)
        )
        opened = " open" if depth < _OPEN_DEPTH else ""
        return (
            f'<details class="j-node"{opened}><summary>[…] <span class="j-count">{_count(len(value), "item")}</span>'
            f"</summary><ul>{items}</ul></details>"
        )
    return str(_scalar(value))


@register.simple_tag
def json_tree(value: Any) -> SafeString:
    # Every leaf goes through escape()/format_html, so the assembled HTML is safe.
    return mark_safe(f'<div class="json-tree">{_tree(value, 0, [_MAX_NODES])}</div>')  # noqa: S308


@register.filter
def reader_url(url: str, user: Any) -> str:
    """A live socket's URL naming the user its page was drawn for: the socket refuses another user's session
    (``consumers.CLOSE_OTHER_USER``), which the page would otherwise show under the first user's name."""
    from console.consumers import READER_PARAM  # here: the consumers import what renders these templates

    pk = getattr(user, "pk", None)
    if pk is None:
        return url
    return f"{url}{'&' if '?' in url else '?'}{urlencode({READER_PARAM: pk})}"


# What ``<input type="datetime-local">`` can hold (HTML's local date and time string): a browser shows any
# other value as an empty field, silently.
_DATETIME_LOCAL = re.compile(r"\d{4,}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,3})?)?")


@register.filter
def datetime_input_type(value: Any) -> str:
    """``datetime-local`` for a value its picker can show, else ``text``: ``/audit/?since=<junk>`` showed the
    error about ``since`` beside an empty field, and a bare date or an offset (accepted, and applied) showed
    no filter at all. The value stays as given, where the reader can see and mend it."""
    text = "" if value is None else str(value)
    return "datetime-local" if not text or _DATETIME_LOCAL.fullmatch(text) else "text"


@register.simple_tag(takes_context=True)
def form_guard(context: template.Context) -> SafeString:
    """What every console POST form carries, in one place: its CSRF token, and the user its page was drawn
    for (``common.READER_FIELD``; htmx sends the same as a header). A form posted without htmx after a sign-in
    as someone else in another tab was recorded as them; ``console_login_required`` refuses it now (409).

    A page rendered for a live push has neither (no request, no user): console.js adds both when such a form
    is sent, from the page's own ``hx-headers``."""
    from console.views.common import READER_FIELD  # here: the views import what renders these templates

    parts = []
    csrf = context.get("csrf_token")
    if csrf and csrf != "NOTPROVIDED":  # as Django's {% csrf_token %}, without its warning when absent
        parts.append(format_html('<input type="hidden" name="csrfmiddlewaretoken" value="{}">', csrf))
    user = context.get("user")
    if user is not None and user.is_authenticated:
        parts.append(format_html('<input type="hidden" name="{}" value="{}">', READER_FIELD, user.pk))
    return mark_safe("".join(parts))  # noqa: S308 - each part went through format_html


@register.filter
def compact(value: Any) -> str:
    """A one-line JSON rendering for tables (strings without quotes)."""
    return rows_html.compact(value)


@register.filter
def pretty(value: Any) -> str:
    return rows_html.pretty(value)


@register.filter
def ago(value: datetime | None) -> str:
    return rows_html.ago(value)


@register.filter
def signed_by_machine(user: Any) -> bool:
    """Whether a decision's account is a principal no person signs in as (the deadline sweep, an inbound webhook):
    "not re-authenticated" means nothing for it."""
    name = user.get_username() if user is not None else ""
    return name == SYSTEM_USERNAME or name.startswith(SERVICE_PREFIX)


# What a user's access history says for each of its actions (the stored value is the dotted code).
_USER_ACTION_LABELS: dict[str, str] = {
    AuditAction.USER_CREATED: "Account created",
    AuditAction.USER_ACCESS_CHANGED: "Access changed",
    AuditAction.USER_DEACTIVATED: "Deactivated",
    AuditAction.USER_REACTIVATED: "Reactivated",
    AuditAction.USER_PASSWORD_RESET: "Password reset",
    AuditAction.USER_PASSWORD_SET: "Password set",
    AuditAction.USER_OTP_RESET: "OTP devices reset",
    AuditAction.USER_AWAY_SET: "Marked away",
    AuditAction.USER_AWAY_CLEARED: "Back from away",
}


@register.filter
def audit_label(action: str) -> str:
    """A readable name for an audit action code ("user.deactivated" → "Deactivated")."""
    if action in _USER_ACTION_LABELS:
        return _USER_ACTION_LABELS[action]
    if action in AuditAction.values:
        return str(AuditAction(action).label)
    return action


@register.filter
def overdue(value: datetime | None) -> bool:
    return rows_html.overdue(value)


@register.filter
def get(mapping: Any, key: str) -> Any:
    return rows_html.field(mapping, key)


@register.filter
def errors_besides(errors: Any, shown: str) -> list[str]:
    """A form's errors that no input of it shows (``shown``: the names that have their own slot, space
    separated), each naming its field: a refusal naming a field the form has no slot for said nothing."""
    slots = set(shown.split())
    return [
        message if field in ("", "__all__") else f"{field}: {message}"
        for field, message in (errors or {}).items()
        if field not in slots
    ]


@register.simple_tag(takes_context=True)
def qs(context: Any, **changes: Any) -> str:
    """The current query string with some parameters replaced (None/"" removes them)."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value in (None, ""):
            params.pop(key, None)
        else:
            params[key] = value
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


# --- deadlines: one rendering of "how due" for every page (approvals.deadlines.due_state) ---------


@register.simple_tag
def due_badge(task: Any) -> SafeString:
    """The task's due badge (``console.rows_html.due_badge_html``)."""
    return rows_html.due_badge_html(task)


@register.simple_tag(takes_context=True)
def audit_row(context: Any, event: Any, details: Any) -> SafeString:
    """One audit trail row (``console.rows_html.audit_row_html``), a user subject named (``subject_names``)."""
    names = context.get("subject_names") or {}
    user = context.get("user")
    withheld = context.get("hashes_withheld")  # the page's, read once for its rows
    if withheld is None:
        withheld = user is None or gateway.audit_hashes_withheld(user)
    return rows_html.audit_row_html(event, details, subject_name=names.get(event.id, ""), hashes=not withheld)


@register.simple_tag(takes_context=True)
def inbox_row(context: Any, task: Any, claim: Any) -> SafeString:
    """One inbox row (``console.rows_html.inbox_row_html``) with the page's viewer, bulk and conversation."""
    bulk = context.get("bulk") or {}
    conversation = context.get("conversation")
    return rows_html.inbox_row_html(
        task, claim, me=context.get("me"), bulk_enabled=bool(bulk.get("enabled")), conversation=conversation
    )


@register.filter
def duration(value: Any) -> str:
    """A duration ("4h", "90s" or seconds) as people say it: "4 h", "1 min 30 s" → never "86400 s"."""
    try:
        return duration_human(duration_parse(value))
    except DeadlineError:
        return str(value)


# --- words for runtime records (console.words): what a reviewer reads instead of identifiers --------


@register.filter
def case(thread: Any) -> tuple[str, str]:
    """A thread's case and who it is about, by its graph's naming keys, as a list shows them (``words.case_shown``)."""
    return words.case_shown(thread.graph or "", thread.metadata)


@register.simple_tag
def checkpoint_where(view: Any, thread: Any, checkpoint_id: str = "") -> str:
    """Where the thread goes from ``view``: "Waiting at human_review" for the current state of a paused
    thread, "Next: disburse" for any other, "Finished" for a last checkpoint."""
    waiting = not checkpoint_id and getattr(thread, "status", "") == ThreadStatus.INTERRUPTED
    return words.checkpoint_next(view, waiting=waiting)


@register.filter
def graph_label(graph: Any) -> str:
    """ "Loan approval" for ``loan_approval``: the head of the graph's description (``words.graph_label``)."""
    return words.graph_label(str(graph or ""))


@register.filter
def run_kind(run: Any) -> str:
    """ "Start run", "Resume run"."""
    return words.run_kind(run)


@register.filter
def run_outcome(run: Any) -> str:
    """ "paused for a decision", "failed: bank is down" (the status, said once)."""
    return words.run_outcome(run)


@register.filter
def effect_status(effect: Any) -> str:
    return words.effect_status(effect)


@register.filter
def effect_hint(effect: Any) -> str:
    return words.effect_hint(effect)


@register.filter
def error_summary(text: str) -> str:
    return words.error_summary(text)


@register.simple_tag
def error_block(text: str, css: str = "danger") -> SafeString:
    """An error as one line, its full text (the exception, LangGraph's task note) collapsed for operators."""
    if not text:
        return mark_safe("")
    summary = words.error_summary(text)
    if not words.error_is_summarised(text):
        return format_html('<p class="{} error-summary">{}</p>', css, summary)
    return format_html(
        '<p class="{} error-summary">{}</p><details class="error-full small"><summary>Full error</summary>'
        "<pre>{}</pre></details>",
        css,
        summary,
        text,
    )


@register.filter
def metadata_label(key: Any) -> str:
    return words.metadata_label(key)


@register.filter
def thread_name(thread: Any) -> str:
    return words.thread_name(thread)


@register.filter
def bulk_tally(bulk: Any) -> str:
    return words.bulk_tally(bulk)


@register.filter
def bulk_signed_heading(bulk: Any) -> str:
    return words.bulk_signed_heading(bulk)


@register.filter
def approvals_waiting(remaining: int | None) -> str:
    return words.approvals_waiting(remaining)


@register.filter
def branch_kind(branch: Any) -> str:
    return words.branch_kind(branch)


@register.filter
def checkpoint_short(checkpoint_id: Any) -> str:
    return words.checkpoint_short(checkpoint_id)
