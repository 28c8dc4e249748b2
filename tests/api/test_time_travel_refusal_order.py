"""Fork and replay answer who may act before what was sent: 404 for a thread the caller cannot see, 403 for
a caller without time travel, whatever the body (an auditor's ``{}`` was a 422 naming ``checkpoint_id``)."""

from __future__ import annotations

import uuid

import pytest

from runtime.models import Thread
from tests.conftest import Persona

pytestmark = pytest.mark.django_db

BODIES = [{}, {"reason": "why"}, {"checkpoint_id": "not-a-checkpoint"}, {"checkpoint_id": 5, "values": []}]


@pytest.mark.parametrize("route", ["fork", "replay"])
@pytest.mark.parametrize("body", BODIES)
def test_a_caller_without_time_travel_hears_403_whatever_it_sent(personas: dict[str, Persona], route, body):
    thread = Thread.objects.create(graph="loan_approval")
    response = personas["auditor"].client.post(f"/api/threads/{thread.id}/{route}", body)
    assert response.status_code == 403, response.content


@pytest.mark.parametrize("route", ["fork", "replay"])
@pytest.mark.parametrize("body", BODIES)
def test_a_thread_the_caller_cannot_see_is_404_whatever_it_sent(personas: dict[str, Persona], route, body):
    thread = Thread.objects.create(graph="kyc_onboarding")
    response = personas["loan_reviewer"].client.post(f"/api/threads/{thread.id}/{route}", body)
    assert response.status_code == 404, response.content
    missing = personas["operator"].client.post(f"/api/threads/{uuid.uuid4()}/{route}", body)
    assert missing.status_code == 404, missing.content


@pytest.mark.parametrize(
    "route,body,field",
    [
        ("fork", {"reason": "why"}, "checkpoint_id"),
        ("fork", {"checkpoint_id": "nope", "reason": "why"}, "checkpoint_id"),
        ("fork", {"checkpoint_id": str(uuid.uuid4()), "reason": "x" * 10_000}, "reason"),
        ("fork", {"checkpoint_id": str(uuid.uuid4()), "reason": "why", "run": "maybe"}, "run"),
        ("replay", {"checkpoint_id": str(uuid.uuid4())}, "reason"),
    ],
)
def test_a_caller_who_may_travel_still_hears_what_is_wrong_with_the_body(operator: Persona, route, body, field):
    thread = Thread.objects.create(graph="loan_approval")
    response = operator.client.post(f"/api/threads/{thread.id}/{route}", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field


def test_the_openapi_schema_still_documents_the_bodies(operator: Persona):
    spec = operator.client.get("/api/openapi.json").json()
    fork = spec["paths"]["/api/threads/{thread_id}/fork"]["post"]["requestBody"]["content"]["application/json"]
    assert {"checkpoint_id", "reason", "values", "as_node", "run"} <= set(fork["schema"]["properties"])


def test_subgraphs_of_a_thread_the_caller_cannot_see_is_404_before_a_bad_checkpoint(personas: dict[str, Persona]):
    thread = Thread.objects.create(graph="kyc_onboarding")
    path = f"/api/threads/{thread.id}/subgraphs"
    assert personas["loan_reviewer"].client.get(path, checkpoint_id="nope").status_code == 404
    bad = personas["operator"].client.get(path, checkpoint_id="nope")
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "checkpoint_id"


@pytest.mark.parametrize("route", ["fork", "replay"])
def test_no_body_at_all_is_the_same_403_then_a_422_naming_what_is_missing(personas: dict[str, Persona], route):
    """A request with no body was refused 422 ``payload: Field required`` (a name the API documents nowhere)
    before its caller was asked whether it may travel at all (outside re-test)."""
    thread = Thread.objects.create(graph="loan_approval")
    refused = personas["auditor"].client.post(f"/api/threads/{thread.id}/{route}", raw="")
    assert refused.status_code == 403, refused.content
    empty = personas["operator"].client.post(f"/api/threads/{thread.id}/{route}", raw="")
    assert empty.status_code == 422, empty.content
    assert empty.json()["error"]["field"] == "checkpoint_id"  # as for ``{}``: the body's first missing field
