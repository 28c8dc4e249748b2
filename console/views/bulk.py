"""Bulk decisions from the inbox: start one (checked rows, or all tasks matching the inbox's filter), follow it live.

Translation only: ``approvals.bulk`` decides, each task through ``services.task_decide``.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django.contrib.auth.models import User
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from approvals import bulk, permissions, services
from approvals.errors import DomainError
from approvals.inbox_filter import SELECTION_FIELDS
from approvals.security import request_proof_at, session_proof_record
from console import page_context
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors


@require_POST
@console_login_required
@domain_errors
def bulk_start(request: HtmxHttpRequest) -> HttpResponse:
    user = cast(User, request.user)  # @console_login_required
    permissions.require(user, "approvals.decide_task", "decide approval tasks")
    post = request.POST
    task_ids: list[str] | None = None
    filter_: dict[str, Any] | None = None
    seen: str | None = None
    if post.get("all_matching") == "1":
        seen = post.get("all_matching_seen", "")  # the set the page counted (a page without it: refused)
        # The inbox's own filter fields, as the inbox page sent them (its column filters are "c.<key>").
        filter_ = {key: post.get(key, "") for key in SELECTION_FIELDS}
        filter_["columns"] = {k[2:]: v for k, v in post.items() if k.startswith("c.") and v}
    else:
        task_ids = post.getlist("task_ids")
    signer = services.Signer(
        authenticated_at=request_proof_at(request), password=post.get("password") or None, via="session"
    )
    try:
        action = bulk.bulk_decide(
            actor=user,
            outcome=post.get("outcome", ""),
            reason=post.get("reason", ""),
            task_ids=task_ids,
            filter=filter_,
            signer=signer,
            seen=seen,
        )
    except DomainError as exc:
        ctx = {"error": exc.message, "error_field": exc.field, "reason": post.get("reason", "")}
        template = "console/partials/bulk_form_error.html"
        return render(request, template, ctx, status=exc.status)
    session_proof_record(request, action.reauthenticated_at)
    url = reverse("console:bulk", kwargs={"bulk_id": action.pk})
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@require_GET
@console_login_required
@domain_errors
def bulk_detail(request: HtmxHttpRequest, bulk_id: UUID) -> HttpResponse:
    return render(request, "console/bulk.html", page_context.bulk_context(request.user, bulk_id))
