"""Inbound webhook API: the signed receiver ``/api/webhooks/{name}``, endpoint registration, delivery logs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema, Status
from pydantic import Field

from approvals.inbound import webhooks
from approvals.models import InboundDelivery, WebhookEndpoint
from approvals.permissions import token_needs
from approvals.schemas import BodyIn

router = Router(tags=["webhooks"])


class EndpointIn(BodyIn):
    # The domain's rule (webhook_endpoint_create checks it too, for the console and the command line).
    name: str = Field(pattern=webhooks.NAME_PATTERN, max_length=webhooks.NAME_MAX_LENGTH)
    graph: str = Field(max_length=100)
    # the gates (node names of graph) this endpoint may decide; nothing else
    gates: list[Annotated[str, Field(max_length=200)]] = Field(max_length=100)
    secrets: list[Annotated[str, Field(max_length=200)]] | None = Field(default=None, max_length=10)
    correlation_path: str = Field(default="correlation_key", max_length=200)
    decision_map: dict[str, Any] | None = None
    reason_path: str = Field(default="reason", max_length=200)
    timestamp_path: str = Field(default="", max_length=200)


class EndpointGatesIn(BodyIn):
    gates: list[Annotated[str, Field(max_length=200)]] = Field(max_length=100)


class EndpointRotateIn(BodyIn):
    keep_previous: bool = True  # the newest old secret keeps verifying until the next rotation


class EndpointOut(Schema):
    name: str
    graph: str
    gates: list[str]
    principal: str
    correlation_path: str
    decision_map: dict[str, Any]
    reason_path: str
    timestamp_path: str
    active: bool
    url: str
    secrets: list[str] | None = None  # only in the response that created the endpoint or rotated its secret


class InboundDeliveryOut(Schema):
    id: int
    webhook_id: str
    received_at: datetime
    status: str
    http_status: int
    verified: bool
    reason: str
    body_digest: str
    correlation_key: str
    event_at: datetime | None
    outcome: str
    task_id: str | None
    decision_id: str | None


class DeliveryQuery(Schema):
    limit: int = Field(default=100, ge=1, le=500)


def _user(request: HttpRequest) -> Any:
    return request.auth  # type: ignore[attr-defined]


def _endpoint_out(endpoint: WebhookEndpoint, *, with_secrets: bool = False) -> EndpointOut:
    return EndpointOut(
        name=endpoint.name,
        graph=endpoint.graph,
        gates=list(endpoint.gates),
        principal=f"webhook:{endpoint.name}",
        correlation_path=endpoint.correlation_path,
        decision_map=endpoint.decision_map,
        reason_path=endpoint.reason_path,
        timestamp_path=endpoint.timestamp_path,
        active=endpoint.active,
        url=f"/api/webhooks/{endpoint.name}",
        secrets=list(endpoint.secrets) if with_secrets else None,
    )


def _inbound_out(d: InboundDelivery) -> InboundDeliveryOut:
    return InboundDeliveryOut(
        id=d.pk,
        webhook_id=d.webhook_id,
        received_at=d.received_at,
        status=d.status,
        http_status=d.http_status,
        verified=d.verified,
        reason=d.reason,
        body_digest=d.body_digest,
        correlation_key=d.correlation_key,
        event_at=d.event_at,
        outcome=d.outcome,
        task_id=str(d.task_id) if d.task_id else None,
        decision_id=str(d.decision_id) if d.decision_id else None,
    )


@router.post("/webhooks/{name}", auth=None, response={202: dict, 401: dict, 404: dict, 409: dict, 422: dict})
def webhook_receive(request: HttpRequest, name: str) -> HttpResponse:
    """A Standard Webhooks delivery (webhook-id / webhook-timestamp / webhook-signature headers).

    The signature is the authentication. A repeated webhook-id with the same body gets the first response
    again, byte for byte; with another body, a 409.
    """
    outcome = webhooks.delivery_receive(name=name, raw=request.body, headers=dict(request.headers))
    return HttpResponse(outcome.content(), status=outcome.http_status, content_type="application/json")


@router.get("/webhooks/{name}/deliveries", response=list[InboundDeliveryOut])
def webhook_deliveries(request: HttpRequest, name: str, query: Query[DeliveryQuery]) -> list[InboundDeliveryOut]:
    return [_inbound_out(d) for d in webhooks.deliveries_for(user=_user(request), name=name, limit=query.limit)]


@router.get("/webhook-endpoints", response=list[EndpointOut])
def webhook_endpoints(request: HttpRequest) -> list[EndpointOut]:
    return [_endpoint_out(e) for e in webhooks.endpoints_visible(_user(request)).order_by("name")]


@router.post("/webhook-endpoints", response={201: EndpointOut})
@token_needs("approvals.manage_webhooks")
def webhook_endpoint_create(request: HttpRequest, body: EndpointIn) -> Status[EndpointOut]:
    endpoint = webhooks.webhook_endpoint_create(actor=_user(request), **body.model_dump())
    return Status(201, _endpoint_out(endpoint, with_secrets=True))


@router.post("/webhook-endpoints/{name}/rotate", response=EndpointOut)
@token_needs("approvals.manage_webhooks")
def webhook_endpoint_rotate(request: HttpRequest, name: str, body: EndpointRotateIn) -> EndpointOut:
    """A new signing secret (admins), shown in this response only, newest first."""
    endpoint, _ = webhooks.webhook_endpoint_rotate(actor=_user(request), name=name, keep_previous=body.keep_previous)
    return _endpoint_out(endpoint, with_secrets=True)


@router.patch("/webhook-endpoints/{name}", response=EndpointOut)
@token_needs("approvals.manage_webhooks")
def webhook_endpoint_update(request: HttpRequest, name: str, body: EndpointGatesIn) -> EndpointOut:
    """Change the gates the endpoint may decide (admins)."""
    return _endpoint_out(webhooks.webhook_endpoint_gates_set(actor=_user(request), name=name, gates=body.gates))


@router.delete("/webhook-endpoints/{name}", response={204: None})
@token_needs("approvals.manage_webhooks")
def webhook_endpoint_delete(request: HttpRequest, name: str) -> Status[None]:
    """Retire the endpoint (admins): secrets destroyed, principal disabled, delivery log kept."""
    webhooks.webhook_endpoint_delete(actor=_user(request), name=name)
    return Status(204, None)
