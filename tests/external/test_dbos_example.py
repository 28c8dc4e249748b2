"""The DBOS example end to end: a workflow blocked in ``DBOS.recv`` is woken by Gatehouse's signed callback.

Real parts: DBOS on PostgreSQL (a system database of its own), daphne serving the
API, the Celery worker delivering the callback through the outbound outbox, and
the example's callback server verifying the signature and calling ``DBOS.send``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from approvals.external import result_body, result_headers
from approvals.models import ExternalTask, OutboundDelivery, OutboundStatus
from examples.dbos import approval_workflow as example
from tests.conftest import api_decide, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


@pytest.fixture
def dbos(gatehouse_url, engine, source, monkeypatch) -> Iterator[Any]:
    from dbos import DBOS

    from approvals.outbound.signing import secret_generate

    port = free_port()
    monkeypatch.setattr(
        example,
        "settings",
        example.Settings(gatehouse_url, engine.token, source, f"http://127.0.0.1:{port}/gatehouse", secret_generate()),
    )
    server = example.callback_server(port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    db = connection.settings_dict
    name = f"{db['NAME']}_dbos"
    url = f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
    DBOS(config={"name": "gatehouse-example", "system_database_url": url})
    DBOS.launch()
    try:
        yield DBOS
    finally:
        DBOS.destroy()
        server.shutdown()
        server.server_close()
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_dbos_workflow_resumes_with_the_signed_decision(dbos, source, personas):
    wire = {"id": "w-7", "amount": 12000, "currency": "EUR", "beneficiary": {"iban": "DE89370400440532013000"}}
    handle = dbos.start_workflow(example.wire_release, wire)
    external = wait_for(
        lambda: ExternalTask.objects.filter(source__name=source, key=handle.workflow_id).first(),
        what="the workflow to open its Gatehouse task",
    )
    shown = personas["reviewer"].client.get(f"/api/tasks/{external.task_id}").json()
    assert shown["payload"]["details"]["beneficiary"]["iban"] != wire["beneficiary"]["iban"]  # its redaction path
    decided = api_decide(personas["reviewer"], external.task_id, reason="beneficiary verified")
    assert decided.status_code == 201
    wait_for(lambda: handle.get_status().status == "SUCCESS", timeout=60, what="the workflow to receive the decision")
    result = handle.get_result()
    assert result["status"] == "released" and result["signers"] == [personas["reviewer"].username]

    # The callback went through the outbox once, under the result's id (the engine's dedupe key) ...
    external.refresh_from_db()
    # The workflow can wake before the worker records the 2xx it got: wait for the record.
    delivery = wait_for(
        lambda: OutboundDelivery.objects.filter(
            subscription=external.subscription_id, status=OutboundStatus.DELIVERED
        ).first(),
        what="the callback delivery to be recorded as delivered",
    )
    assert delivery.event_id == external.result_id == result["decision_id"] and delivery.attempts == 1
    # ... and a repeated delivery (Gatehouse retries until a 2xx) is acknowledged; DBOS.send drops it by its key.
    assert example.callback_handle(result_body(external), result_headers(external)) == 204


def test_a_forged_callback_is_refused(dbos):
    assert example.callback_handle(b'{"key": "x"}', {"webhook-id": "a", "webhook-timestamp": "1"}) == 401
