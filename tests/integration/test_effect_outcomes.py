"""A payment the bank made after the client gave up waiting: "outcome unknown", then done on retry.

With the real worker and the fake bank: the bank holds the disbursement past the client's timeout
(shortened to 1 s for this worker), then pays it. The ledger, /metrics and the thread page said the
payment had failed while the money had moved.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from runtime.models import Effect, EffectStatus, RunStatus
from tests.conftest import (
    WorkerProcess,
    api_decide,
    loan_input,
    pending_tasks,
    thread_settled,
    thread_start,
    wait_for,
    worker_env,
)
from tests.console.conftest import console_client

pytestmark = [pytest.mark.usefixtures("live_db"), pytest.mark.integration]

TOKEN = "metrics-token-for-effect-outcomes-0123456789"


def _effects_metric() -> dict[str, float]:
    with override_settings(GATEHOUSE_METRICS_TOKEN=TOKEN):
        response = Client().get("/metrics", headers={"host": "10.9.8.7:8000", "authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    return {
        sample.labels["status"]: sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
        if sample.name == "gatehouse_effects"
    }


@pytest.fixture
def impatient_worker(worker: WorkerProcess, bank: Any, tmp_path: Any) -> Any:
    """A worker whose bank client waits 1 s; the session worker is stopped (later tests restart it)."""
    worker.stop()
    impatient = WorkerProcess({**worker_env(bank), "GATEHOUSE_FAKE_BANK_TIMEOUT_SECONDS": "1"}, tmp_path)
    impatient.start()
    yield impatient
    impatient.stop()


def test_a_payment_that_timed_out_is_outcome_unknown_until_a_retry_records_the_banks_answer(
    impatient_worker, bank, operator, reviewer
):
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    key = f"gh:{thread['id']}:disburse"
    before = _effects_metric()
    with bank.held():
        assert api_decide(reviewer, pending_tasks(reviewer, thread["id"])[0]).status_code == 201
        wait_for(lambda: bank.holding(key) == 1, what="the disbursement to reach the bank")
        settled = thread_settled(operator, thread["id"], timeout=30)
    # The bank pays once the client has given up waiting, as a slow real one does.
    wait_for(lambda: bank.ledger.executions.get(key) == 1, what="the bank to pay the held request")

    assert settled["status"] == "failed"
    effect = Effect.objects.get(key=key)
    assert (effect.status, effect.calls) == (EffectStatus.UNKNOWN, 1), effect.error
    assert "BankNoAnswer" in effect.error
    after = _effects_metric()
    assert after["unknown"] - before.get("unknown", 0) == 1 and after["failed"] == before.get("failed", 0)
    html = console_client(operator).get(f"/threads/{thread['id']}/").content.decode()
    actions = html.split("<h3>Actions performed</h3>", 1)[1].split("</ul>", 1)[0]
    assert "outcome unknown" in actions and "may have acted" in actions and "same idempotency key" in actions

    # The operator's retry asks the bank again under the same key: it replays the payment it made.
    response = operator.client.post(f"/api/threads/{thread['id']}/retry")
    assert response.status_code == 202, response.content
    assert thread_settled(operator, thread["id"], statuses=("completed", "failed"), timeout=30)["status"] == "completed"
    effect.refresh_from_db()
    paid = bank.ledger.responses[key][2]
    assert (effect.status, effect.result, effect.error, effect.calls) == (EffectStatus.DONE, paid, "", 2)
    assert bank.ledger.executions[key] == 1 and bank.ledger.received[key] == 2
    assert effect.run is not None and effect.run.status == RunStatus.SUCCEEDED
    assert _effects_metric()["unknown"] == before.get("unknown", 0)
