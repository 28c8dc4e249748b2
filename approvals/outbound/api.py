"""Outbound webhook API: subscriptions, their delivery log, and the manual retry of a delivery that gave up."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field

from approvals.inputs import DbId
from approvals.models import OutboundDelivery, WebhookSubscription
from approvals.outbound import sending, subscriptions
from approvals.permissions import token_needs

router = Router(tags=["webhooks"])


class SubscriptionIn(Schema):
    url: str = Field(max_length=500)
    graph: str = Field(default="*", max_length=100)
    event_types: list[Annotated[str, Field(max_length=32)]] = Field(max_length=20)
    secret: str | None = Field(default=None, max_length=200)


class SubscriptionOut(Schema):
    id: int
    # "events": the event types below; "callback": an external task's one result delivery (no event types).
    kind: Literal["events", "callback"]
    url: str
    graph: str
    event_types: list[str]
    active: bool
    deactivated_at: datetime | None = None
    secret: str | None = None  # only in the response that created it


class OutboundDeliveryOut(Schema):
    id: int
    subscription_id: int
    event_id: str
    event_type: str
    graph: str
    payload: dict[str, Any]
    status: str
    attempts: int
    last_error: str
    response_code: int | None
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None


class OutboundQuery(Schema):
    subscription: DbId | None = None
    status: str | None = Field(default=None, pattern="^(pending|delivered|failed)$")
    limit: int = Field(default=100, ge=1, le=500)


def _user(request: HttpRequest) -> Any:
    return request.auth  # type: ignore[attr-defined]


def _subscription_out(s: WebhookSubscription, *, with_secret: bool = False) -> SubscriptionOut:
    return SubscriptionOut(
        id=s.pk,
        kind=s.kind,
        url=s.url,
        graph=s.graph,
        event_types=s.event_types,
        active=s.active,
        deactivated_at=s.deactivated_at,
        secret=s.secret if with_secret else None,
    )


def _outbound_out(d: OutboundDelivery) -> OutboundDeliveryOut:
    return OutboundDeliveryOut.model_validate(d, from_attributes=True)


@router.get("/webhook-subscriptions", response=list[SubscriptionOut])
def webhook_subscriptions(request: HttpRequest) -> list[SubscriptionOut]:
    return [_subscription_out(s) for s in subscriptions.subscriptions_visible(_user(request)).order_by("id")]


@router.post("/webhook-subscriptions", response={201: SubscriptionOut})
@token_needs("runtime.retry_thread")
def webhook_subscription_create(request: HttpRequest, body: SubscriptionIn) -> Status[SubscriptionOut]:
    subscription = subscriptions.subscription_create(actor=_user(request), **body.model_dump())
    return Status(201, _subscription_out(subscription, with_secret=True))


@router.delete("/webhook-subscriptions/{subscription_id}", response={204: None})
@token_needs("runtime.retry_thread")
def webhook_subscription_deactivate(request: HttpRequest, subscription_id: DbId) -> Status[None]:
    """Stop sending to the subscription (operators, admins): its queued deliveries are given up and its
    secret destroyed; the subscription and its delivery log stay (``active: false``). Idempotent."""
    subscriptions.subscription_deactivate(actor=_user(request), subscription_id=subscription_id)
    return Status(204, None)


@router.get("/webhook-deliveries", response=list[OutboundDeliveryOut])
def webhook_outbound_deliveries(request: HttpRequest, query: Query[OutboundQuery]) -> list[OutboundDeliveryOut]:
    qs = subscriptions.deliveries_visible(_user(request))
    if query.subscription is not None:
        qs = qs.filter(subscription_id=query.subscription)
    if query.status:
        qs = qs.filter(status=query.status)
    return [_outbound_out(d) for d in qs.order_by("-created_at", "-id")[: query.limit]]


@router.post("/webhook-deliveries/{delivery_id}/retry", response={202: OutboundDeliveryOut})
@token_needs("runtime.retry_thread")
def webhook_delivery_retry(request: HttpRequest, delivery_id: DbId) -> Status[OutboundDeliveryOut]:
    return Status(202, _outbound_out(sending.delivery_retry(actor=_user(request), delivery_id=delivery_id)))
