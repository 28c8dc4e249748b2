"""The inbox: pending approval tasks the user may see, filtered, searched, sorted, paged."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals import permissions
from approvals.errors import Forbidden
from console import page_context
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors


@require_GET
@console_login_required
@domain_errors
def inbox(request: HtmxHttpRequest) -> HttpResponse:
    if not permissions.can(request.user, "approvals.view_approvaltask"):
        raise Forbidden("your account has no role in Gatehouse yet; ask an admin to assign one")
    ctx = page_context.inbox_context(request.user, request.GET)
    # The filter form targets the results only (with the live socket on the filters applied, out of band);
    # a full page for everything else.
    if request.htmx and request.htmx.target == "inbox-results":
        return render(request, "console/partials/inbox_answer.html", ctx)
    return render(request, "console/inbox.html", ctx)
