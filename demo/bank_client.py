"""Client for the (fake) bank, as an action node would call a real provider.

Its errors tell the effect ledger whether the bank may have acted (``runtime.effects``): a request
that never left, or that the bank refused before acting, is ``BankDidNotAct`` (the effect is
``failed``); one sent with no answer back is ``BankNoAnswer`` (``unknown``: the payment may
have been made). Either way a retry sends the same idempotency key, so the bank acts at most once.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from runtime.effects import EffectNotPerformed, EffectOutcomeUnknown


class BankUnavailable(RuntimeError):
    """The bank did not do what was asked, or did not say whether it did (the subclass tells which)."""


class BankDidNotAct(BankUnavailable, EffectNotPerformed):
    """Nothing was done: the request never reached the bank, or the bank refused it before acting."""


class BankNoAnswer(BankUnavailable, EffectOutcomeUnknown):
    """The request was sent and no usable answer came back: the bank may have acted on it."""


def _base_url() -> str:
    return os.environ.get("GATEHOUSE_FAKE_BANK_URL", "http://127.0.0.1:8765")


def _timeout() -> float:
    """Seconds to wait for the bank (``GATEHOUSE_FAKE_BANK_TIMEOUT_SECONDS``, default 10): tests shorten it."""
    return float(os.environ.get("GATEHOUSE_FAKE_BANK_TIMEOUT_SECONDS") or 10.0)


# One client per process: building one per call (TLS context, pool) cost ~17 ms.
_client = httpx.Client(timeout=_timeout())

# httpx errors raised before the request left: the bank cannot have seen it.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _post(path: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    try:
        response = _client.post(f"{_base_url()}{path}", json=body, headers={"Idempotency-Key": idempotency_key})
    except _NOT_SENT as exc:
        raise BankDidNotAct(f"bank unreachable: {exc or type(exc).__name__}") from exc
    except httpx.HTTPError as exc:
        # Sent, but no answer came back (a timeout, a cut connection): the bank may have acted on it.
        raise BankNoAnswer(
            f"no answer from the bank ({exc or type(exc).__name__}): it may have acted on the request; "
            "a retry sends the same idempotency key, so it is done at most once"
        ) from exc
    if response.status_code == 503:  # the bank's word that it did nothing: "retry with the same key"
        raise BankDidNotAct(f"bank returned 503: {response.text}")
    if response.status_code >= 500:  # a server error mid-request says nothing of what was done
        raise BankNoAnswer(f"bank returned {response.status_code}: {response.text}")
    response.raise_for_status()  # a 4xx: the bank refused the request
    try:
        return response.json()  # type: ignore[no-any-return]
    except ValueError as exc:  # the bank acted (2xx) and its answer cannot be read
        raise BankNoAnswer(f"unreadable answer from the bank ({response.status_code}): {exc}") from exc


def open_account(*, applicant: dict[str, Any], tier: str, idempotency_key: str) -> dict[str, Any]:
    return _post("/accounts", {"applicant": applicant.get("name"), "tier": tier}, idempotency_key)


def disburse(*, loan_id: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    return _post("/payments", {"loan_id": loan_id, "amount": amount}, idempotency_key)
