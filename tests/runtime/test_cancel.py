"""``runtime.cancel`` guard by guard, in-process: a cancelled run's worker can change nothing.

The end-to-end version with the real worker is tests/integration/test_cancel_running.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from langgraph.graph import END, START, StateGraph

from runtime.cancel import (
    CancelRefused,
    RunCancelled,
    checkpoints_of_run,
    run_cancel,
    run_cancel_acknowledge,
    run_cancel_check,
    run_cancel_settle,
    run_rollback_unfinished,
)
from runtime.checkpointer import checkpointer_get, saver_blobs
from runtime.effects import perform_effect
from runtime.fencing import FENCE_KEY, LeaseLost
from runtime.models import Effect, Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.runs import RunOutcome, lease_renew, run_claim, run_fail, run_finish, run_release
from tests.conftest import runs_settle

pytestmark = pytest.mark.usefixtures("live_db")


def _claimed(kind: str = RunKind.START) -> Run:
    thread = Thread.objects.create(graph="zombie_pay", status=ThreadStatus.BUSY)
    run = Run.objects.create(thread=thread, kind=kind, input={})
    claimed = run_claim(run_id=str(run.id), worker="host:1:a")
    assert claimed is not None
    return claimed


def _cancel(run: Run, action: str = "interrupt", reason: str = "") -> Run:
    with transaction.atomic():
        return run_cancel(run=run, action=action, actor_label="op", reason=reason)


def _config(run: Run) -> Any:
    return {"configurable": {"thread_id": str(run.thread_id), FENCE_KEY: run.fence, "gatehouse_run_id": str(run.id)}}


def _graph(calls: list[str] | None = None) -> Any:
    def step(state: dict[str, Any]) -> dict[str, Any]:
        if calls is not None:
            return {"n": perform_effect("charge", lambda key: calls.append(key) or 1)}
        return {"n": state.get("n", 0) + 1}

    builder: StateGraph[Any] = StateGraph(dict)  # type: ignore[type-var]
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=checkpointer_get() if calls is None else None)


def _rows(thread_id: Any) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", [str(thread_id)])
        return int(cursor.fetchone()[0])


def test_a_cancelled_running_run_records_who_why_and_the_action():
    run = _claimed()
    cancelled = _cancel(run, reason="wrong payee")
    assert cancelled.status == RunStatus.CANCELLED and cancelled.cancel_action == "interrupt"
    assert cancelled.cancelled_by == "op" and cancelled.cancel_reason == "wrong payee"
    assert cancelled.error == "cancelled by op (interrupt): wrong payee"
    thread = Thread.objects.get(pk=run.thread_id)
    assert thread.status == ThreadStatus.IDLE and thread.fence == run.fence + 1


def test_the_cancelled_worker_can_renew_finish_fail_or_hand_back_nothing():
    run = _claimed()
    _cancel(run)
    with pytest.raises(LeaseLost):
        lease_renew(run=run)
    with pytest.raises(LeaseLost):
        run_finish(run=run, outcome=RunOutcome(RunStatus.SUCCEEDED, "", {"n": 1}))
    with pytest.raises(LeaseLost):
        run_fail(run=run, error="boom")
    assert run_release(run=run, error="transient") is False
    assert run_claim(run_id=str(run.id), worker="host:2:b") is None
    after = Run.objects.get(pk=run.pk)
    assert after.status == RunStatus.CANCELLED and after.error == "cancelled by op (interrupt)"


def test_the_cancelled_worker_writes_no_checkpoint():
    run = _claimed()
    graph = _graph()
    graph.invoke({"n": 0}, _config(run), durability="sync")
    before = _rows(run.thread_id)
    _cancel(run)
    with pytest.raises(LeaseLost):
        graph.invoke({"n": 5}, _config(run), durability="sync")
    assert _rows(run.thread_id) == before


def test_the_cancelled_worker_starts_no_effect():
    run = _claimed()
    _cancel(run)
    calls: list[str] = []
    with pytest.raises(LeaseLost):
        _graph(calls).invoke({}, _config(run))
    assert calls == [] and not Effect.objects.filter(thread_id=run.thread_id).exists()


def test_the_worker_notices_between_steps_and_only_its_claim_acknowledges():
    run = _claimed()
    run_cancel_check(run=run)  # not cancelled: nothing happens
    _cancel(run)
    with pytest.raises(RunCancelled, match="cancelled by op"):
        run_cancel_check(run=run)
    stranger = Run.objects.get(pk=run.pk)
    stranger.lease_owner = "host:9:z"
    assert run_cancel_acknowledge(run=stranger) is False
    assert run_cancel_acknowledge(run=run) is True
    assert Run.objects.get(pk=run.pk).lease_owner == ""


def test_rollback_removes_only_the_cancelled_runs_checkpoints():
    earlier = _claimed()
    graph = _graph()
    graph.invoke({"n": 0}, _config(earlier), durability="sync")
    Run.objects.filter(pk=earlier.pk).update(status=RunStatus.SUCCEEDED)
    start = graph.get_state({"configurable": {"thread_id": str(earlier.thread_id)}})
    run = Run.objects.create(thread_id=earlier.thread_id, kind=RunKind.START, input={})
    run = run_claim(run_id=str(run.id), worker="host:1:a")
    assert run is not None
    graph.invoke({"n": 10}, _config(run), durability="sync")
    assert checkpoints_of_run(checkpointer_get(), str(run.thread_id), str(run.id))
    _cancel(run, "rollback")
    # Busy until the checkpoints are gone: no new run builds on them meanwhile; a repeated cancel finishes it.
    assert Thread.objects.get(pk=run.thread_id).status == ThreadStatus.BUSY
    assert run_rollback_unfinished(run=Run.objects.get(pk=run.pk))
    assert run_cancel_settle(run=run) > 0
    assert Thread.objects.get(pk=run.thread_id).status == ThreadStatus.IDLE
    assert not run_rollback_unfinished(run=Run.objects.get(pk=run.pk))
    assert run_cancel_settle(run=run) == 0  # idempotent
    now = graph.get_state({"configurable": {"thread_id": str(run.thread_id)}})
    assert now.config["configurable"]["checkpoint_id"] == start.config["configurable"]["checkpoint_id"]
    assert now.values == start.values == {"n": 1}
    # The listing snapshot follows (its values are read through the registered graph's schema).
    assert Thread.objects.get(pk=run.thread_id).checkpoint_id == start.config["configurable"]["checkpoint_id"]


def test_a_queued_start_run_is_cancelled_before_any_worker_takes_it():
    thread = Thread.objects.create(graph="zombie_pay", status=ThreadStatus.BUSY)
    run = Run.objects.create(thread=thread, kind=RunKind.START, input={})
    _cancel(run)
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    assert run_claim(run_id=str(run.id), worker="host:1:a") is None
    assert Thread.objects.get(pk=thread.pk).status == ThreadStatus.IDLE


@pytest.mark.parametrize(
    "status,kind,action,field",
    [
        (RunStatus.SUCCEEDED, RunKind.START, "interrupt", "run_id"),
        (RunStatus.QUEUED, RunKind.RESUME, "interrupt", "run_id"),
        (RunStatus.RUNNING, RunKind.RESUME, "rollback", "action"),
        (RunStatus.RUNNING, RunKind.START, "explode", "action"),
    ],
)
def test_what_cannot_be_cancelled_is_refused_and_changes_nothing(status, kind, action, field):
    thread = Thread.objects.create(graph="zombie_pay", status=ThreadStatus.BUSY)
    run = Run.objects.create(thread=thread, kind=kind, status=status, input={})
    try:
        with pytest.raises(CancelRefused) as refused:
            _cancel(run, action)
        assert refused.value.field == field
        assert Run.objects.get(pk=run.pk).status == status
        assert Thread.objects.get(pk=thread.pk).fence == 0
    finally:
        # A running run without a lease no sweeper ends: a later test that waits for runs to settle waited on it.
        runs_settle([run.pk])


def test_sqlite_rollback_finds_and_removes_only_the_runs_checkpoints(tmp_path):
    import sqlite3
    import uuid

    from runtime.retention import thread_checkpoints_delete
    from runtime.savers import GatehouseSqliteSaver

    saver = GatehouseSqliteSaver(
        sqlite3.connect(tmp_path / "checkpoints.sqlite3", check_same_thread=False), blobs=saver_blobs()
    )
    graph = _graph().copy(update={"checkpointer": saver})
    thread_id = str(uuid.uuid4())

    def config(run_id: str) -> Any:
        return {"configurable": {"thread_id": thread_id, "gatehouse_run_id": run_id}}

    graph.invoke({"n": 0}, config("first"), durability="sync")
    start = graph.get_state({"configurable": {"thread_id": thread_id}})
    graph.invoke({"n": 10}, config("second"), durability="sync")
    doomed = checkpoints_of_run(saver, thread_id, "second")
    assert doomed and all(ns == "" for ns, _ in doomed)
    thread_checkpoints_delete(saver, thread_id, doomed)
    assert checkpoints_of_run(saver, thread_id, "second") == []
    now = graph.get_state({"configurable": {"thread_id": thread_id}})
    assert now.config["configurable"]["checkpoint_id"] == start.config["configurable"]["checkpoint_id"]
    assert now.values == {"n": 1}
