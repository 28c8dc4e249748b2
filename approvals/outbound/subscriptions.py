"""Outbound webhook subscriptions: who is sent which events, and who may see them and their deliveries."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from approvals import permissions
from approvals.audit import audit_record
from approvals.errors import InvalidInput, NotFound
from approvals.models import AuditAction, OutboundDelivery, OutboundStatus, WebhookSubscription
from approvals.outbound.destinations import destination_check
from approvals.outbound.outbox import EVENT_TYPES
from approvals.outbound.signing import secret_check, secret_generate
from runtime.registry import graph_names

URL_MAX = WebhookSubscription._meta.get_field("url").max_length or 500


def subscription_graph_choices(user: Any) -> list[str]:
    """The graphs ``user`` may subscribe to, as ``subscription_create`` takes them: every graph ("*") first
    for a reader of every graph, then each graph they see."""
    every = ["*"] if permissions.graphs_visible(user) is None else []
    return every + permissions.graph_names_visible(user)


def subscription_create(
    *, actor: Any, url: str, graph: str = "*", event_types: list[str], secret: str | None = None
) -> WebhookSubscription:
    if actor is not None:
        permissions.require(actor, "runtime.retry_thread", "manage webhooks")
    if graph != "*" and graph not in graph_names():
        raise InvalidInput(f"unknown graph {graph!r}", field="graph")
    if actor is not None:
        if graph != "*" and not permissions.graph_visible(actor, graph):
            raise NotFound(f"graph {graph!r} not found", field="graph")
        if graph == "*" and permissions.graphs_visible(actor) is not None:
            raise InvalidInput("only principals who see every graph may subscribe to all of them", field="graph")
    if len(url) > URL_MAX:
        raise InvalidInput(f"a URL of at most {URL_MAX} characters", field="url")
    unknown = [e for e in event_types if e not in EVENT_TYPES]
    if unknown or not event_types:
        raise InvalidInput(f"event types must be among {', '.join(EVENT_TYPES)}", field="event_types")
    checked_secret = secret_check(secret) if secret else secret_generate()
    destination_check(url)  # resolves the host: before the transaction, not while holding it
    with transaction.atomic():
        subscription = WebhookSubscription.objects.create(
            url=url,
            graph=graph,
            event_types=list(dict.fromkeys(event_types)),
            secret=checked_secret,
            created_by=actor,
        )
        _subscription_audit(actor, subscription, AuditAction.WEBHOOK_SUBSCRIPTION_CREATED)
    return subscription


def _subscription_audit(actor: Any, subscription: WebhookSubscription, action: str, **details: Any) -> None:
    audit_record(
        actor=actor,
        actor_label=None if actor else "manage.py",
        action=action,
        subject_type="subscription",
        subject_id=subscription.pk,
        graph="" if subscription.graph == "*" else subscription.graph,
        details={
            "url": subscription.url,
            "graph": subscription.graph,
            "event_types": subscription.event_types,
            **details,
        },
    )


# What a delivery given up by a deactivation says in the log (``last_error``).
DEACTIVATED = "subscription deactivated"


def subscription_deactivate(*, actor: Any, subscription_id: int) -> tuple[WebhookSubscription, int]:
    """Stop sending to a subscription: (the subscription, how many queued deliveries were given up).

    From the commit on, no event is queued for it (the outbox reads active subscriptions only, and the
    trigger of migration 0024 tells every process that its list is stale), its queued deliveries are
    given up (``failed``, "subscription deactivated"), and none is sent or retried again (an attempt
    already under way is the last). That holds for an external task's callback too (a subscription that
    names no event: its result delivery is given up). The secret is destroyed; the row and its delivery
    log stay as evidence. Deactivating it again changes nothing and records nothing.
    """
    if actor is not None:
        permissions.require(actor, "runtime.retry_thread", "manage webhooks")
    visible = WebhookSubscription.objects.all() if actor is None else subscriptions_visible(actor)
    with transaction.atomic():
        subscription = visible.select_for_update().filter(pk=subscription_id).first()
        if subscription is None:
            raise NotFound(f"webhook subscription {subscription_id} not found", field="subscription_id")
        if subscription.deactivated_at is not None:
            return subscription, 0
        subscription.active, subscription.secret, subscription.deactivated_at = False, "", timezone.now()
        subscription.save(update_fields=["active", "secret", "deactivated_at"])
        stopped = deliveries_stop(subscription.pk)
        _subscription_audit(
            actor, subscription, AuditAction.WEBHOOK_SUBSCRIPTION_DEACTIVATED, deliveries_given_up=stopped
        )
    return subscription, stopped


def deliveries_stop(subscription_id: int) -> int:
    """Give up the subscription's queued deliveries (it was deactivated); how many."""
    return OutboundDelivery.objects.filter(subscription_id=subscription_id, status=OutboundStatus.PENDING).update(
        status=OutboundStatus.FAILED, next_attempt_at=None, last_error=DEACTIVATED
    )


def subscriptions_visible(user: Any) -> Any:
    if not (permissions.can(user, "runtime.retry_thread") or permissions.can(user, "approvals.view_audit")):
        return WebhookSubscription.objects.none()
    visible = permissions.graphs_visible(user)
    qs = WebhookSubscription.objects.all()
    return qs if visible is None else qs.filter(graph__in=visible)


def deliveries_visible(user: Any) -> QuerySet[OutboundDelivery]:
    return OutboundDelivery.objects.filter(subscription__in=subscriptions_visible(user))


def deliveries_list(
    *,
    user: Any,
    subscription: int | None = None,
    thread: UUID | None = None,
    graph: str | None = None,
    event_type: str | None = None,
    status: str | None = None,
    before_id: int | None = None,
    limit: int = 100,
) -> list[OutboundDelivery]:
    """The deliveries ``user`` may see, newest (highest id) first; ``before_id`` pages on without a gap
    (the next page is the ids below the last one seen, as ``GET /api/audit`` pages)."""
    qs = deliveries_visible(user)
    if subscription is not None:
        qs = qs.filter(subscription_id=subscription)
    if thread is not None:
        qs = qs.filter(thread_id=thread)
    if graph:
        qs = qs.filter(graph=graph)
    if event_type:
        qs = qs.filter(event_type=event_type)
    if status:
        qs = qs.filter(status=status)
    if before_id is not None:
        qs = qs.filter(id__lt=before_id)
    return list(qs.select_related("subscription").order_by("-id")[:limit])
