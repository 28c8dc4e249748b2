"""Threat: deciding a gate through a webhook you were never allowed to decide.

An operator may start and retry threads but not decide. An inbound endpoint's secret
is a decision credential (its service principal decides tasks), so minting or rotating
one is an admin action; an endpoint declares the gates it may decide and its principal
can decide nothing else, from any surface. Every change to an endpoint is audited.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.test import Client

from approvals.inbound.webhooks import webhook_endpoint_create
from approvals.models import AuditEvent, Decision, GraphAssignment, InboundDelivery, WebhookEndpoint
from approvals.outbound.signing import secret_generate, webhook_sign
from approvals.tokens import token_issue
from tests.conftest import ApiClient, api_decide, pending_tasks, thread_start
from tests.console.conftest import console_client

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _name() -> str:
    return f"sod-{uuid.uuid4().hex[:8]}"


def _identity_task(personas: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    thread = thread_start(personas["operator"], "kyc_onboarding", {"applicant": {"name": "Ada", "country": "GB"}})
    [task] = pending_tasks(personas["admin"], thread["id"])
    assert task["node"] == "identity_check"
    return thread["id"], task


def _kyc_endpoint(name: str) -> dict[str, Any]:
    return {"name": name, "graph": "kyc_onboarding", "gates": ["identity_check"]}


def _deliver(name: str, secret: str, thread_id: str) -> Any:
    raw = json.dumps({"correlation_key": f"kyc-{thread_id}", "status": "verified"}).encode()
    headers = webhook_sign(secret, raw)
    return Client().post(f"/api/webhooks/{name}", raw, content_type="application/json", headers=headers)


def test_an_operator_cannot_mint_a_webhook_secret_and_decide_through_it(personas):
    _thread_id, task = _identity_task(personas)
    name = _name()

    created = personas["operator"].client.post(
        "/api/webhook-endpoints", {"name": name, "graph": "kyc_onboarding", "gates": ["identity_check"]}
    )

    assert created.status_code == 403, created.content
    assert not WebhookEndpoint.objects.filter(name=name).exists()
    # The attack's second half has nothing to sign with: the task stays undecided.
    assert not Decision.objects.filter(task_id=task["id"]).exists()


def test_an_operator_cannot_create_an_endpoint_from_the_console(personas):
    name = _name()
    response = console_client(personas["operator"]).post(
        "/webhooks/endpoints", {"name": name, "graph": "kyc_onboarding", "gates": "identity_check"}
    )
    assert response.status_code == 403
    assert not WebhookEndpoint.objects.filter(name=name).exists()


def test_an_operator_cannot_rotate_an_endpoint_to_learn_its_secret(personas):
    endpoint = webhook_endpoint_create(actor=None, name=_name(), graph="kyc_onboarding", gates=["identity_check"])
    before = list(endpoint.secrets)

    api = personas["operator"].client.post(f"/api/webhook-endpoints/{endpoint.name}/rotate", {})
    console = console_client(personas["operator"]).post(f"/webhooks/endpoints/{endpoint.pk}/rotate")

    assert api.status_code == 403, api.content
    assert console.status_code == 403
    endpoint.refresh_from_db()
    assert endpoint.secrets == before
    assert not any(secret in console.content.decode() for secret in before)


@pytest.mark.parametrize(
    "gates,fragment",
    [
        (None, "declare the gates"),
        ([], "declare the gates"),
        (["open_the_vault"], "'open_the_vault' is not a gate of 'kyc_onboarding'"),
        (["identity_check", "human_review"], "'human_review' is not a gate"),  # a gate of another graph
    ],
)
def test_an_endpoint_must_declare_gates_of_its_graph(personas, gates, fragment):
    name = _name()
    body: dict[str, Any] = {"name": name, "graph": "kyc_onboarding"}
    if gates is not None:
        body["gates"] = gates

    response = personas["admin"].client.post("/api/webhook-endpoints", body)

    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["field"] == "gates" and (gates is None or fragment in error["message"])
    assert not WebhookEndpoint.objects.filter(name=name).exists()


def test_a_delivery_for_a_gate_the_endpoint_did_not_declare_is_refused_logged_and_audited(personas):
    endpoint = webhook_endpoint_create(actor=None, name=_name(), graph="kyc_onboarding", gates=["compliance_review"])
    thread_id, task = _identity_task(personas)

    response = _deliver(endpoint.name, endpoint.secrets[0], thread_id)

    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "gate_not_allowed"
    assert not Decision.objects.filter(task_id=task["id"]).exists()
    delivery = InboundDelivery.objects.get(endpoint=endpoint)
    assert delivery.status == "refused" and str(delivery.task_id) == task["id"] and "identity_check" in delivery.reason
    event = AuditEvent.objects.get(action="webhook.gate_refused", subject_id=task["id"])
    assert event.actor_label == f"webhook:{endpoint.name}"
    assert event.details["gate"] == "identity_check" and event.details["allowed"] == ["compliance_review"]
    assert event.details["delivery"] == delivery.pk


def test_the_endpoint_principal_cannot_decide_another_gate_even_with_a_token(personas):
    endpoint = webhook_endpoint_create(actor=None, name=_name(), graph="kyc_onboarding", gates=["compliance_review"])
    _, task = _identity_task(personas)
    principal = ApiClient(token_issue(user=endpoint.principal))

    response = api_decide(principal, task)

    assert response.status_code == 403, response.content
    assert "identity_check" in response.json()["error"]["message"]
    assert not Decision.objects.filter(task_id=task["id"]).exists()


def test_a_declared_gate_is_still_decided_by_a_signed_delivery(personas):
    admin = personas["admin"].client
    name = _name()
    created = admin.post("/api/webhook-endpoints", _kyc_endpoint(name))
    assert created.status_code == 201 and created.json()["gates"] == ["identity_check"]
    thread_id, task = _identity_task(personas)

    response = _deliver(name, created.json()["secrets"][0], thread_id)

    assert response.status_code == 202, response.content
    assert Decision.objects.get(task_id=task["id"]).actor.username == f"webhook:{name}"


def test_every_change_to_an_endpoint_is_audited_with_before_and_after_and_no_secret(personas):
    admin = personas["admin"].client
    name = _name()
    created = admin.post("/api/webhook-endpoints", _kyc_endpoint(name))
    assert created.status_code == 201
    first = created.json()["secrets"]
    rotated = admin.post(f"/api/webhook-endpoints/{name}/rotate", {"keep_previous": True})
    assert rotated.status_code == 200 and rotated.json()["secrets"][1:] == first
    scoped = admin.client.patch(
        f"/api/webhook-endpoints/{name}",
        json.dumps({"gates": ["identity_check", "compliance_review"]}),
        content_type="application/json",
        headers=admin.headers,
    )
    assert scoped.status_code == 200 and scoped.json()["gates"] == ["compliance_review", "identity_check"]
    unknown = admin.client.patch(
        f"/api/webhook-endpoints/{name}",
        json.dumps({"gates": ["nope"]}),
        content_type="application/json",
        headers=admin.headers,
    )
    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "gates"
    deleted = admin.client.delete(f"/api/webhook-endpoints/{name}", headers=admin.headers)
    assert deleted.status_code == 204

    events = {e.action: e for e in AuditEvent.objects.filter(subject_type="webhook", subject_id=name)}
    assert set(events) == {
        "webhook.endpoint_created",
        "webhook.endpoint_rotated",
        "webhook.endpoint_gates_changed",
        "webhook.endpoint_deleted",
    }
    assert all(e.actor_label == personas["admin"].username for e in events.values())
    assert events["webhook.endpoint_created"].details["after"]["gates"] == ["identity_check"]
    rotation = events["webhook.endpoint_rotated"].details
    assert rotation["before"]["secrets"] != rotation["after"]["secrets"]
    change = events["webhook.endpoint_gates_changed"].details
    assert change["before"] == {"gates": ["identity_check"]}
    assert change["after"] == {"gates": ["compliance_review", "identity_check"]}
    assert events["webhook.endpoint_deleted"].details["after"] == {"gates": [], "secrets": [], "active": False}
    trail = json.dumps([e.details for e in events.values()])
    for secret in [*first, *rotated.json()["secrets"]]:
        assert secret not in trail and secret.removeprefix("whsec_") not in trail
    # Deleted: it verifies nothing and its principal holds no right, but its log remains.
    endpoint = WebhookEndpoint.objects.get(name=name)
    assert endpoint.secrets == [] and not endpoint.active and not endpoint.principal.is_active
    assert not GraphAssignment.objects.filter(user=endpoint.principal).exists()


def test_the_webhooks_page_lists_declared_gates_and_shows_a_new_secret_once(personas):
    admin = console_client(personas["admin"])
    name = _name()
    created = admin.post("/webhooks/endpoints", {"name": name, "graph": "kyc_onboarding", "gates": "identity_check"})
    assert created.status_code == 201, created.content
    secret = WebhookEndpoint.objects.get(name=name).secrets[0]
    assert secret in created.content.decode() and "no-store" in created.headers["Cache-Control"]

    page = console_client(personas["operator"]).get("/webhooks/").content.decode()
    article = page.split(f'id="endpoint-{name}"', 1)[1].split("</article>", 1)[0]
    assert '<code class="gate">identity_check</code>' in article
    assert secret not in page and "Rotate secret" not in page  # operators read, admins manage

    refused = admin.post("/webhooks/endpoints", {"name": _name(), "graph": "kyc_onboarding", "gates": "nope"})
    assert refused.status_code == 422 and "&#x27;nope&#x27; is not a gate" in refused.content.decode()

    endpoint = WebhookEndpoint.objects.get(name=name)
    rotated = admin.post(f"/webhooks/endpoints/{endpoint.pk}/rotate", {"keep_previous": ["0"]})
    assert rotated.status_code == 200
    fresh = WebhookEndpoint.objects.get(name=name).secrets
    assert len(fresh) == 1 and fresh[0] != secret and fresh[0] in rotated.content.decode()


def test_the_migration_limits_an_existing_endpoint_to_the_gates_it_could_reach(personas):
    from importlib import import_module

    migration = import_module("approvals.migrations.0007_webhook_endpoint_gates")
    _identity_task(personas)  # a task whose payload carries a correlation key, at identity_check
    endpoint = webhook_endpoint_create(actor=None, name=_name(), graph="kyc_onboarding", gates=["identity_check"])
    # As before the migration: no gates, a graph-wide assignment for its principal.
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(gates=[], secrets=[secret_generate()])
    GraphAssignment.objects.filter(user=endpoint.principal).delete()
    GraphAssignment.objects.create(user=endpoint.principal, graph="kyc_onboarding")

    migration.gates_infer(django_apps, None)

    endpoint.refresh_from_db()
    assert endpoint.gates == ["identity_check"]  # compliance_review tasks carry no correlation key
    assert list(GraphAssignment.objects.filter(user=endpoint.principal).values_list("graph", "gate")) == [
        ("kyc_onboarding", "identity_check")
    ]
