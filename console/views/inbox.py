"""The inbox: pending approval tasks the user may see, filtered, searched, sorted, paged."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals.errors import Forbidden
from console import pages
from console.views.common import console_login_required, domain_errors


@require_GET
@console_login_required
@domain_errors
def inbox(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm("approvals.view_approvaltask"):
        raise Forbidden("your account has no role in Gatehouse yet; ask an admin to assign one")
    ctx = pages.inbox_context(request.user, request.GET)
    # The filter form targets the results only; a full page for everything else.
    if getattr(request, "htmx", False) and request.htmx.target == "inbox-results":  # type: ignore[attr-defined]
        return render(request, "console/partials/inbox_results.html", ctx)
    return render(request, "console/inbox.html", ctx)
