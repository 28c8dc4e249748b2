"""An external task's generated signing secret goes back to the user who created it, never to another
principal who replays the same create (the key and body are no secret; the signing secret is).

An attacker with an operator account assigned to the source reads a workflow's key and body (engine
logs, the audit trail, the task page) and POSTs them again: the idempotent 200 must not hand over the
secret that would let them sign forged decisions.
"""

from __future__ import annotations

import uuid

import pytest
from standardwebhooks import Webhook

from approvals.models import ExternalTask
from tests.conftest import ApiClient, Persona, api_decide
from tests.external.conftest import create, task_body

pytestmark = pytest.mark.usefixtures("live_db")


def operator_for(source: str, name: str) -> Persona:
    """An operator assigned to ``external:<source>`` (may create tasks there), with an API token."""
    from django.contrib.auth import get_user_model

    from approvals.models import GraphAssignment
    from approvals.roles import roles_ensure
    from approvals.tokens import token_issue

    user = get_user_model().objects.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
    user.groups.add(roles_ensure()["operator"])
    GraphAssignment.objects.create(user=user, graph=f"external:{source}")
    return Persona(user.username, "operator", token_issue(user=user), user)


@pytest.fixture
def source() -> str:
    return f"payments-{uuid.uuid4().hex[:8]}"


def test_another_operator_replaying_the_create_does_not_get_the_secret(source):
    creator, attacker = operator_for(source, "op1"), operator_for(source, "op2")
    first = create(creator.client, task_body(source, key="wf-123"))
    assert first.status_code == 201, first.content
    assert first.json()["secret"].startswith("whsec_")

    replay = create(attacker.client, task_body(source, key="wf-123"))
    assert replay.status_code == 200, replay.content
    assert replay.json()["id"] == first.json()["id"]  # the same task, as idempotency promises
    assert replay.json()["secret"] is None
    assert first.json()["secret"] not in replay.content.decode()


def test_the_creator_retrying_after_a_lost_response_gets_it_back_with_any_of_its_tokens(source):
    from approvals.tokens import token_issue

    creator = operator_for(source, "op1")
    first = create(creator.client, task_body(source, key="wf-123"))
    assert first.status_code == 201, first.content
    again = create(ApiClient(token_issue(user=creator.user)), task_body(source, key="wf-123"))
    assert again.status_code == 200, again.content
    assert again.json()["secret"] == first.json()["secret"]


def test_a_secret_sent_by_the_creator_is_echoed_to_nobody(source):
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    creator, attacker = operator_for(source, "op1"), operator_for(source, "op2")
    body = task_body(source, key="wf-7", secret=secret)
    assert create(creator.client, body).json()["secret"] is None
    assert create(creator.client, body).json()["secret"] is None
    assert create(attacker.client, body).json()["secret"] is None


def test_another_operator_replaying_with_a_different_body_is_still_refused(source):
    creator, attacker = operator_for(source, "op1"), operator_for(source, "op2")
    assert create(creator.client, task_body(source, key="wf-123")).status_code == 201
    refused = create(attacker.client, task_body(source, key="wf-123", title="Release wire 43"))
    assert refused.status_code == 409 and refused.json()["error"]["field"] == "key"
    assert "whsec_" not in refused.content.decode()
    assert ExternalTask.objects.filter(source__name=source).count() == 1


def test_what_the_replay_leaks_could_not_sign_a_result_the_engine_accepts(source, personas):
    """The point of the fix, end to end: the decision is signed with the creator's secret, which the
    replaying operator never saw."""
    creator, attacker = operator_for(source, "op1"), operator_for(source, "op2")
    secret = create(creator.client, task_body(source, key="wf-9")).json()["secret"]
    seen = create(attacker.client, task_body(source, key="wf-9")).json()
    assert seen["secret"] is None
    assert api_decide(personas["reviewer"], seen["id"], reason="ok").status_code == 201
    answer = creator.client.get(f"/api/external-tasks/{seen['id']}/decision", wait=0)
    assert answer.status_code == 200
    assert Webhook(secret).verify(answer.content, dict(answer.headers))["decision"] == "approve"
