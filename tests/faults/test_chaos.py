"""Chaos: hundreds of loan threads driven through the API while their worker is SIGKILLed at random moments.

A killer thread SIGKILLs the dedicated worker's whole process group a bounded
number of times and restarts it. Kill points come from a seeded RNG (the seed
is printed; set GATEHOUSE_CHAOS_SEED to replay a run) in three kinds:

- ``random``: at a random moment: before, during or after any node, between
  checkpoint writes, while a run is being claimed or finished;
- ``bank-call``: while a disbursement call is in flight at the (slow) bank, so
  the payment may execute after its caller died: the side effect happened and
  its ledger record did not;
- ``bank-done``: right after the bank executed a payment, racing the ledger
  record and the checkpoint write that follow it.

At the end every thread completed, exactly one approval task per thread,
every payment executed exactly once at the bank, no run left queued or running.

GATEHOUSE_CHAOS_THREADS (default 200) and GATEHOUSE_CHAOS_KILLS (default 10)
size it; the defaults keep the test near a minute on two cores.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from typing import Any

import pytest
from django.db.models import Count

from approvals.models import ApprovalTask
from runtime.models import Effect, Run, Thread
from tests.conftest import api_decide, loan_input, scaled, thread_start
from tests.faults.conftest import FaultWorker

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.usefixtures("live_db")]

THREADS = int(os.environ.get("GATEHOUSE_CHAOS_THREADS", "200"))
KILLS = int(os.environ.get("GATEHOUSE_CHAOS_KILLS", "10"))
DEADLINE_SECONDS = float(os.environ.get("GATEHOUSE_CHAOS_DEADLINE", "200"))
BANK_LATENCY_MS = 40


class Killer(threading.Thread):
    """SIGKILLs and restarts the worker ``kills`` times at seeded-random moments, then leaves it running."""

    def __init__(self, worker: FaultWorker, bank: Any, rng: random.Random, kills: int) -> None:
        super().__init__(name="chaos-killer", daemon=True)
        self.worker, self.bank, self.rng, self.kills = worker, bank, rng, kills
        self.done = threading.Event()  # set by the driver when every thread completed
        self.modes: Counter[str] = Counter()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for _ in range(self.kills):
                if self.done.wait(self.rng.uniform(0.3, 1.5)):  # let the worker make progress first
                    return
                mode = self.rng.choice(["random", "random", "bank-call", "bank-done"])
                if not self._aim(mode):
                    mode = "random"  # nothing reached the bank in time: kill wherever it is
                self.worker.kill()
                self.modes[mode] += 1
                time.sleep(self.rng.uniform(0.0, 0.5))
                self.worker.start()
        except BaseException as exc:  # reported by the driver
            self.error = exc
        finally:
            if not self.worker.alive and not self.done.is_set():
                try:
                    self.worker.start()
                except BaseException as exc:
                    self.error = self.error or exc

    def _aim(self, mode: str) -> bool:
        ledger = self.bank.ledger
        if mode == "random":
            time.sleep(self.rng.uniform(0.0, 0.3))
            return True
        before = ledger.requests if mode == "bank-call" else sum(ledger.executions.values())
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and not self.done.is_set():
            now = ledger.requests if mode == "bank-call" else sum(ledger.executions.values())
            if now > before:
                return True
            time.sleep(0.002)
        return False


def test_threads_complete_exactly_once_while_the_worker_is_killed_at_random(
    fault_worker, operator, reviewer, bank, capsys
):
    seed = int(os.environ.get("GATEHOUSE_CHAOS_SEED") or random.randrange(2**32))
    with capsys.disabled():
        print(f"\nchaos: seed={seed} threads={THREADS} kills={KILLS} (replay with GATEHOUSE_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    worker = fault_worker(
        # Never dead-letter here: every run must survive however often it is hit.
        GATEHOUSE_MAX_RUN_ATTEMPTS=str(KILLS + 3),
        GATEHOUSE_RETRY_BACKOFF_SECONDS="0.1",
        GATEHOUSE_RETRY_BACKOFF_MAX_SECONDS="1",
    )
    killer = Killer(worker, bank, rng, KILLS)
    bank.latency_ms = BANK_LATENCY_MS
    started = time.monotonic()
    ids: list[str] = []
    try:
        killer.start()
        for i in range(THREADS):
            ids.append(thread_start(operator, "loan_approval", loan_input(applicant=f"Chaos {i}"))["id"])
        outcome = _drive(reviewer, ids, killer, deadline=started + scaled(DEADLINE_SECONDS))
    finally:
        killer.done.set()
        killer.join(timeout=scaled(60))
        bank.latency_ms = 0
    elapsed = time.monotonic() - started

    assert killer.error is None, f"the killer failed: {killer.error!r}\n{worker.log_tail()}"
    failed = [_story(t) for t in Thread.objects.filter(pk__in=ids, status="failed")[:3]]
    assert outcome == "completed", f"{outcome}; statuses: {_statuses(ids)}; failed: {failed}\n{worker.log_tail()}"

    keys = [f"gh:{thread_id}:disburse" for thread_id in ids]
    runs = Run.objects.filter(thread_id__in=ids)
    stats = {
        "threads": len(ids),
        "kills": sum(killer.modes.values()),
        "kill_modes": dict(killer.modes),
        "runs": runs.count(),
        "redeliveries": runs.filter(attempts__gt=1).count(),
        "extra_attempts": sum(max(r.attempts - 1, 0) for r in runs.only("attempts")),
        "bank_replays": sum(bank.ledger.received.get(k, 0) - bank.ledger.executions.get(k, 0) for k in keys),
        "seconds": round(elapsed, 1),
    }
    with capsys.disabled():
        print(f"chaos: {stats}")

    # Every thread completed ...
    assert Thread.objects.filter(pk__in=ids, status="completed").count() == THREADS
    odd = Thread.objects.filter(pk__in=ids).exclude(values__status="disbursed")
    assert not odd.exists(), [_story(t) for t in odd[:3]]
    # ... with exactly one approval task each ...
    per_thread = ApprovalTask.objects.filter(thread_id__in=ids).values("thread_id").annotate(n=Count("id"))
    assert sorted(row["n"] for row in per_thread) == [1] * THREADS
    # ... every payment executed exactly once at the bank, and recorded once in the ledger ...
    assert {k: bank.ledger.executions.get(k, 0) for k in keys} == dict.fromkeys(keys, 1)
    effects = Effect.objects.filter(key__in=keys)
    assert effects.count() == THREADS and not effects.exclude(status="done").exists()
    # ... and nothing left claimed, queued or failed.
    assert not runs.filter(status__in=["queued", "running", "failed"]).exists()
    assert stats["kills"] >= min(KILLS, 3)  # the faults really happened


def _drive(reviewer: Any, ids: list[str], killer: Killer, *, deadline: float) -> str:
    """Approve each thread's task as it appears, until every thread completed (or something went wrong)."""
    decided: set[str] = set()
    while time.monotonic() < deadline:
        if killer.error is not None:
            return "killer failed"
        pending = ApprovalTask.objects.filter(thread_id__in=ids, status="pending").exclude(id__in=decided)
        for task_id in pending.values_list("id", flat=True)[:50]:
            response = api_decide(reviewer, task_id)
            if response.status_code == 201:
                decided.add(str(task_id))
            elif response.status_code != 409:  # 409: decided meanwhile, or a run is active; look again later
                return f"decision on task {task_id} refused: {response.status_code} {response.content[:300]!r}"
        statuses = _statuses(ids)
        if statuses.get("failed"):
            return f"{statuses['failed']} thread(s) failed"
        if statuses.get("completed") == len(ids):
            killer.done.set()
            return "completed"
        time.sleep(0.2)
    return "deadline passed"


def _story(thread: Thread) -> dict[str, Any]:
    """What happened to one thread, for a failure message."""
    runs = thread.runs.order_by("created_at").values("kind", "status", "attempts", "error", "lease_owner")
    tasks = ApprovalTask.objects.filter(thread=thread).values("status", "interrupt_id")
    return {
        "id": str(thread.id),
        "status": thread.status,
        "values": thread.values,
        "runs": list(runs),
        "tasks": list(tasks),
    }


def _statuses(ids: list[str]) -> dict[str, int]:
    rows = Thread.objects.filter(pk__in=ids).values("status").annotate(n=Count("id"))
    return {row["status"]: row["n"] for row in rows}
