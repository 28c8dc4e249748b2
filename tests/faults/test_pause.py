"""Pause faults: a worker frozen mid-run (SIGSTOP: a long GC, a VM migration) or cut off from PostgreSQL
past its lease, while another worker takes the run over and completes it; then the first one wakes up.

The zombie must change nothing: its heartbeat, checkpoint writes, outcome, task
creation and effects are refused (or absorbed by the effect's idempotency key),
the thread's state and checkpoint history are the second worker's, and the
zombie logs that it lost the lease and goes on to serve new runs.

Each test stops the first worker at an exact point with the ``zombie_pay`` test
graph (tests/graphs/zombie.py): a node announces that it reached a hold point
(a file) and waits for the test to let it go. Both workers run the same graph,
so the second worker stops at the same point too, and the test decides who
goes first. No sleeps: every wait is a condition with a deadline.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now

from approvals.models import ApprovalTask, AuditEvent
from runtime.fencing import FENCE_KEY
from runtime.models import Effect, Run, RunStatus
from runtime.registry import graph_get
from tests.conftest import api_decide, pending_tasks, thread_settled, thread_start, wait_for
from tests.faults.conftest import FaultWorker
from tests.faults.holds import hold_reached, hold_release, logged, pay_input, signal_group
from tests.faults.proxy import PausableProxy

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.usefixtures("live_db")]

ENV = {"GATEHOUSE_RETRY_BACKOFF_SECONDS": "0.2"}


def _lapsed(run_id: Any) -> bool:
    return Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_expires_at__lt=Now()).exists()


def _store(thread_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The thread's checkpoints (with the fence that wrote each) and pending writes, as stored."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT checkpoint_ns, checkpoint_id, metadata ->> %s FROM checkpoints WHERE thread_id = %s "
            "ORDER BY checkpoint_ns, checkpoint_id",
            [FENCE_KEY, thread_id],
        )
        checkpoints = [tuple(row) for row in cursor.fetchall()]
        cursor.execute(
            "SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, type, md5(blob) FROM checkpoint_writes "
            "WHERE thread_id = %s ORDER BY checkpoint_ns, checkpoint_id, task_id, idx",
            [thread_id],
        )
        return checkpoints, [tuple(row) for row in cursor.fetchall()]


def _run_row(run_id: Any) -> tuple[Any, ...]:
    # Not lease_expires_at: the new holder's heartbeat keeps moving it.
    fields = ("status", "fence", "attempts", "lease_owner", "error", "finished_at")
    return tuple(Run.objects.filter(pk=run_id).values_list(*fields).get())


def _owner_pid(run: Run) -> int:
    return int(run.lease_owner.split(":")[1])


@pytest.fixture
def hold_dir(tmp_path: Path) -> Path:
    path = tmp_path / "holds"
    path.mkdir()
    return path


@pytest.fixture
def frozen() -> Iterator[list[FaultWorker]]:
    """Workers the test froze; thawed at the end whatever happened, so they can be stopped."""
    stopped: list[FaultWorker] = []
    yield stopped
    for worker in stopped:
        if worker.alive:
            signal_group(worker, signal.SIGCONT)


def _take_over(
    fault_worker: Any,
    frozen: list[FaultWorker],
    hold_dir: Path,
    point: str,
    zombie: FaultWorker,
    run: Run,
    *,
    cut: PausableProxy | None = None,
) -> tuple[FaultWorker, int, int]:
    """Freeze ``zombie`` (or cut its database link) where it holds, until its lease lapses and a second
    worker claimed the run and reached the same point. Returns (second worker, zombie pid, its pid)."""
    zombie_pid = wait_for(lambda: hold_reached(hold_dir, point), timeout=40, what=f"the first worker at {point}")
    assert zombie.proc is not None and zombie_pid == zombie.proc.pid
    if cut is not None:
        cut.pause()
    else:
        signal_group(zombie, signal.SIGSTOP)
        frozen.append(zombie)
    wait_for(lambda: _lapsed(run.id), timeout=15, what="the first worker's lease to lapse")
    successor = fault_worker(**ENV)
    successor_pid = wait_for(
        lambda: hold_reached(hold_dir, point, besides=zombie_pid), timeout=40, what=f"the second worker at {point}"
    )
    run.refresh_from_db()
    assert _owner_pid(run) == successor_pid and run.attempts == 2
    return successor, zombie_pid, successor_pid


def _wake(zombie: FaultWorker, run: Run, *, cut: PausableProxy | None = None) -> None:
    if cut is not None:
        cut.resume()
    else:
        signal_group(zombie, signal.SIGCONT)
    wait_for(
        lambda: logged(zombie, f"run {run.id}: heartbeat refused, the lease is lost"),
        timeout=15,
        what="the zombie's heartbeat to be refused",
    )


def _assert_zombie_gave_up(zombie: FaultWorker, run: Run) -> None:
    wait_for(
        lambda: logged(zombie, f"run {run.id}: lease lost (fence {run.fence - 1})"),
        timeout=15,
        what="the zombie to log that it lost the lease and leave the run",
    )


def _assert_trail_shows_the_takeover(run: Run, zombie_pid: int, successor_pid: int) -> None:
    """The audit trail, not only the workers' logs, says the lease lapsed, the sweeper re-sent the run, and
    the zombie's claim (its fence) was refused while the successor held it."""
    zombie_fence = run.fence - 1

    def trail() -> list[AuditEvent] | None:
        events = list(AuditEvent.objects.filter(subject_type="run", subject_id=str(run.id)).order_by("id"))
        return events if any(e.action == "run.lease_lost" for e in events) else None

    events = wait_for(trail, timeout=15, what="the zombie's run.lease_lost on the trail")
    steps = [(e.action, e.details.get("fence")) for e in events if e.action.startswith("run.")]
    lapse_and_loss = [
        ("run.claimed", zombie_fence),
        ("run.lease_lapsed", zombie_fence),
        ("run.claimed", run.fence),
        ("run.lease_lost", zombie_fence),
    ]
    assert [step for step in steps if step in lapse_and_loss] == lapse_and_loss, steps
    [lapsed] = [e for e in events if e.action == "run.lease_lapsed"]
    assert lapsed.actor_label == "runtime" and lapsed.details["attempt"] == 1
    assert f":{zombie_pid}:" in lapsed.details["owner"]
    [lost] = [e for e in events if e.action == "run.lease_lost"]
    assert f":{zombie_pid}:" in lost.actor_label and lost.details["attempt"] == 1
    assert lost.details["now_held_by"]["fence"] == run.fence
    assert f":{successor_pid}:" in lost.details["now_held_by"]["owner"]


