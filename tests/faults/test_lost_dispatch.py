"""Lost dispatch: a run committed to the database whose Celery message never arrived is swept and completed."""

from __future__ import annotations

import pytest

from console.celery import broker_eviction_warning
from runtime.models import Run
from tests.conftest import pending_tasks, thread_start
from tests.faults.conftest import broker_client, queue_flush, queue_length

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def test_a_run_whose_message_the_broker_lost_is_redispatched_by_the_sweeper(fault_worker, operator, reviewer):
    worker = fault_worker(start=False)  # nothing consumes the queue yet
    thread = thread_start(
        operator, "loan_approval", {"applicant": "Lost", "loan_id": "L-lost", "amount": 20000, "income": 40000}
    )
    run = Run.objects.get(pk=thread["run_id"])
    assert run.status == "queued" and run.dispatched_at is not None  # committed, then sent
    assert queue_length() >= 1

    assert queue_flush() >= 1  # the broker restarted without persistence: the message is gone
    assert queue_length() == 0
    worker.start()

    [task] = pending_tasks(reviewer, thread["id"], timeout=30)  # the sweeper (beat) re-sent it
    run.refresh_from_db()
    assert run.status == "interrupted" and run.attempts == 1
    assert task["thread_id"] == thread["id"]


def test_a_run_never_dispatched_after_commit_is_found_by_the_sweeper(fault_worker, operator, reviewer, monkeypatch):
    fault_worker()
    # The web process died between COMMIT and the on_commit dispatch.
    monkeypatch.setattr("runtime.runs.run_dispatch", lambda **_: None)
    thread = thread_start(
        operator, "loan_approval", {"applicant": "Never", "loan_id": "L-never", "amount": 20000, "income": 40000}
    )
    monkeypatch.undo()
    run = Run.objects.get(pk=thread["run_id"])
    assert run.status == "queued" and run.dispatched_at is not None  # stamped at commit: sent, as far as it knows

    pending_tasks(reviewer, thread["id"], timeout=30)
    first_stamp = run.dispatched_at
    run.refresh_from_db()
    assert run.status == "interrupted" and run.attempts == 1
    assert run.dispatched_at > first_stamp  # the sweeper's re-send moved the stamp


def test_the_test_broker_never_evicts_queue_keys():
    client = broker_client()
    try:
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        assert broker_eviction_warning(client) is None
    finally:
        client.close()


class _Redis:
    def __init__(self, policy: str | None = None, error: Exception | None = None) -> None:
        self.policy, self.error = policy, error

    def config_get(self, name: str) -> dict[str, str]:
        if self.error:
            raise self.error
        return {name: self.policy} if self.policy else {}


@pytest.mark.parametrize(
    "client,warns",
    [
        (_Redis("noeviction"), False),
        (_Redis("allkeys-lru"), True),
        (_Redis("volatile-ttl"), True),
        (_Redis(error=PermissionError("CONFIG is disabled")), False),  # managed Redis: cannot tell
    ],
)
def test_the_worker_warns_when_redis_may_evict_queue_keys(client, warns):
    warning = broker_eviction_warning(client)
    assert bool(warning) is warns
    if warns:
        assert "noeviction" in warning and client.policy in warning


def test_the_worker_start_check_asks_the_real_broker_and_logs_the_warning(monkeypatch, caplog):
    import console.celery

    asked: list[object] = []

    def fake_warning(client: object) -> str:
        asked.append(client.config_get("maxmemory-policy"))  # a live round trip to the broker
        return "Redis maxmemory-policy is 'allkeys-lru'"

    monkeypatch.setattr(console.celery, "broker_eviction_warning", fake_warning)
    with caplog.at_level("WARNING", logger="gatehouse.worker"):
        console.celery._check_broker_eviction()
    assert asked == [{"maxmemory-policy": "noeviction"}]
    assert "allkeys-lru" in caplog.text
