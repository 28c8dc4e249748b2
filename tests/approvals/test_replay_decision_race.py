"""A decision and a replay (or fork) of the same paused thread sent together. The decision locks its task,
then the thread; the replay locked the thread, then the thread's pending tasks to supersede them. Opposite
orders: PostgreSQL ended one as a deadlock, answered 503 "the database cannot be reached" (found by an
outside race test, 2 of 12 pairs). The race is forced: the replay is held with the thread locked until the
decision is seen waiting in PostgreSQL. One of them wins; the other is refused as a conflict."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections

from approvals import time_travel
from approvals.models import ApprovalTask, TaskStatus
from runtime.executor import run_execute
from tests.conftest import api_decide, loan_input, scaled, session_waits_on_lock, thread_start, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def test_a_decision_racing_a_replay_is_a_conflict_not_a_deadlock(operator, reviewer, monkeypatch, dispatched):
    thread_id = thread_start(operator, "loan_approval", loan_input())["id"]
    run_execute(run_id=dispatched[-1])
    task = ApprovalTask.objects.get(thread_id=thread_id, status=TaskStatus.PENDING)
    history = operator.client.post(f"/lg/threads/{thread_id}/history", {"limit": 100}).json()
    parent = history[1]["checkpoint"]["checkpoint_id"]

    held, release = threading.Event(), threading.Event()
    replay = time_travel.branch_replay

    def replay_held(**kwargs: Any) -> Any:
        branch = replay(**kwargs)  # the thread row is locked now, in the replay's open transaction
        held.set()
        assert release.wait(scaled(60))
        return branch

    monkeypatch.setattr(time_travel, "branch_replay", replay_held)
    answers: dict[str, Any] = {}
    pids: dict[str, int] = {}

    def send(name: str) -> None:
        try:
            connection.ensure_connection()
            pids[name] = connection.connection.info.backend_pid
            if name == "replay":
                body = {"checkpoint_id": parent, "reason": "race"}
                answers[name] = operator.client.post(f"/api/threads/{thread_id}/replay", body)
            else:
                answers[name] = api_decide(reviewer, task, "approve", reason="race")
        finally:
            connections.close_all()

    first = threading.Thread(target=send, args=("replay",))
    first.start()
    assert held.wait(scaled(60))
    second = threading.Thread(target=send, args=("decision",))
    second.start()

    wait_for(
        lambda: session_waits_on_lock(pids.get("decision")),
        timeout=60,
        what="the decision waiting for the replay's locks",
    )
    release.set()
    first.join(scaled(60))
    second.join(scaled(60))

    assert answers["replay"].status_code == 202, answers["replay"].content
    assert answers["decision"].status_code == 409, answers["decision"].content  # the task was superseded
    assert ApprovalTask.objects.get(pk=task.pk).status == TaskStatus.SUPERSEDED
