"""Client for the (fake) bank, as an action node would call a real provider."""

from __future__ import annotations

import os
from typing import Any

import httpx


class BankUnavailable(RuntimeError):
    pass


def _base_url() -> str:
    return os.environ.get("GATEHOUSE_FAKE_BANK_URL", "http://127.0.0.1:8765")


# One client per process: building one per call (TLS context, pool) cost ~17 ms.
_client = httpx.Client(timeout=10.0)


def _post(path: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    try:
        response = _client.post(f"{_base_url()}{path}", json=body, headers={"Idempotency-Key": idempotency_key})
    except httpx.ConnectError as exc:  # nothing reached the bank: nothing was done
        raise BankUnavailable(f"bank unreachable: {exc}") from exc
    except httpx.HTTPError as exc:
        # Sent, but no answer came back (a timeout, a cut connection): the bank may have acted on it.
        # A retry sends the same idempotency key, so the bank does it at most once.
        raise BankUnavailable(
            f"no answer from the bank ({exc or type(exc).__name__}): it may have acted on the request; "
            "a retry sends the same idempotency key, so it is done at most once"
        ) from exc
    if response.status_code >= 500:
        raise BankUnavailable(f"bank returned {response.status_code}: {response.text}")
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]


def open_account(*, applicant: dict[str, Any], tier: str, idempotency_key: str) -> dict[str, Any]:
    return _post("/accounts", {"applicant": applicant.get("name"), "tier": tier}, idempotency_key)


def disburse(*, loan_id: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    return _post("/payments", {"loan_id": loan_id, "amount": amount}, idempotency_key)
