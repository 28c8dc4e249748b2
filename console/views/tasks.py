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
from django.http import HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from approvals import claims, permissions
from approvals.errors import Conflict, DomainError
from approvals.security import request_proof_at, session_proof_record
from console import page_context, services
from console.decision_panel import decision_request_parse
from console.middleware import form_text_checked
from console.views.common import HtmxHttpRequest, SignedInRequest, console_login_required, domain_errors


@require_GET
@console_login_required
@domain_errors
def task_detail(request: HtmxHttpRequest, task_id: UUID) -> HttpResponse:
    ctx = page_context.task_context(request.user, task_id)
    kept = request.session.pop(_refused_key(task_id), None)
    if isinstance(kept, dict):  # a submit without JavaScript was refused (task_decide): shown once, with what was typed
        form = ctx["form"]
        decision_request_parse(form, _query(kept.get("data") or {}))  # re-shows typed values in their inputs
        form.errors.clear()
        form.errors.update(kept.get("errors") or {})
        ctx.update({"stale": kept.get("stale"), "refused": True})
        # Typed values kept: so is the evidence they were typed against (a stale view keeps neither).
        ctx["evidence_digest"] = (kept.get("data") or {}).get("evidence_digest") or ctx["evidence_digest"]
    return render(request, "console/task.html", ctx)


# What a refused submit keeps for the page it is sent back to: never a password (nor the form's token).
_NOT_KEPT = frozenset({"password", "otp", "csrfmiddlewaretoken"})
# A stale view's typed values were for a state that has moved on: only the words are kept.
_KEPT_WHEN_STALE = frozenset({"reason", "message"})


def _refused_key(task_id: UUID) -> str:
    return f"console:decision-refused:{task_id}"


def _query(data: dict[str, str]) -> QueryDict:
    query = QueryDict(mutable=True)
    for key, value in data.items():
        query[key] = value
    return query


def _refused_plain(
    request: HtmxHttpRequest, task_id: UUID, data: dict[str, str], errors: dict[str, str], stale: dict[str, Any] | None
) -> HttpResponse:
    """A refused submit without JavaScript goes back to the task page (303), which says the decision was not
    recorded and why, with what was typed: rendered at .../decide it lost the reason once the task had closed,
    and a reload posted it again."""
    kept = {k: v for k, v in data.items() if k not in _NOT_KEPT and (stale is None or k in _KEPT_WHEN_STALE)}
    request.session[_refused_key(task_id)] = {
        "data": kept,
        "errors": errors,
        "stale": None if stale is None else {**stale, "fresh": True},
    }
    return HttpResponseRedirect(reverse("console:task", kwargs={"task_id": task_id}) + "#decision-panel", status=303)


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


@form_text_checked  # a NUL byte in a field: refused next to it (decision_request_parse), not the API's JSON
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
            elif isinstance(exc, Conflict) and exc.field == "evidence_digest":
                # A proposal made since the page was rendered (its history is not shown in this panel).
                stale = {"message": exc.message, "seen": decision_request.checkpoint_id, "proposal": True}
            else:
                form.attach(exc.field, exc.message)
        else:
            if not request.htmx:
                messages.success(request, f"Decision recorded: {decision.outcome_shown}")
                return HttpResponseRedirect(reverse("console:task", kwargs={"task_id": task_id}), status=303)
            done = page_context.task_live_context(request.user, task_id)
            done["decision"] = done["my_decision"] or decision
            return render(request, "console/partials/decision_done.html", done, status=201)
    if not request.htmx:
        return _refused_plain(request, task_id, form.data, form.errors, stale)
    ctx.update({"form": form, "stale": stale, "refused": True})
    # The re-rendered form posts the evidence its page showed, not the task's now: a proposal made since
    # (shown nowhere in this panel) refuses the next submit too, until the task is reloaded.
    ctx["evidence_digest"] = request.POST.get("evidence_digest") or ctx["evidence_digest"]
    return render(request, "console/partials/decision_form.html", ctx, status=status)
