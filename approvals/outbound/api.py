"""Outbound webhook API: subscriptions, their delivery log, and the manual retry of a delivery that gave up."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field

from approvals.api_common import params_unknown_refuse
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
    url: str  # the subscription's: where it was (or is being) sent
    event_id: str
    event_type: str
    graph: str
    # What it carries: the thread, the audit event that queued it, and the task / decision it is about.
    thread_id: UUID | None
    audit_event_id: int | None
    task_id: str | None
    decision_id: str | None
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
    thread: UUID | None = None
    graph: str | None = Field(default=None, max_length=100)
    event_type: str | None = Field(default=None, max_length=32)
    status: str | None = Field(default=None, pattern="^(pending|delivered|failed)$")
    limit: int = Field(default=100, ge=1, le=500)
    before_id: DbId | None = None


OUTBOUND_QUERY_PARAMS = frozenset(OutboundQuery.model_fields)


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
    payload: dict[str, Any] = d.payload if isinstance(d.payload, dict) else {}
    inner = payload.get("data")
    data: dict[str, Any] = inner if isinstance(inner, dict) else payload  # a callback's result: no "data"
    return OutboundDeliveryOut(
        id=d.pk,
        subscription_id=d.subscription_id,
        url=d.subscription.url,
        event_id=d.event_id,
        event_type=d.event_type,
        graph=d.graph,
        thread_id=d.thread_id,
        audit_event_id=d.audit_event_id,
        task_id=_text(data.get("task_id")),
        decision_id=_text(data.get("decision_id")),
        payload=payload,
        status=d.status,
        attempts=d.attempts,
        last_error=d.last_error,
        response_code=d.response_code,
        next_attempt_at=d.next_attempt_at,
        created_at=d.created_at,
        delivered_at=d.delivered_at,
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


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
    """The delivery log you may see, newest first: ``before_id=<the last id of a page>`` gives the next
    page (no gap, none twice). ``thread`` lists a thread's deliveries (its decisions' among them). An
    unknown parameter is a 422 naming it."""
    params_unknown_refuse(request, OUTBOUND_QUERY_PARAMS, what="the list")
    found = subscriptions.deliveries_list(user=_user(request), **query.model_dump())
    return [_outbound_out(d) for d in found]


@router.post("/webhook-deliveries/{delivery_id}/retry", response={202: OutboundDeliveryOut})
@token_needs("runtime.retry_thread")
def webhook_delivery_retry(request: HttpRequest, delivery_id: DbId) -> Status[OutboundDeliveryOut]:
    return Status(202, _outbound_out(sending.delivery_retry(actor=_user(request), delivery_id=delivery_id)))
