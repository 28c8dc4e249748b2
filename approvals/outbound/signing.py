"""Standard Webhooks secrets and signatures.

Outbound deliveries and external tasks' results are signed here; inbound
endpoints hold secrets of the same form (``whsec_<base64>``) and verify with
the same library (``approvals.inbound.webhooks``). ``manage.py webhook_send``
signs with ``webhook_sign`` as an outside sender would.
"""

from __future__ import annotations

import base64
import secrets as pysecrets
from datetime import UTC, datetime

from standardwebhooks import Webhook

from approvals.errors import InvalidInput

SECRET_PREFIX = "whsec_"  # noqa: S105 - the public prefix of every secret (Standard Webhooks)


def secret_generate() -> str:
    return SECRET_PREFIX + base64.b64encode(pysecrets.token_bytes(24)).decode()


def secret_check(secret: str, field: str = "secret") -> str:
    """``secret`` if it is a Standard Webhooks secret; else ``InvalidInput`` naming ``field`` (``secrets[1]``
    where the request holds a list)."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise InvalidInput("a webhook secret looks like whsec_<base64>", field=field)
    try:
        Webhook(secret)
    except Exception:  # noqa: BLE001 - the library refuses a bad secret with any of several types
        raise InvalidInput("the secret after whsec_ must be base64", field=field) from None
    return secret


def webhook_sign(secret: str, body: bytes, *, msg_id: str | None = None, at: datetime | None = None) -> dict[str, str]:
    """Headers a sender attaches to ``body`` (used by ``manage.py webhook_send`` and the outbound sender)."""
    msg_id = msg_id or f"msg_{pysecrets.token_hex(12)}"
    at = at or datetime.now(tz=UTC)
    signature = Webhook(secret).sign(msg_id=msg_id, timestamp=at, data=body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())), "webhook-signature": signature}
