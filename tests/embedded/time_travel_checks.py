"""Time travel on the embedded stack (SQLite database and checkpointer, SQLite broker): a fork pays anew, once.

Called by ``test_embedded_flow`` on its stack: a stack of its own would cost a
minute of the suite for a few seconds of checks.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import scaled, wait_for


def fork_pays_anew_once(embedded: dict[str, str], bank: Any) -> None:
    base = embedded["base"]
    operator = httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {embedded['operator']}"}, timeout=scaled(10)
    )
    reviewer = httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {embedded['reviewer']}"}, timeout=scaled(10)
    )
    loan = {"applicant": "Embedded", "loan_id": "E-TT", "amount": 20000, "income": 40000}
    thread_id = operator.post("/api/threads", json={"graph": "loan_approval", "input": loan}).json()["id"]

    def pending(exclude: str = "") -> dict | None:
        items = reviewer.get("/api/tasks", params={"status": "pending", "thread": thread_id}).json()["items"]
        fresh = [t for t in items if t["id"] != exclude]
        return fresh[0] if fresh else None

    def completed() -> dict | None:
        body = reviewer.get(f"/api/threads/{thread_id}").json()
        return body if body["status"] == "completed" else None

    first = wait_for(pending, timeout=30, what="the first task")
    checkpoint = reviewer.get(f"/api/tasks/{first['id']}").json()["checkpoint_id"]
    assert reviewer.post(f"/api/tasks/{first['id']}/decision", json={"decision": "approve"}).status_code == 201
    wait_for(completed, timeout=30, what="the original line to complete")

    forked = operator.post(
        f"/api/threads/{thread_id}/fork",
        json={"checkpoint_id": checkpoint, "values": {"amount": 19000}, "reason": "embedded fork", "run": True},
    )
    assert forked.status_code == 201, forked.text
    branch = forked.json()["id"]
    second = wait_for(lambda: pending(exclude=first["id"]), timeout=30, what="the fork's task")
    assert reviewer.post(f"/api/tasks/{second['id']}/decision", json={"decision": "approve"}).status_code == 201
    done = wait_for(completed, timeout=30, what="the fork to complete")

    assert done["values"]["amount"] == 19000 and done["values"]["status"] == "disbursed"
    assert bank.ledger.executions[f"gh:{thread_id}:disburse"] == 1
    assert bank.ledger.executions[f"gh:{thread_id}:disburse@{branch}"] == 1
    assert [b["id"] for b in reviewer.get(f"/api/threads/{thread_id}/branches").json()] == [branch]
