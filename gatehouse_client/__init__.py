"""A small typed client for Gatehouse external tasks (docs/external-tasks.md).

    client = GatehouseClient("https://gatehouse.example", token="gh_...")
    task = client.task_create(source="payments", key=f"wire-{wire_id}", title="Release wire", payload={...})
    decision = client.decision_wait(task.id, timeout=3600)   # long-polls; None if still pending

A callback receiver checks the signature before trusting the body:

    decision = signature_verify(secret=task.secret, body=request.body, headers=request.headers)

Depends only on httpx and the standard library, so engines' workers can vendor it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

__all__ = [
    "Decision",
    "ExternalTask",
    "GatehouseClient",
    "GatehouseError",
    "SignatureError",
    "TaskGone",
    "signature_verify",
]

SIGNATURE_TOLERANCE_SECONDS = 5 * 60
LONG_POLL_MAX_SECONDS = 60


class GatehouseError(Exception):
    """A 4xx/5xx answer: ``status``, Gatehouse's error ``code`` and the ``field`` it names."""

    def __init__(self, status: int, code: str, message: str, field: str | None) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status, self.code, self.message, self.field = status, code, message, field


class TaskGone(GatehouseError):
    """The task was cancelled or superseded: no decision will ever come."""


class SignatureError(Exception):
    pass


@dataclass(frozen=True)
class Decision:
    id: str  # the webhook-id: the same for the callback and every long-poll answer
    task_id: str
    source: str
    key: str
    decision: str  # approve | reject | edit | respond
    reason: str
    response: Any
    message: str | None
    decided_at: str
    signers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def approved(self) -> bool:
        return self.decision in ("approve", "edit")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        return cls(
            id=str(data["id"]),
            task_id=str(data["task_id"]),
            source=str(data["source"]),
            key=str(data["key"]),
            decision=str(data["decision"]),
            reason=str(data.get("reason") or ""),
            response=data.get("response"),
            message=data.get("message"),
            decided_at=str(data["decided_at"]),
            signers=list(data.get("signers") or []),
        )


@dataclass(frozen=True)
class ExternalTask:
    id: str
    source: str
    key: str
    status: str
    title: str
    secret: str | None  # only when Gatehouse generated it (keep it: it verifies the decision)
    decision: Decision | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExternalTask:
        return cls(
            id=str(data["id"]),
            source=str(data["source"]),
            key=str(data["key"]),
            status=str(data["status"]),
            title=str(data["title"]),
            secret=data.get("secret"),
            decision=Decision.from_json(data["decision"]) if data.get("decision") else None,
        )


def signature_verify(
    *, secret: str, body: bytes, headers: Mapping[str, str], now: float | None = None
) -> dict[str, Any]:
    """The JSON body if it carries a valid Standard Webhooks signature by ``secret``; else SignatureError.

    Signed content: ``{webhook-id}.{webhook-timestamp}.{body}``, HMAC-SHA256 keyed with the
    base64 part of ``whsec_<base64>``; ``webhook-signature`` lists ``v1,<base64>`` values.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id, stamp, signatures = (lower.get(h, "") for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not (msg_id and stamp and signatures):
        raise SignatureError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        at = int(stamp)
    except ValueError:
        raise SignatureError("webhook-timestamp is not an integer") from None
    if abs((now if now is not None else time.time()) - at) > SIGNATURE_TOLERANCE_SECONDS:
        raise SignatureError("webhook-timestamp is outside the tolerance (replay?)")
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()).decode()
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            data = json.loads(body)
            if not isinstance(data, dict):
                raise SignatureError("the signed body is not a JSON object")
            return data
    raise SignatureError("no valid signature")


class GatehouseClient:
    def __init__(
        self, base_url: str, *, token: str, timeout: float = 30.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GatehouseClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def task_create(
        self,
        *,
        source: str,
        key: str,
        title: str,
        payload: Mapping[str, Any] | None = None,
        summary: str = "",
        response_schema: Mapping[str, Any] | None = None,
        decisions: list[str] | None = None,
        redaction_paths: list[str] | None = None,
        due_at: datetime | None = None,
        required_approvals: int = 1,
        separation_of_duties: bool = False,
        callback_url: str = "",
        secret: str = "",
    ) -> ExternalTask:
        """Create (or, for a key seen before with the same body, fetch) a task. Safe to retry."""
        body: dict[str, Any] = {
            "source": source,
            "key": key,
            "title": title,
            "summary": summary,
            "payload": dict(payload or {}),
            "response_schema": dict(response_schema) if response_schema is not None else None,
            "decisions": decisions or ["approve", "reject"],
            "redaction_paths": redaction_paths or [],
            "due_at": due_at.isoformat() if due_at else None,
            "required_approvals": required_approvals,
            "separation_of_duties": separation_of_duties,
            "callback_url": callback_url,
            "secret": secret,
        }
        return ExternalTask.from_json(self._json(self._http.post("/external-tasks", json=body)))

    def task_get(self, task_id: str) -> ExternalTask:
        return ExternalTask.from_json(self._json(self._http.get(f"/external-tasks/{task_id}")))

    def decision_wait(self, task_id: str, *, timeout: float, secret: str | None = None) -> Decision | None:
        """Long-poll until the decision arrives or ``timeout`` seconds pass (None: still pending).

        With ``secret`` the answer's signature is checked too. Raises TaskGone when the
        task was cancelled. Network errors propagate: the engine's retry policy owns them.
        """
        deadline = time.monotonic() + timeout
        while True:
            wait = max(0.0, min(LONG_POLL_MAX_SECONDS, deadline - time.monotonic()))
            response = self._http.get(
                f"/external-tasks/{task_id}/decision", params={"wait": f"{wait:.2f}"}, timeout=wait + 30
            )
            if response.status_code == 200:
                if secret is not None:
                    return Decision.from_json(
                        signature_verify(secret=secret, body=response.content, headers=response.headers)
                    )
                return Decision.from_json(response.json())
            if response.status_code == 202:
                if time.monotonic() >= deadline:
                    return None
                continue
            if response.status_code == 410:
                body = response.json()
                raise TaskGone(410, "gone", f"the task is {body.get('status')}", None)
            self._json(response)  # raises GatehouseError
            raise GatehouseError(response.status_code, "unexpected", response.text[:200], None)

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                raise GatehouseError(response.status_code, error["code"], error["message"], error.get("field"))
            except (ValueError, KeyError, TypeError):
                raise GatehouseError(response.status_code, "error", response.text[:200], None) from None
        return response.json()
