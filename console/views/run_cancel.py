"""Console: cancel a thread's queued or running run, with a reason (``approvals.run_cancel``)."""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from approvals.run_cancel import run_cancel
from console import page_context
from console.views.common import SignedInRequest, console_login_required, domain_errors


@require_POST
@console_login_required
@domain_errors
def thread_run_cancel(request: SignedInRequest, thread_id: UUID) -> HttpResponse:
    run = run_cancel(
        actor=request.user,
        thread_id=thread_id,
        run_id=None,
        action=request.POST.get("action", "interrupt"),
        reason=request.POST.get("reason", "").strip(),
        via="console",
        reason_required=True,
    )
    if request.htmx:
        ctx = page_context.thread_live_context(request.user, thread_id)
        return render(request, "console/partials/thread_live.html", ctx)
    messages.success(request, f"Run {run.get_status_display().lower()}: {run.error}")
    return redirect("console:thread", thread_id=thread_id)
