"""Declared gates on every surface that offers or checks one: the user form and API, the webhook form and
API, and the task a pause at an undeclared node still opens.

tests/graphs/langgraph.json declares kyc_onboarding's gates (identity_check, compliance_review) and
leaves loan_approval and nested_review undeclared: their gates are every node, subgraphs' included.
"""

from __future__ import annotations

import json
import logging
import re
import uuid

import pytest

from approvals import services, users
from approvals.errors import InvalidInput
from approvals.inbound.webhooks import webhook_endpoint_create, webhook_endpoint_gates_set
from approvals.models import ApprovalTask, GraphAssignment, WebhookEndpoint
from tests.console.conftest import console_client
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")

KYC_GATES = ["compliance_review", "identity_check"]
KYC_OTHER_NODES = ["collect_documents", "screen_applicant", "open_account", "close_case"]
LOAN_NODES = ["decline", "disburse", "human_review", "pull_documents", "score_risk"]


def _name(prefix: str = "gates") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _reviewer(*assignments: users.Assignment):
    return users.user_create(actor=users.CLI, username=_name("rev"), roles=["reviewer"], assignments=list(assignments))


# --- the user form and API -------------------------------------------------------------------


def test_the_users_api_offers_the_declared_gates_of_a_graph_and_every_node_of_one_without(personas):
    user = _reviewer(users.Assignment("kyc_onboarding", "compliance_review"))
    detail = personas["admin"].client.get(f"/api/users/{user.pk}").json()
    gates = {g["graph"]: [x["gate"] for x in g["gates"]] for g in detail["effective"]["graphs"]}
    # Other tests' tasks at made-up nodes add to the list (gates seen in tasks): the graph's own nodes tell.
    assert set(KYC_GATES) <= set(gates["kyc_onboarding"])
    assert not set(KYC_OTHER_NODES) & set(gates["kyc_onboarding"])
    assert set(LOAN_NODES) <= set(gates["loan_approval"])  # no declaration: every node, as before
    assert {"child", "finish", "inner_gate"} <= set(gates["nested_review"])  # a subgraph's node is a gate too


def test_the_user_form_offers_only_declared_gates(personas):
    user = _reviewer()
    page = console_client(personas["admin"]).get(f"/users/{user.pk}/").content.decode()
    offered = set(re.findall(r'name="assign" value="kyc_onboarding:([^"]+)"', page))
    assert set(KYC_GATES) <= offered and not set(KYC_OTHER_NODES) & offered
    assert set(LOAN_NODES) <= set(re.findall(r'name="assign" value="loan_approval:([^"]+)"', page))


def test_the_user_form_keeps_an_assigned_gate_and_a_gate_seen_in_tasks_that_are_not_declared(personas):
    """Declaring gates must not hide what a user holds: unticking it would be the only way to see it."""
    legacy = f"legacy_{uuid.uuid4().hex[:6]}"
    task_make(graph="kyc_onboarding", node=legacy)
    user = _reviewer()
    # Assigned before the graph declared its gates (an undeclared gate is no longer assignable anew).
    GraphAssignment.objects.create(user=user, graph="kyc_onboarding", gate="screen_applicant")
    page = console_client(personas["admin"]).get(f"/users/{user.pk}/").content.decode()
    offered = set(re.findall(r'name="assign" value="kyc_onboarding:([^"]+)"', page))
    assert {*KYC_GATES, "screen_applicant", legacy} <= offered
    assert not {"collect_documents", "open_account", "close_case"} & offered
    assert 'value="kyc_onboarding:screen_applicant" checked' in page


# --- the webhook form and API ----------------------------------------------------------------


def test_the_webhook_form_offers_only_declared_gates(personas):
    page = console_client(personas["admin"]).get("/webhooks/").content.decode()
    offered = re.findall(r'<option value="([^"]+)">kyc_onboarding</option>', page)
    assert sorted(offered) == KYC_GATES
    assert sorted(re.findall(r'<option value="([^"]+)">loan_approval</option>', page)) == LOAN_NODES


@pytest.mark.parametrize("node", KYC_OTHER_NODES[:2])
def test_creating_an_endpoint_for_an_undeclared_gate_is_a_422_naming_gates(personas, node):
    name = _name()
    response = personas["admin"].client.post(
        "/api/webhook-endpoints", {"name": name, "graph": "kyc_onboarding", "gates": ["identity_check", node]}
    )
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["field"] == "gates"
    assert f"{node!r} is not a gate of 'kyc_onboarding'" in error["message"]
    assert "declared in gatehouse.gates.kyc_onboarding: identity_check, compliance_review" in error["message"]
    assert not WebhookEndpoint.objects.filter(name=name).exists()


def test_changing_an_endpoint_to_an_undeclared_gate_is_refused_and_changes_nothing(personas):
    endpoint = webhook_endpoint_create(actor=None, name=_name(), graph="kyc_onboarding", gates=["identity_check"])
    admin = personas["admin"]
    response = admin.client.client.patch(
        f"/api/webhook-endpoints/{endpoint.name}",
        json.dumps({"gates": ["screen_applicant"]}),
        content_type="application/json",
        headers=admin.client.headers,
    )
    assert response.status_code == 422 and response.json()["error"]["field"] == "gates"
    endpoint.refresh_from_db()
    assert endpoint.gates == ["identity_check"]


def test_an_endpoint_may_decide_a_declared_gate():
    endpoint = webhook_endpoint_create(actor=None, name=_name(), graph="kyc_onboarding", gates=KYC_GATES)
    assert endpoint.gates == KYC_GATES


@pytest.mark.parametrize("graph,gate", [("loan_approval", "disburse"), ("nested_review", "inner_gate")])
def test_a_graph_without_declared_gates_accepts_any_node_as_before(graph, gate):
    endpoint = webhook_endpoint_create(actor=None, name=_name(), graph=graph, gates=[gate])
    with pytest.raises(InvalidInput) as refused:
        webhook_endpoint_gates_set(actor=None, name=endpoint.name, gates=["not_a_node"])
    assert refused.value.field == "gates" and "(its gates, its nodes: " in refused.value.message


# --- a pause at a node that is not a declared gate -------------------------------------------


@pytest.fixture
def warned(monkeypatch):
    """The once-per-(graph, node) memory of the warning, empty for this test."""
    monkeypatch.setattr(services, "_undeclared_warned", set())


@pytest.mark.usefixtures("warned")
def test_a_pause_at_an_undeclared_node_opens_its_task_and_warns_once_naming_the_key_to_fix(caplog):
    caplog.set_level(logging.WARNING, logger="approvals.services")
    node = f"undeclared_{uuid.uuid4().hex[:6]}"  # a made-up node: its tasks must not show in other tests' menus
    first = task_make(graph="kyc_onboarding", node=node)
    second = task_make(graph="kyc_onboarding", node=node)
    assert ApprovalTask.objects.filter(pk__in=[first.pk, second.pk], node=node).count() == 2
    [record] = [r for r in caplog.records if r.name == "approvals.services"]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert f"'kyc_onboarding' paused at node {node!r}" in message
    assert f"add {node!r} to gatehouse.gates.kyc_onboarding in langgraph.json" in message


@pytest.mark.usefixtures("warned")
@pytest.mark.parametrize("graph,node", [("kyc_onboarding", "compliance_review"), ("loan_approval", "disburse")])
def test_a_pause_at_a_declared_gate_or_in_a_graph_without_declarations_says_nothing(caplog, graph, node):
    caplog.set_level(logging.WARNING, logger="approvals.services")
    task_make(graph=graph, node=node)
    assert [r for r in caplog.records if r.name == "approvals.services"] == []
