"""A DBOS workflow that waits for a Gatehouse decision with ``DBOS.recv``.

The workflow opens an external task (a DBOS step: recorded, so a recovered
workflow does not open a second one, and the create is idempotent on the
workflow id anyway), then blocks in ``DBOS.recv``. Gatehouse POSTs the signed
decision to the callback; ``callback_handle`` verifies it and ``DBOS.send``s it
to the workflow whose id is the task's key, with the decision id as the send's
idempotency key, so a retried callback delivers the message once.

Run it: ``python -m examples.dbos.approval_workflow`` with GATEHOUSE_URL,
GATEHOUSE_TOKEN, GATEHOUSE_SOURCE, CALLBACK_URL, CALLBACK_SECRET and
DBOS_SYSTEM_DATABASE_URL set (docs/external-tasks.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dbos import DBOS

from gatehouse_client import GatehouseClient, SignatureError, signature_verify

TOPIC = "gatehouse.decision"


@dataclass
class Settings:
    gatehouse_url: str = os.environ.get("GATEHOUSE_URL", "http://127.0.0.1:8000")
    token: str = os.environ.get("GATEHOUSE_TOKEN", "")
    source: str = os.environ.get("GATEHOUSE_SOURCE", "payments")
    callback_url: str = os.environ.get("CALLBACK_URL", "")
    secret: str = os.environ.get("CALLBACK_SECRET", "")


settings = Settings()


@DBOS.step()
def gatehouse_task_open(wire: dict[str, Any]) -> str:
    with GatehouseClient(settings.gatehouse_url, token=settings.token) as client:
        task = client.task_create(
            source=settings.source,
            key=str(DBOS.workflow_id),  # the callback finds the waiting workflow by this key
            title=f"Release wire {wire['id']} ({wire['amount']} {wire['currency']})",
            payload=wire,
            redaction_paths=["beneficiary.iban"],
            callback_url=settings.callback_url,
            secret=settings.secret,
        )
    return task.id


@DBOS.workflow()
def wire_release(wire: dict[str, Any], timeout_seconds: float = 7 * 24 * 3600) -> dict[str, Any]:
    task_id = gatehouse_task_open(wire)
    decision = DBOS.recv(TOPIC, timeout_seconds=timeout_seconds)
    if decision is None:
        return {"status": "timed_out", "task_id": task_id}
    released = decision["decision"] in ("approve", "edit")
    return {
        "status": "released" if released else "held",
        "task_id": task_id,
        "decision_id": decision["id"],
        "signers": [s["actor"] for s in decision["signers"]],
        "reason": decision["reason"],
    }


def callback_handle(body: bytes, headers: Mapping[str, str]) -> int:
    """The callback endpoint's logic: the HTTP status to answer (2xx stops Gatehouse's retries)."""
    try:
        decision = signature_verify(secret=settings.secret, body=body, headers=headers)
    except SignatureError:
        return 401
    DBOS.send(decision["key"], decision, topic=TOPIC, idempotency_key=decision["id"])
    return 204


class CallbackHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(callback_handle(body, dict(self.headers.items())))
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def callback_server(port: int) -> ThreadingHTTPServer:
    return ThreadingHTTPServer(("127.0.0.1", port), CallbackHandler)


if __name__ == "__main__":
    DBOS(config={"name": "wire-release", "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"]})
    DBOS.launch()
    server = callback_server(int(os.environ.get("CALLBACK_PORT", "8089")))
    handle = DBOS.start_workflow(wire_release, {"id": "w-1", "amount": 12000, "currency": "EUR"})
    print("waiting for a decision on workflow", handle.workflow_id)
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(handle.get_result())
