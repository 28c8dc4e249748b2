"""The demo bank client tells the effect ledger whether the bank may have acted.

A bank slower than the client's timeout paid while the client raised: the ledger must hear "no answer"
(``unknown``), not "not done" (``failed``); an unreachable bank or its 503 did nothing (``failed``).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from demo import bank_client
from demo.fakebank import BankServer, serve_in_thread
from runtime.effects import effect_outcome_unknown
from tests.conftest import free_port, scaled, wait_for


@pytest.fixture
def slow_bank(monkeypatch: pytest.MonkeyPatch) -> Iterator[BankServer]:
    """The fake bank answering after 0.5 s, called by a client that waits 0.1 s (both scaled: the wait stays
    a fifth of the answer's time on a slow machine)."""
    bank = serve_in_thread(latency_ms=scaled(0.5) * 1000)
    monkeypatch.setenv("GATEHOUSE_FAKE_BANK_URL", bank.url)
    monkeypatch.setattr(bank_client, "_client", httpx.Client(timeout=scaled(0.1)))
    yield bank
    bank.shutdown()


def test_a_bank_slower_than_the_timeout_is_no_answer_and_its_retry_gets_the_payment(slow_bank, monkeypatch):
    with pytest.raises(bank_client.BankNoAnswer) as raised:
        bank_client.disburse(loan_id="L-slow", amount=20000, idempotency_key="k-slow")
    assert effect_outcome_unknown(raised.value)
    wait_for(lambda: slow_bank.ledger.executions == {"k-slow": 1}, what="the bank to pay after the timeout")

    monkeypatch.setattr(bank_client, "_client", httpx.Client(timeout=scaled(10)))
    payment = bank_client.disburse(loan_id="L-slow", amount=20000, idempotency_key="k-slow")
    assert payment["status"] == "paid" and slow_bank.ledger.executions == {"k-slow": 1}


def test_an_unreachable_bank_did_not_act(monkeypatch):
    monkeypatch.setenv("GATEHOUSE_FAKE_BANK_URL", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(bank_client.BankDidNotAct) as raised:
        bank_client.disburse(loan_id="L-down", amount=1, idempotency_key="k-down")
    assert not effect_outcome_unknown(raised.value)


def test_a_bank_that_answers_503_did_not_act(monkeypatch):
    bank = serve_in_thread(latency_ms=0.0, fail_rate=1.0)
    monkeypatch.setenv("GATEHOUSE_FAKE_BANK_URL", bank.url)
    try:
        with pytest.raises(bank_client.BankDidNotAct) as raised:
            bank_client.disburse(loan_id="L-503", amount=1, idempotency_key="k-503")
        assert not effect_outcome_unknown(raised.value) and bank.ledger.executions == {}
    finally:
        bank.shutdown()


def test_a_refusal_did_not_act(monkeypatch):
    """The same key with another body: the bank refuses (422), and says so."""
    bank = serve_in_thread(latency_ms=0.0)
    monkeypatch.setenv("GATEHOUSE_FAKE_BANK_URL", bank.url)
    try:
        bank_client.disburse(loan_id="L-422", amount=1, idempotency_key="k-422")
        with pytest.raises(httpx.HTTPStatusError) as raised:
            bank_client.disburse(loan_id="L-422", amount=2, idempotency_key="k-422")
        assert raised.value.response.status_code == 422 and not effect_outcome_unknown(raised.value)
    finally:
        bank.shutdown()