def _assert_written_by(thread_id: str, takeover: set[tuple[Any, ...]], fence: int) -> None:
    """Every checkpoint that appeared after the takeover was written under the takeover's fence or a later one."""
    checkpoints, _ = _store(thread_id)
    later = [row for row in checkpoints if row not in takeover]
    assert later, "no checkpoint was written after the takeover"
    assert all(int(row[2]) >= fence for row in later), later


def _assert_zombie_serves_new_runs(zombie: FaultWorker, successor: FaultWorker, operator: Any, hold_dir: Path) -> None:
    successor.stop()
    thread = thread_start(operator, "zombie_pay", {**pay_input(hold_dir, "none"), "payment_id": "P-after"})
    done = thread_settled(operator, thread["id"], timeout=40)
    assert done["status"] == "completed", done
    assert zombie.proc is not None and done["values"]["paid_by"] == zombie.proc.pid
    assert Run.objects.get(thread_id=thread["id"]).attempts == 1


def _pause_before_the_effect(fault_worker, frozen, operator, bank, hold_dir, *, cut_link: bool) -> None:
    proxy = None
    env = dict(ENV)
    if cut_link:
        db = connection.settings_dict
        proxy = PausableProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
        env["DATABASE_URL"] = f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}"
    try:
        zombie = fault_worker(**env)
        thread = thread_start(operator, "zombie_pay", pay_input(hold_dir, "before_effect"))
        run = Run.objects.get(thread_id=thread["id"])
        key = f"gh:{thread['id']}:pay"
        successor, zombie_pid, successor_pid = _take_over(
            fault_worker, frozen, hold_dir, "before_effect", zombie, run, cut=proxy
        )
        if cut_link:
            # The zombie goes on while cut off: its next queries (the effect's fence
            # check among them) wait in the proxy and reach PostgreSQL late.
            hold_release(hold_dir, "before_effect", zombie_pid)
        takeover, row = _store(thread["id"]), _run_row(run.id)
        _wake(zombie, run, cut=proxy)
        if not cut_link:
            hold_release(hold_dir, "before_effect", zombie_pid)
        _assert_zombie_gave_up(zombie, run)

        assert bank.ledger.received.get(key) is None  # the zombie never called the bank
        assert not Effect.objects.filter(key=key).exists()
        assert _store(thread["id"]) == takeover  # nor wrote a checkpoint or a pending write
        assert _run_row(run.id) == row

        hold_release(hold_dir, "before_effect", successor_pid)
        done = thread_settled(operator, thread["id"], timeout=30)
        assert done["status"] == "completed", done
        assert done["values"]["paid_by"] == successor_pid
        assert bank.ledger.executions[key] == 1 and bank.ledger.received[key] == 1
        assert Effect.objects.get(key=key).calls == 1
        run.refresh_from_db()
        assert run.status == RunStatus.SUCCEEDED and run.attempts == 2 and _owner_pid(run) == successor_pid
        _assert_trail_shows_the_takeover(run, zombie_pid, successor_pid)
        _assert_written_by(thread["id"], set(takeover[0]), run.fence)
        _assert_zombie_serves_new_runs(zombie, successor, operator, hold_dir)
    finally:
        if proxy is not None:
            proxy.close()


