"""Webhooks for operators and admins (auditors read only): inbound endpoints with their recent deliveries
and the gates each may decide, outbound subscriptions with their delivery log, a manual retry for a
delivery that gave up, and subscribing or deactivating a subscription. The outbound delivery log pages
back through every delivery and filters by thread, status and subscription; each row links its thread.
Admins create, rotate, re-scope and delete inbound endpoints here.

Reads go through ``approvals.inbound.webhooks`` / ``approvals.outbound.subscriptions`` visibility helpers; secrets are
never rendered (only how many an endpoint holds), nor are delivery payloads, except a new secret in
the one response that created it (not cached, never put in a message or the session).
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_POST

from approvals import permissions
from approvals.errors import DomainError, Forbidden, InvalidInput, NotFound
from approvals.inbound import webhooks
from approvals.inputs import INT64_MAX
from approvals.outbound import sending
from approvals.outbound.outbox import EVENT_TYPES
from approvals.outbound.subscriptions import (
    deliveries_list,
    deliveries_visible,
    subscription_create,
    subscription_deactivate,
    subscription_graph_choices,
    subscriptions_visible,
)
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors, error_page

RECENT = 20
# The delivery log's page (``before`` pages on, as the API's ``before_id``).
LOG_PAGE = 50
LOG_STATUSES = ("pending", "delivered", "failed")


def _require_view(user: Any) -> None:
    if not (permissions.can(user, "runtime.retry_thread") or permissions.can(user, "approvals.view_audit")):
        raise Forbidden("you may not view webhooks")


def _can_retry(user: Any) -> bool:
    return permissions.can(user, "runtime.retry_thread")


def _can_manage(user: Any) -> bool:
    return permissions.can(user, "approvals.manage_webhooks")


def _page(request: HtmxHttpRequest, *, status: int = 200, **extra: Any) -> HttpResponse:
    user = request.user
    _require_view(user)
    endpoints = [
        (endpoint, webhooks.deliveries_for(user=user, name=endpoint.name, limit=RECENT))
        for endpoint in webhooks.endpoints_visible(user).order_by("name")
    ]
    log = deliveries_visible(user)
    subscriptions = [
        (subscription, list(log.filter(subscription=subscription).order_by("-created_at", "-id")[:RECENT]))
        for subscription in subscriptions_visible(user).order_by("created_at", "id")
    ]
    can_manage = _can_manage(user)
    graphs = webhooks.endpoint_graph_choices(user)
    wanted = _log_filter(request)
    found = deliveries_list(user=user, **wanted, limit=LOG_PAGE + 1)
    context = {
        "log": found[:LOG_PAGE],
        "log_filter": wanted,
        "log_older": found[LOG_PAGE - 1].pk if len(found) > LOG_PAGE else None,
        "log_statuses": LOG_STATUSES,
        "endpoints": endpoints,
        "subscriptions": subscriptions,
        "can_retry": _can_retry(user),
        "can_manage": can_manage,
        "graphs": graphs,
        "subscribe_graphs": subscription_graph_choices(user),
        "event_types": EVENT_TYPES,
        "nav": "webhooks",
        "data": {},
        **extra,
    }
    response = render(request, "console/webhooks.html", context, status=status)
    if "revealed" in extra:
        add_never_cache_headers(response)
    return response


def _log_filter(request: HtmxHttpRequest) -> dict[str, Any]:
    """The delivery log's filter from the query (thread, status, subscription, before); a bad value is a
    422 naming it, never the whole log shown as if it were the answer."""
    wanted: dict[str, Any] = {}
    thread = request.GET.get("thread", "").strip()
    if thread:
        try:
            wanted["thread"] = UUID(thread)
        except ValueError:
            raise InvalidInput("a thread id (UUID)", field="thread") from None
    status = request.GET.get("status", "")
    if status:
        if status not in LOG_STATUSES:
            raise InvalidInput(f"one of {', '.join(LOG_STATUSES)}", field="status")
        wanted["status"] = status
    for name, key in (("subscription", "subscription"), ("before", "before_id")):
        raw = request.GET.get(name, "").strip()
        if raw:
            if not raw.isdigit() or int(raw) > INT64_MAX:
                raise InvalidInput("a positive id", field=name)
            wanted[key] = int(raw)
    return wanted


@require_GET
@console_login_required
@domain_errors
def webhook_list(request: HtmxHttpRequest) -> HttpResponse:
    return _page(request)


def _actor(request: HtmxHttpRequest) -> User:
    return cast(User, request.user)  # @console_login_required


def _gates_posted(request: HtmxHttpRequest) -> list[str]:
    """Gates as checkboxes (several ``gates``) or one comma-separated field."""
    return [g.strip() for raw in request.POST.getlist("gates") for g in raw.split(",") if g.strip()]


@require_POST
@console_login_required
@domain_errors
def endpoint_create(request: HtmxHttpRequest) -> HttpResponse:
    _require_view(request.user)
    if not _can_manage(request.user):
        raise Forbidden("you may not manage inbound webhook endpoints")
    data = {"name": request.POST.get("name", "").strip(), "graph": request.POST.get("graph", "")}
    try:
        endpoint = webhooks.webhook_endpoint_create(
            actor=_actor(request),
            name=data["name"],
            graph=data["graph"],
            gates=_gates_posted(request),
        )
    except DomainError as exc:
        form_error = {"field": exc.field, "message": exc.message}
        return _page(
            request, status=exc.status, create_error=form_error, data={**data, "gates": _gates_posted(request)}
        )
    return _page(request, status=201, revealed={"endpoint": endpoint.name, "secret": endpoint.secrets[0]})


def _endpoint_name(request: HtmxHttpRequest, endpoint_id: int) -> str:
    """The name of endpoint ``endpoint_id`` if the user may see it. The forms name an endpoint by its id:
    a name written before names were checked (a space, a slash) is no URL path segment, and its row made
    the whole page fail to render, leaving no way to delete it."""
    endpoint = None
    if endpoint_id <= INT64_MAX:
        endpoint = webhooks.endpoints_visible(request.user).filter(pk=endpoint_id).first()
    if endpoint is None:
        raise NotFound(f"webhook endpoint {endpoint_id} not found", field="endpoint_id")
    return endpoint.name


@require_POST
@console_login_required
@domain_errors
def endpoint_rotate(request: HtmxHttpRequest, endpoint_id: int) -> HttpResponse:
    name = _endpoint_name(request, endpoint_id)
    # A hidden "0" precedes the checkbox's "1": the last value sent wins.
    keep = request.POST.get("keep_previous", "1") == "1"
    endpoint, secret = webhooks.webhook_endpoint_rotate(actor=_actor(request), name=name, keep_previous=keep)
    return _page(request, revealed={"endpoint": endpoint.name, "secret": secret, "rotated": True})


@require_POST
@console_login_required
@domain_errors
def endpoint_gates(request: HtmxHttpRequest, endpoint_id: int) -> HttpResponse:
    name = _endpoint_name(request, endpoint_id)
    try:
        webhooks.webhook_endpoint_gates_set(actor=_actor(request), name=name, gates=_gates_posted(request))
    except DomainError as exc:
        if exc.status != 422:
            raise
        return _page(request, status=422, gates_error={"endpoint": endpoint_id, "message": exc.message})
    messages.success(request, f"Endpoint {name} may now decide: {', '.join(_gates_posted(request))}")
    return redirect("console:webhooks")


@require_POST
@console_login_required
@domain_errors
def endpoint_delete(request: HtmxHttpRequest, endpoint_id: int) -> HttpResponse:
    name = _endpoint_name(request, endpoint_id)
    webhooks.webhook_endpoint_delete(actor=_actor(request), name=name)
    messages.success(request, f"Endpoint {name} deleted: its secrets are destroyed and it decides nothing")
    return redirect("console:webhooks")


@require_POST
@console_login_required
@domain_errors
def subscription_new(request: HtmxHttpRequest) -> HttpResponse:
    """Subscribe a URL to events of a graph; the signing secret is shown in this response only."""
    _require_view(request.user)
    url, graph = request.POST.get("url", "").strip(), request.POST.get("graph", "")
    event_types = request.POST.getlist("event_types")
    try:
        subscription = subscription_create(actor=_actor(request), url=url, graph=graph, event_types=event_types)
    except DomainError as exc:
        form_error = {"field": exc.field, "message": exc.message}
        typed = {"url": url, "graph": graph, "event_types": event_types}
        return _page(request, status=exc.status, subscribe_error=form_error, subscribe_data=typed)
    return _page(request, status=201, revealed={"subscription": subscription.url, "secret": subscription.secret})


@require_POST
@console_login_required
@domain_errors
def subscription_stop(request: HtmxHttpRequest, subscription_id: int) -> HttpResponse:
    subscription, stopped = subscription_deactivate(actor=_actor(request), subscription_id=subscription_id)
    given_up = f"; {stopped} queued deliver{'y' if stopped == 1 else 'ies'} given up" if stopped else ""
    messages.success(request, f"Subscription to {subscription.url} deactivated: nothing more is sent to it{given_up}")
    return redirect("console:webhooks")


@require_POST
@console_login_required
@domain_errors
def delivery_retry(request: HtmxHttpRequest, delivery_id: int) -> HttpResponse:
    user = request.user
    htmx = bool(request.htmx)
    refused: DomainError | None = None
    try:
        sending.delivery_retry(actor=user, delivery_id=delivery_id)
    except DomainError as exc:
        if not htmx:
            raise
        refused = exc
    if not htmx:
        messages.success(request, "Retry queued: one more attempt now")
        return redirect("console:webhooks")
    delivery = deliveries_visible(user).filter(pk=delivery_id).first()
    if delivery is None:  # not visible to this user: the refusal says so without showing the row
        return error_page(request, refused or NotFound(f"webhook delivery {delivery_id} not found"))
    # The row re-rendered in place: "pending" with the retry queued, or unchanged with the refusal beside it.
    return render(
        request,
        "console/webhooks_delivery_row.html",
        {
            "d": delivery,
            # The same row is in its subscription's table and in the delivery log: the log's ids are prefixed.
            "row_id": "log-" if request.POST.get("row") == "log-" else "",
            "can_retry": _can_retry(user),
            "row_error": refused.message if refused else "",
        },
        status=refused.status if refused else 200,
    )
