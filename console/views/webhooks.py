"""Webhooks for operators and admins (auditors read only): inbound endpoints with their recent deliveries,
outbound subscriptions with their delivery log, and a manual retry for a delivery that gave up.

Reads go through ``approvals.webhooks`` / ``approvals.outbound`` visibility helpers; secrets are
never rendered (only how many an endpoint holds), nor are delivery payloads.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals import outbound, permissions, webhooks
from approvals.errors import DomainError, Forbidden, NotFound
from console.views.common import console_login_required, domain_errors, error_page

RECENT = 20


def _require_view(user: Any) -> None:
    if not (permissions.can(user, "runtime.retry_thread") or permissions.can(user, "approvals.view_audit")):
        raise Forbidden("you may not view webhooks")


def _can_retry(user: Any) -> bool:
    return permissions.can(user, "runtime.retry_thread")


@require_GET
@console_login_required
@domain_errors
def webhook_list(request: HttpRequest) -> HttpResponse:
    user = request.user
    _require_view(user)
    endpoints = [
        (endpoint, webhooks.deliveries_for(user=user, name=endpoint.name, limit=RECENT))
        for endpoint in webhooks.endpoints_visible(user).order_by("name")
    ]
    log = outbound.deliveries_visible(user)
    subscriptions = [
        (subscription, list(log.filter(subscription=subscription).order_by("-created_at", "-id")[:RECENT]))
        for subscription in outbound.subscriptions_visible(user).order_by("created_at", "id")
    ]
    return render(
        request,
        "console/webhooks.html",
        {
            "endpoints": endpoints,
            "subscriptions": subscriptions,
            "can_retry": _can_retry(user),
            "nav": "webhooks",
        },
    )


@require_POST
@console_login_required
@domain_errors
def delivery_retry(request: HttpRequest, delivery_id: int) -> HttpResponse:
    user = request.user
    htmx = getattr(request, "htmx", False)
    refused: DomainError | None = None
    try:
        outbound.delivery_retry(actor=user, delivery_id=delivery_id)
    except DomainError as exc:
        if not htmx:
            raise
        refused = exc
    if not htmx:
        messages.success(request, "Retry queued: one more attempt now")
        return redirect("console:webhooks")
    delivery = outbound.deliveries_visible(user).filter(pk=delivery_id).first()
    if delivery is None:  # not visible to this user: the refusal says so without showing the row
        return error_page(request, refused or NotFound(f"webhook delivery {delivery_id} not found"))
    # The row re-rendered in place: "pending" with the retry queued, or unchanged with the refusal beside it.
    return render(
        request,
        "console/webhooks_delivery_row.html",
        {
            "d": delivery,
            "can_retry": _can_retry(user),
            "row_error": refused.message if refused else "",
        },
        status=refused.status if refused else 200,
    )
