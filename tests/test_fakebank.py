"""The fake bank behaves as a real payment API would where the tests lean on it: a request cut short
by a dying caller is not acted on, and the caller's retry under the same key pays once."""

from __future__ import annotations

import json
import socket

import httpx

from demo.fakebank import serve_in_thread
from tests.conftest import scaled, wait_for

BODY = json.dumps({"loan_id": "L-cut", "amount": 20000}, separators=(",", ":")).encode()


def test_a_request_cut_short_pays_nothing_and_its_retry_pays_once():
    bank = serve_in_thread(latency_ms=0.0)
    try:
        host, port = bank.server_address[:2]
        # The caller dies after its headers, before its body (killed mid-send: httpx sends them apart).
        with socket.create_connection((host, port)) as dying:
            dying.sendall(
                b"POST /payments HTTP/1.1\r\nHost: bank\r\nContent-Type: application/json\r\n"
                b"Idempotency-Key: k-cut\r\nContent-Length: " + str(len(BODY)).encode() + b"\r\n\r\n"
            )
        wait_for(lambda: bank.ledger.cut_short == 1, what="the bank to see the request cut short")
        retry = httpx.post(
            f"{bank.url}/payments", content=BODY, headers={"Idempotency-Key": "k-cut"}, timeout=scaled(10)
        )
        assert retry.status_code == 201, retry.text
        assert retry.json()["request"] == json.loads(BODY)
        assert bank.ledger.executions == {"k-cut": 1}
    finally:
        bank.shutdown()
