"""The Python client against a real server: idempotent create, the long-poll, signature checks."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from approvals.outbound.signing import secret_generate
from gatehouse_client import GatehouseClient, GatehouseError, SignatureError, signature_verify
from tests.conftest import api_decide, scaled

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def test_task_create_is_safe_to_retry_and_a_changed_body_names_the_key(gatehouse_url, engine, source):
    with GatehouseClient(gatehouse_url, token=engine.token) as client:
        first = client.task_create(source=source, key="w-1", title="Release", payload={"amount": 1})
        again = client.task_create(source=source, key="w-1", title="Release", payload={"amount": 1})
        assert again.id == first.id and first.secret and first.secret == again.secret
        with pytest.raises(GatehouseError) as refused:
            client.task_create(source=source, key="w-1", title="Release", payload={"amount": 2})
        assert refused.value.status == 409 and refused.value.field == "key"


def test_decision_wait_times_out_then_returns_the_verified_decision(gatehouse_url, engine, source, personas):
    with GatehouseClient(gatehouse_url, token=engine.token) as client:
        task = client.task_create(source=source, key="w-2", title="Release", payload={})
        started = time.monotonic()
        assert client.decision_wait(task.id, timeout=1.0, secret=task.secret) is None
        assert time.monotonic() - started >= 1.0  # it waited on the server, not in a busy loop
        decided = api_decide(personas["reviewer"], task.id, "reject", reason="limit exceeded")
        assert decided.status_code == 201
        decision = client.decision_wait(task.id, timeout=scaled(10), secret=task.secret)
        assert decision is not None and decision.decision == "reject" and not decision.approved
        assert decision.reason == "limit exceeded" and decision.key == "w-2"
        with pytest.raises(SignatureError):
            client.decision_wait(task.id, timeout=scaled(1), secret=secret_generate())  # someone else's key


def test_signature_verify_matches_standard_webhooks_and_refuses_tampering():
    secret = secret_generate()
    body = json.dumps({"id": "ext_1", "decision": "approve"}).encode()
    now = datetime.now(tz=UTC)
    signature = Webhook(secret).sign("ext_1", now, body.decode())
    signed = {"webhook-id": "ext_1", "webhook-timestamp": str(int(now.timestamp())), "webhook-signature": signature}
    assert signature_verify(secret=secret, body=body, headers=signed)["decision"] == "approve"
    with pytest.raises(SignatureError):
        signature_verify(secret=secret, body=body.replace(b"approve", b"reject"), headers=signed)
    with pytest.raises(SignatureError):
        signature_verify(secret=secret, body=body, headers=signed, now=time.time() + 3600)
    with pytest.raises(SignatureError):
        signature_verify(secret=secret, body=body, headers={})
