"""The team dashboard page (leads, auditors, admins): charts and numbers, each linked to its list."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console import page_context
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors


@require_GET
@console_login_required
@domain_errors
def dashboard_page(request: HtmxHttpRequest) -> HttpResponse:
    # The same context its live socket re-renders (console.consumers.DashboardConsumer).
    ctx = page_context.dashboard_page_context(request.user, request.GET)
    # A refused filter: the page still renders its form, with the message next to the field.
    error = ctx.get("error")
    return render(request, "console/dashboard.html", ctx, status=error.status if error else 200)
