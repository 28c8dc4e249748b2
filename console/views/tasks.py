"""The task page, claiming, and deciding.

Deciding goes through ``console.services.task_decide_checked`` (``approvals.services.task_decide``
with this session's sign-in proof; it checks claims itself). Every refusal re-renders the decision
panel with the message next to the field it concerns; nothing is saved.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals import claims, permissions
from approvals.errors import Conflict, DomainError
from approvals.security import request_proof_at, session_proof_record
from console import page_context, services
from console.decision_panel import decision_request_parse
from console.views.common import HtmxHttpRequest, SignedInRequest, console_login_required, domain_errors


@require_GET
@console_login_required
@domain_errors
def task_detail(request: HtmxHttpRequest, task_id: UUID) -> HttpResponse:
    return render(request, "console/task.html", page_context.task_context(request.user, task_id))


@require_GET
@console_login_required
@domain_errors
def task_live(request: HtmxHttpRequest, task_id: UUID) -> HttpResponse:
    """The live panel alone (the websocket pushes the same fragment; this is its plain-HTTP twin)."""
    return render(request, "console/partials/task_live.html", page_context.task_live_context(request.user, task_id))


def _claim_response(request: HtmxHttpRequest, task_id: UUID, error: str = "", status: int = 200) -> HttpResponse:
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("console:task", task_id=task_id)
    ctx = page_context.task_live_context(request.user, task_id)
    ctx["claim_error"] = error
    return render(request, "console/partials/task_live.html", ctx, status=status)


@require_POST
@console_login_required
@domain_errors
def task_claim(request: SignedInRequest, task_id: UUID) -> HttpResponse:
    try:
        claims.task_claim(actor=request.user, task_id=task_id)
    except Conflict as exc:
        return _claim_response(request, task_id, exc.message, exc.status)
    return _claim_response(request, task_id)


@require_POST
@console_login_required
@domain_errors
def task_release(request: SignedInRequest, task_id: UUID) -> HttpResponse:
    claims.task_release(actor=request.user, task_id=task_id)
    return _claim_response(request, task_id)


@require_POST
@console_login_required
@domain_errors
def task_decide(request: HtmxHttpRequest, task_id: UUID) -> HttpResponse:
    task = permissions.task_get_for(request.user, task_id)
    # Refuse before parsing: an auditor must not even learn how the form would validate.
    permissions.require_decide(request.user, task)
    ctx = page_context.task_context(request.user, task_id)
    form = ctx["form"]
    decision_request = decision_request_parse(form, request.POST)
    status = 422
    stale: dict[str, Any] | None = None
    # A mask sent back where the reviewer saw one keeps the hidden value; anywhere else it is refused,
    # naming the field (services: state edits keep what their author cannot see).
    if decision_request is not None:
        try:
            decision = services.task_decide_checked(
                actor=cast(User, request.user),  # @login_required
                task_id=task_id,
                request=decision_request,
                authenticated_at=request_proof_at(request),
                password=request.POST.get("password", ""),
            )
            session_proof_record(request, decision.reauthenticated_at)
        except DomainError as exc:
            status = exc.status
            if isinstance(exc, Conflict) and exc.field == "checkpoint_id":
                stale = {"message": exc.message, "seen": decision_request.checkpoint_id}
            else:
                form.attach(exc.field, exc.message)
        else:
            if not request.htmx:
                messages.success(request, f"Decision recorded: {decision.get_outcome_display()}")
                return redirect("console:task", task_id=task_id)
            done = page_context.task_live_context(request.user, task_id)
            done["decision"] = done["my_decision"] or decision
            return render(request, "console/partials/decision_done.html", done, status=201)
    ctx.update({"form": form, "stale": stale})
    template = "console/partials/decision_form.html" if request.htmx else "console/task.html"
    return render(request, template, ctx, status=status)