def test_a_worker_paused_before_its_effect_neither_pays_nor_writes_after_the_takeover(
    fault_worker, frozen, operator, bank, hold_dir
):
    _pause_before_the_effect(fault_worker, frozen, operator, bank, hold_dir, cut_link=False)


def test_a_worker_cut_off_from_postgres_past_its_lease_neither_pays_nor_writes_when_the_link_returns(
    fault_worker, frozen, operator, bank, hold_dir
):
    _pause_before_the_effect(fault_worker, frozen, operator, bank, hold_dir, cut_link=True)


def test_a_worker_paused_after_its_effect_writes_no_checkpoint_and_the_effect_is_not_repeated(
    fault_worker, frozen, operator, bank, hold_dir
):
    zombie = fault_worker(**ENV)
    thread = thread_start(operator, "zombie_pay", pay_input(hold_dir, "after_effect"))
    run = Run.objects.get(thread_id=thread["id"])
    key = f"gh:{thread['id']}:pay"
    successor, zombie_pid, successor_pid = _take_over(fault_worker, frozen, hold_dir, "after_effect", zombie, run)
    assert bank.ledger.executions[key] == 1  # paid by the zombie before it froze; the successor replayed it
    takeover, row = _store(thread["id"]), _run_row(run.id)

    _wake(zombie, run)
    hold_release(hold_dir, "after_effect", zombie_pid)  # its node returns: its writes are refused
    _assert_zombie_gave_up(zombie, run)
    assert _store(thread["id"]) == takeover
    assert _run_row(run.id) == row

    hold_release(hold_dir, "after_effect", successor_pid)
    done = thread_settled(operator, thread["id"], timeout=30)
    assert done["status"] == "completed", done
    assert done["values"]["paid_by"] == successor_pid  # the state is the successor's
    assert bank.ledger.executions[key] == 1 and bank.ledger.received[key] == 1
    assert Effect.objects.get(key=key).calls == 1
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and _owner_pid(run) == successor_pid
    _assert_written_by(thread["id"], set(takeover[0]), run.fence)
    _assert_zombie_serves_new_runs(zombie, successor, operator, hold_dir)


def test_a_worker_paused_inside_a_gate_neither_rewrites_the_pause_nor_duplicates_the_task(
    fault_worker, frozen, operator, reviewer, bank, hold_dir
):
    zombie = fault_worker(**ENV)
    thread = thread_start(operator, "zombie_pay", pay_input(hold_dir, "gate", review=True))
    run = Run.objects.get(thread_id=thread["id"])
    key = f"gh:{thread['id']}:pay"
    successor, zombie_pid, successor_pid = _take_over(fault_worker, frozen, hold_dir, "gate", zombie, run)

    hold_release(hold_dir, "gate", successor_pid)  # the successor pauses the thread for review first
    [task] = pending_tasks(reviewer, thread["id"], timeout=30)
    assert ApprovalTask.objects.get(pk=task["id"]).payload["prepared_by"] == successor_pid
    run.refresh_from_db()
    assert run.status == RunStatus.INTERRUPTED
    takeover, row = _store(thread["id"]), _run_row(run.id)

    _wake(zombie, run)
    hold_release(hold_dir, "gate", zombie_pid)  # the zombie's gate interrupts too: its pause is refused
    _assert_zombie_gave_up(zombie, run)
    assert _store(thread["id"]) == takeover  # the pending interrupt is still the successor's
    assert _run_row(run.id) == row
    assert ApprovalTask.objects.filter(thread_id=thread["id"]).count() == 1
    pending = graph_get("zombie_pay").compiled().get_state({"configurable": {"thread_id": thread["id"]}}).interrupts
    assert [i.value["prepared_by"] for i in pending] == [successor_pid]

    response = api_decide(reviewer, task)
    assert response.status_code == 201, response.content
    done = thread_settled(operator, thread["id"], timeout=30)
    assert done["status"] == "completed", done
    assert bank.ledger.executions[key] == 1
    assert ApprovalTask.objects.filter(thread_id=thread["id"]).count() == 1
    _assert_written_by(thread["id"], set(takeover[0]), run.fence)
    _assert_zombie_serves_new_runs(zombie, successor, operator, hold_dir)
