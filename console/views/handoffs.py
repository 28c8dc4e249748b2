"""Hand-offs in the console: reassign (leads), delegate (the claim holder), and one's own out-of-office.

Thin: each view parses its form and calls ``approvals.assignment``; refusals are
shown next to the form (htmx re-renders the live panel) with their status.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from approvals import assignment, permissions
from approvals.errors import DomainError, InvalidInput
from approvals.inputs import instant_check
from console import page_context
from console.forms import NUL_REFUSED, nul_fields
from console.middleware import form_text_checked
from console.views.common import HtmxHttpRequest, SignedInRequest, console_login_required, domain_errors


def _live_response(request: HtmxHttpRequest, task_id: UUID, error: DomainError | None, done: str) -> HttpResponse:
    if not request.htmx:
        if error is not None:
            messages.error(request, error.message)
        else:
            messages.success(request, done)
        return redirect("console:task", task_id=task_id)
    ctx = page_context.task_live_context(request.user, task_id)
    ctx["handoff_error"] = error.message if error else ""
    ctx["handoff_done"] = "" if error else done
    return render(request, "console/partials/task_live.html", ctx, status=error.status if error else 200)


@require_POST
@console_login_required
@domain_errors
def task_reassign(request: SignedInRequest, task_id: UUID) -> HttpResponse:
    actor = request.user
    task = permissions.task_get_for(actor, task_id)
    permissions.require_reassign(actor, task)
    try:
        to_user_name = request.POST.get("to_user", "").strip()
        to_group_name = request.POST.get("to_group", "").strip()
        to_user = assignment.user_named(to_user_name, field="to_user") if to_user_name else None
        to_group = assignment.group_named(to_group_name, field="to_group") if to_group_name else None
        task = assignment.task_reassign(
            actor=actor,
            task=task,
            to_user=to_user,
            to_group=to_group,
            note=request.POST.get("note", ""),
        )
    except DomainError as exc:
        return _live_response(request, task_id, exc, "")
    return _live_response(request, task_id, None, f"Reassigned to {assignment.task_assignees(task).label}")


@require_POST
@console_login_required
@domain_errors
def task_delegate(request: SignedInRequest, task_id: UUID) -> HttpResponse:
    actor = request.user
    task = permissions.task_get_for(actor, task_id)
    permissions.require_decide(actor, task)
    try:
        name = request.POST.get("to_user", "").strip()
        if not name:
            raise InvalidInput("choose the colleague to delegate to", field="to_user")
        task = assignment.task_delegate(
            actor=actor,
            task=task,
            to_user=assignment.user_named(name, field="to_user"),
            note=request.POST.get("note", ""),
        )
    except DomainError as exc:
        return _live_response(request, task_id, exc, "")
    return _live_response(request, task_id, None, f"Delegated to {assignment.task_assignees(task).label}")


def _when(value: str, field: str) -> datetime | None:
    value = value.strip()
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput("give a date and time like 2026-12-24T09:00", field=field) from None
    aware = timezone.make_aware(parsed, timezone.get_current_timezone()) if timezone.is_naive(parsed) else parsed
    return instant_check(aware, field=field)


@form_text_checked  # a NUL byte in the note: refused on the page, not the API's JSON
@require_http_methods(["GET", "POST"])
@console_login_required
@domain_errors
def away(request: SignedInRequest) -> HttpResponse:
    """The reviewer's own out-of-office: a delegate, and optionally from/until."""
    actor = request.user
    permissions.require(actor, "approvals.decide_task", "set yourself away", why="you review nothing")
    error: DomainError | None = None
    if request.method == "POST":
        try:
            if refused := nul_fields(request.POST):  # refused on the page (form_text_checked), not as JSON
                raise InvalidInput(NUL_REFUSED, field=refused[0])
            if "clear" in request.POST:
                assignment.away_clear(actor=actor)
                messages.success(request, "You are no longer marked away.")
                return redirect("console:away")
            name = request.POST.get("delegate", "").strip()
            if not name:
                raise InvalidInput("choose the colleague who takes your new tasks", field="delegate")
            assignment.away_set(
                actor=actor,
                delegate=assignment.user_named(name, field="delegate"),
                starts_at=_when(request.POST.get("starts_at", ""), "starts_at"),
                ends_at=_when(request.POST.get("ends_at", ""), "ends_at"),
                note=request.POST.get("note", ""),
            )
            messages.success(request, "Out-of-office saved: new assignments go to your delegate.")
            return redirect("console:away")
        except DomainError as exc:
            error = exc
    ctx = {
        "nav": "away",
        "away": assignment.away_get(actor),
        "away_active": assignment.away_active(actor) is not None if isinstance(actor, User) else False,
        "colleagues": assignment.colleagues_for(actor),
        "error": error,
        "posted": request.POST if error else {},
    }
    return render(request, "console/away.html", ctx, status=error.status if error else 200)
