"""Threads: a list for operators, and one thread's status, state at any checkpoint and timeline."""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals import permissions, services, store
from approvals.errors import Forbidden
from console import page_context
from console.views.common import HtmxHttpRequest, SignedInRequest, console_login_required, domain_errors
from lgplatform import crons


@require_GET
@console_login_required
@domain_errors
def thread_list(request: HtmxHttpRequest) -> HttpResponse:
    if not permissions.can(request.user, "runtime.view_thread"):
        raise Forbidden("your account has no role in Gatehouse yet; ask an admin to assign one")
    return render(request, "console/threads.html", page_context.threads_context(request.user, request.GET))


@require_GET
@console_login_required
@domain_errors
def thread_detail(request: HtmxHttpRequest, thread_id: UUID) -> HttpResponse:
    checkpoint = request.GET.get("checkpoint", "")[:64]
    ctx = page_context.thread_context(request.user, thread_id, checkpoint)
    if request.htmx and request.htmx.target == "checkpoint-view":
        return render(request, "console/partials/checkpoint.html", ctx)
    # Long-term memory: what this thread's runs read and wrote (approvals.store).
    ctx["store_operations"] = store.store_operations_visible(user=request.user, thread=ctx["thread"])
    ctx["crons"] = crons.thread_crons(request.user, ctx["thread"])  # runs a schedule will start here
    # Where the rest of its record is, for those who may read it (an examiner rebuilding a decision):
    # the thread's audit trail, and the webhook deliveries it caused (as the Webhooks page allows).
    audits = permissions.can(request.user, "approvals.view_audit")
    ctx["links_audit"] = audits
    ctx["links_deliveries"] = audits or permissions.can(request.user, "runtime.retry_thread")
    return render(request, "console/thread.html", ctx)


@require_GET
@console_login_required
@domain_errors
def thread_live(request: HtmxHttpRequest, thread_id: UUID) -> HttpResponse:
    return render(
        request, "console/partials/thread_live.html", page_context.thread_live_context(request.user, thread_id)
    )


@require_POST
@console_login_required
@domain_errors
def thread_retry(request: SignedInRequest, thread_id: UUID) -> HttpResponse:
    services.thread_retry(actor=request.user, thread_id=thread_id)
    messages.success(request, "Retry queued: the thread goes on from its last checkpoint")
    return redirect("console:thread", thread_id=thread_id)
