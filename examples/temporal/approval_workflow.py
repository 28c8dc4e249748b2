"""A Temporal workflow that waits for a Gatehouse decision in an activity.

The activity opens an external task (idempotent on ``workflow_id:activity_id``,
so a retried attempt finds the same task) and long-polls for the decision,
heartbeating between polls: the workflow's heartbeat timeout notices a dead
worker, and the retry policy starts a new attempt that picks up the same task.
Temporal's own durability keeps the workflow waiting for days; Gatehouse keeps
the task, the reviewers' signatures and the audit.

Run a worker: ``python -m examples.temporal.approval_workflow`` with
GATEHOUSE_URL, GATEHOUSE_TOKEN, GATEHOUSE_SOURCE and TEMPORAL_ADDRESS set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import CancelledError

with workflow.unsafe.imports_passed_through():
    from gatehouse_client import GatehouseClient

POLL_SECONDS = 20.0  # one long-poll, shorter than the heartbeat timeout below


@dataclass
class Settings:
    gatehouse_url: str = os.environ.get("GATEHOUSE_URL", "http://127.0.0.1:8000")
    token: str = os.environ.get("GATEHOUSE_TOKEN", "")
    source: str = os.environ.get("GATEHOUSE_SOURCE", "payments")


settings = Settings()


@dataclass
class ApprovalRequest:
    title: str
    payload: dict[str, Any]
    decisions: list[str] = field(default_factory=lambda: ["approve", "reject"])
    redaction_paths: list[str] = field(default_factory=list)


# Cancellation is cooperative: the loop below checks for it after every heartbeat, at most one long poll
# late. Temporal's default for a sync activity raises CancelledError into its thread asynchronously,
# wherever that thread happens to be: mid-request, or inside a garbage-collection finalizer, where it is
# lost (it failed the example's test now and then as an "exception ignored in finalize").
@activity.defn(no_thread_cancel_exception=True)
def gatehouse_decision(request: ApprovalRequest) -> dict[str, Any]:
    """Open the task (idempotently) and wait for its decision; returns the signed decision's fields."""
    info = activity.info()
    with GatehouseClient(settings.gatehouse_url, token=settings.token) as client:
        task = client.task_create(
            source=settings.source,
            key=f"{info.workflow_id}:{info.activity_id}",
            title=request.title,
            payload=request.payload,
            decisions=request.decisions,
            redaction_paths=request.redaction_paths,
        )
        while True:
            activity.heartbeat(task.id)
            if activity.is_cancelled():
                raise CancelledError("the workflow no longer waits for this decision")
            decision = client.decision_wait(task.id, timeout=POLL_SECONDS, secret=task.secret)
            if decision is not None:
                return {
                    "id": decision.id,
                    "decision": decision.decision,
                    "reason": decision.reason,
                    "response": decision.response,
                    "signers": [s["actor"] for s in decision.signers],
                }


def outcome(decision: dict[str, Any]) -> str:
    return "released" if decision["decision"] in ("approve", "edit") else "held"


@workflow.defn
class WireRelease:
    @workflow.run
    async def run(self, wire: dict[str, Any]) -> dict[str, Any]:
        decision = await workflow.execute_activity(
            gatehouse_decision,
            ApprovalRequest(title=f"Release wire {wire['id']}", payload=wire, redaction_paths=["beneficiary.iban"]),
            start_to_close_timeout=timedelta(days=7),
            heartbeat_timeout=timedelta(seconds=POLL_SECONDS * 3),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=5), maximum_interval=timedelta(minutes=5)),
        )
        return {"status": outcome(decision), **decision}


async def main() -> None:  # pragma: no cover - needs a Temporal server
    from concurrent.futures import ThreadPoolExecutor

    from temporalio.client import Client
    from temporalio.worker import Worker

    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"))
    with ThreadPoolExecutor(max_workers=8) as executor:
        worker = Worker(
            client,
            task_queue="wire-release",
            workflows=[WireRelease],
            activities=[gatehouse_decision],
            activity_executor=executor,
        )
        await worker.run()


if __name__ == "__main__":  # pragma: no cover
    import asyncio

    asyncio.run(main())
