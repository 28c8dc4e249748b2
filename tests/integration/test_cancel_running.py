"""Cancelling a *running* run with the real worker: interrupt and rollback, and the cancelled worker's late writes.

The ``zombie_pay`` graph (tests/graphs/zombie.py) holds its ``pay`` node at an
exact point (a file the node writes, then waits for the test's go file): the
run is mid-way, on the worker, when the test cancels it. Then the test lets
the node go on, as a worker that did not notice would, and checks that
nothing it writes lands. No sleeps: every wait is a condition with a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection
from langgraph_sdk import get_sync_client

from approvals.models import ApprovalTask, AuditEvent
from runtime.models import Effect, EffectStatus, Run, RunStatus, Thread, ThreadStatus
from tests.conftest import WorkerProcess, scaled, wait_for
from tests.console.conftest import console_client
from tests.integration.test_platform_sdk import server  # noqa: F401 - the daphne fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _input(hold_dir: Path, hold: str, payment_id: str | None = None) -> dict[str, Any]:
    return {
        "payment_id": payment_id or f"C-{hold_dir.parent.name[-10:]}",
        "amount": 75,
        "hold": hold,
        "hold_dir": str(hold_dir),
    }


def _reached(hold_dir: Path, point: str) -> int | None:
    for path in hold_dir.glob(f"{point}.*.reached"):
        return int(path.name.split(".")[1])
    return None


def _release(hold_dir: Path, point: str, pid: int) -> None:
    (hold_dir / f"{point}.{pid}.go").write_text("go")


@pytest.fixture
def hold_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "holds"
    path.mkdir()
    yield path
    # Whatever happened, let every held node go: the session worker serves other tests.
    for reached in path.glob("*.reached"):
        (path / reached.name.replace(".reached", ".go")).write_text("go")


def _store(thread_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = %s ORDER BY 1, 2", [thread_id]
        )
        checkpoints = [tuple(row) for row in cursor.fetchall()]
        cursor.execute(
            "SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel FROM checkpoint_writes "
            "WHERE thread_id = %s ORDER BY 1, 2, 3, 4",
            [thread_id],
        )
        return checkpoints, [tuple(row) for row in cursor.fetchall()]


def _logged(worker: WorkerProcess, text: str) -> bool:
    return text in worker.log_path.read_text(errors="replace")


def _stopped(worker: WorkerProcess, run_id: Any) -> None:
    wait_for(
        lambda: _logged(worker, f"run {run_id}: cancelled; stopped, its late writes are refused"),
        timeout=20,
        what="the worker to log that it stopped the cancelled run",
    )
    wait_for(lambda: Run.objects.get(pk=run_id).lease_owner == "", timeout=10, what="the worker to let go")


def _start(operator: Any, hold_dir: Path, hold: str) -> tuple[dict[str, Any], Run, int]:
    response = operator.client.post("/api/threads", {"graph": "zombie_pay", "input": _input(hold_dir, hold)})
    assert response.status_code == 201, response.content
    thread = response.json()
    pid = wait_for(lambda: _reached(hold_dir, hold), timeout=30, what=f"the node to reach {hold}")
    run = Run.objects.get(thread_id=thread["id"])
    assert run.status == RunStatus.RUNNING
    return thread, run, pid


def test_interrupting_a_running_run_keeps_its_checkpoints_and_refuses_its_effect(operator, live_worker, bank, hold_dir):
    thread, run, pid = _start(operator, hold_dir, "before_effect")
    key = f"gh:{thread['id']}:pay"
    before = _store(thread["id"])
    assert before[0], "prepare's checkpoint is written before pay holds"

    response = operator.client.post(
        f"/api/threads/{thread['id']}/cancel-run", {"action": "interrupt", "reason": "wrong amount"}
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "cancelled" and body["cancel_action"] == "interrupt"
    assert body["cancelled_by"] == operator.username and body["cancel_reason"] == "wrong amount"
    assert body["error"] == f"cancelled by {operator.username} (interrupt): wrong amount"

    # The node goes on, as a worker that has not noticed yet: its effect and its writes are refused.
    _release(hold_dir, "before_effect", pid)
    _stopped(live_worker, run.id)
    assert bank.ledger.received.get(key) is None and not Effect.objects.filter(key=key).exists()
    assert _store(thread["id"]) == before

    shown = operator.client.get(f"/api/threads/{thread['id']}").json()
    assert shown["status"] == "idle" and "prepared_by" in shown["values"] and "paid_by" not in shown["values"]
    assert shown["checkpoint_id"] == max(cid for ns, cid in before[0] if ns == "")
    [latest, *_] = operator.client.get(f"/api/threads/{thread['id']}/history").json()
    assert latest["next"] == ["pay"]
    assert not ApprovalTask.objects.filter(thread_id=thread["id"]).exists()
    [event] = AuditEvent.objects.filter(thread_id=thread["id"], action="run.cancelled")
    assert event.actor == operator.user
    assert event.details["reason"] == "wrong amount" and event.details["was"] == "running"
    runs = operator.client.get(f"/api/threads/{thread['id']}/runs").json()
    assert [r["status"] for r in runs] == ["cancelled"]


def test_cancel_many_by_running_stops_a_run_held_in_its_graph_and_refuses_its_effect(
    operator, live_worker, bank, hold_dir
):
    """``runs.cancel_many`` with ``status=running`` (the SDK's way to stop a runaway agent) was tested only on
    queued runs it must leave alone. Here a run is inside its graph, on the worker, about to pay: the call
    cancels it, and the node, let go as a worker that has not noticed, pays nothing and writes nothing."""
    thread, run, pid = _start(operator, hold_dir, "before_effect")
    key = f"gh:{thread['id']}:pay"
    before = _store(thread["id"])

    response = operator.client.post("/lg/runs/cancel", {"status": "running"})
    assert response.status_code == 204, response.content
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED

    _release(hold_dir, "before_effect", pid)
    _stopped(live_worker, run.id)
    assert bank.ledger.received.get(key) is None and not Effect.objects.filter(key=key).exists()
    assert _store(thread["id"]) == before
    [event] = AuditEvent.objects.filter(thread_id=thread["id"], action="run.cancelled")
    assert event.actor == operator.user and event.details["was"] == "running"


def test_a_cancelled_nodes_late_checkpoint_write_is_refused_and_its_effect_stays_recorded_once(
    operator, live_worker, bank, hold_dir
):
    thread, run, pid = _start(operator, hold_dir, "after_effect")
    key = f"gh:{thread['id']}:pay"
    assert Effect.objects.get(key=key).status == EffectStatus.DONE  # paid before the cancel
    before = _store(thread["id"])

    response = operator.client.post(
        f"/api/threads/{thread['id']}/cancel-run", {"action": "rollback", "reason": "stop it"}
    )
    assert response.status_code == 202, response.content
    assert _store(thread["id"]) == ([], []), "rollback removes every checkpoint of the thread's first run"

    # The node returns after the cancel: LangGraph writes its result, the fenced saver refuses it.
    _release(hold_dir, "after_effect", pid)
    _stopped(live_worker, run.id)
    assert _store(thread["id"]) == ([], [])
    assert before[0]
    effect = Effect.objects.get(key=key)
    assert effect.status == EffectStatus.DONE and effect.calls == 1
    assert bank.ledger.executions[key] == 1  # rollback does not undo the outside world
    shown = operator.client.get(f"/api/threads/{thread['id']}").json()
    assert shown["status"] == "idle" and shown["values"] == {} and shown["checkpoint_id"] == ""
    assert operator.client.get(f"/api/threads/{thread['id']}/history").json() == []
    assert not ApprovalTask.objects.filter(thread_id=thread["id"]).exists()
    actions = list(AuditEvent.objects.filter(thread_id=thread["id"]).values_list("action", flat=True))
    assert "run.cancelled" in actions and "run.rolled_back" in actions


def test_a_thread_run_again_after_a_rollback_mid_payment_pays_once(operator, live_worker, bank, hold_dir):
    """An outside tester's find: the LangGraph client's "a new message cancels the old run" (a rollback, then
    the same input again) paid twice: the new start run keyed its payment to a cycle of its own."""
    thread, run, pid = _start(operator, hold_dir, "after_effect")
    key = f"gh:{thread['id']}:pay"
    cancel = {"action": "rollback", "reason": "a new message"}
    assert operator.client.post(f"/api/threads/{thread['id']}/cancel-run", cancel).status_code == 202
    _release(hold_dir, "after_effect", pid)
    _stopped(live_worker, run.id)
    again = {"assistant_id": "zombie_pay", "input": _input(hold_dir, "after_effect")}
    response = operator.client.post(f"/lg/threads/{thread['id']}/runs", again)
    assert response.status_code == 200, response.content
    wait_for(lambda: _finished_releasing(thread["id"], hold_dir, "after_effect"), timeout=60, what="the new run to end")
    assert Thread.objects.get(pk=thread["id"]).status == ThreadStatus.COMPLETED
    assert bank.ledger.executions[key] == 1 and Effect.objects.filter(thread_id=thread["id"]).count() == 1


@pytest.mark.parametrize("hold", ["before_effect", "after_effect"])
def test_an_operator_continues_a_run_cancelled_with_steps_left_and_pays_once(
    operator, live_worker, bank, hold_dir, hold
):
    """An outside tester cancelled a run (interrupt) mid-payment: the bank had paid, the state was short of it,
    the thread sat idle at ``pay``, and the retry answered 409 "only failed threads can be retried"."""
    thread, run, pid = _start(operator, hold_dir, hold)
    key = f"gh:{thread['id']}:pay"
    cancel = {"action": "interrupt", "reason": "check the amount"}
    assert operator.client.post(f"/api/threads/{thread['id']}/cancel-run", cancel).status_code == 202
    _release(hold_dir, hold, pid)
    _stopped(live_worker, run.id)
    assert operator.client.get(f"/api/threads/{thread['id']}").json()["status"] == "idle"
    page = console_client(operator).get(f"/threads/{thread['id']}/").content.decode()
    assert "Continue the cancelled run" in page and "Retry the failed step" not in page

    response = operator.client.post(f"/api/threads/{thread['id']}/retry")
    assert response.status_code == 202, response.content
    assert response.json()["kind"] == "retry"
    # A worker process other than the held one holds the continued node again: let it go as it comes.
    wait_for(lambda: _finished_releasing(thread["id"], hold_dir, hold), timeout=60, what="the continued run to end")
    done = operator.client.get(f"/api/threads/{thread['id']}").json()
    assert done["status"] == "completed" and "paid_by" in done["values"]
    assert bank.ledger.executions[key] == 1  # paid once, whether the cancel came before the payment or after
    assert Effect.objects.get(key=key).status == EffectStatus.DONE
    # Nothing is left to continue: a second retry is refused, saying why.
    assert (
        "Continue the cancelled run" not in console_client(operator).get(f"/threads/{thread['id']}/").content.decode()
    )
    again = operator.client.post(f"/api/threads/{thread['id']}/retry")
    assert again.status_code == 409 and "this one is completed" in again.json()["error"]["message"]


def test_a_thread_rolled_back_to_no_state_is_not_continued(operator, live_worker, bank, hold_dir):
    thread, run, pid = _start(operator, hold_dir, "before_effect")
    cancel = {"action": "rollback", "reason": "start over"}
    assert operator.client.post(f"/api/threads/{thread['id']}/cancel-run", cancel).status_code == 202
    _release(hold_dir, "before_effect", pid)
    _stopped(live_worker, run.id)
    refused = operator.client.post(f"/api/threads/{thread['id']}/retry")
    assert refused.status_code == 409
    assert refused.json()["error"]["message"].endswith("this one is idle with no step left")
    assert Run.objects.filter(thread_id=thread["id"]).count() == 1


def _finished_releasing(thread_id: str, hold_dir: Path, point: str) -> bool:
    """Whether the thread's run has ended; meanwhile every process held at ``point`` is let go."""
    for reached in hold_dir.glob(f"{point}.*.reached"):
        _release(hold_dir, point, int(reached.name.split(".")[1]))
    return Thread.objects.get(pk=thread_id).status in (ThreadStatus.COMPLETED, ThreadStatus.FAILED)


def test_the_sdk_rolls_a_running_run_back_to_where_it_started(server, personas, live_worker, hold_dir):  # noqa: F811
    operator = personas["operator"]
    with get_sync_client(url=server, api_key=operator.token, timeout=httpx.Timeout(scaled(30.0))) as op:
        thread = op.threads.create()
        first = op.runs.wait(thread["thread_id"], "zombie_pay", input=_input(hold_dir, "none", "C-first"))
        assert first["paid_by"]
        state = op.threads.get_state(thread["thread_id"])
        history = op.threads.get_history(thread["thread_id"], limit=50)

        run = op.runs.create(thread["thread_id"], "zombie_pay", input=_input(hold_dir, "before_effect", "C-2"))
        pid = wait_for(lambda: _reached(hold_dir, "before_effect"), timeout=30, what="the second run to hold")
        assert op.threads.get_state(thread["thread_id"])["values"]["payment_id"] == "C-2"

        op.runs.cancel(thread["thread_id"], run["run_id"], action="rollback")
        assert op.threads.get_state(thread["thread_id"]) == state
        assert op.threads.get_history(thread["thread_id"], limit=50) == history
        _release(hold_dir, "before_effect", pid)
        _stopped(live_worker, run["run_id"])
        assert op.threads.get_state(thread["thread_id"]) == state
        cancelled = op.runs.get(thread["thread_id"], run["run_id"])
        assert cancelled["status"] == "interrupted"
        assert cancelled["error"] == f"cancelled by {operator.username} (rollback)"
        assert op.threads.get(thread["thread_id"])["status"] == "idle"


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_multitask_strategy_cancels_the_active_run_then_starts_the_new_one(
    server,  # noqa: F811
    personas,
    live_worker,
    hold_dir,
    strategy,
):
    operator = personas["operator"]
    with get_sync_client(url=server, api_key=operator.token, timeout=httpx.Timeout(scaled(30.0))) as op:
        thread = op.threads.create()
        held = op.runs.create(thread["thread_id"], "zombie_pay", input=_input(hold_dir, "before_effect", "C-a"))
        pid = wait_for(lambda: _reached(hold_dir, "before_effect"), timeout=30, what="the run to hold")
        second = op.runs.create(
            thread["thread_id"],
            "zombie_pay",
            input=_input(hold_dir, "none", "C-b"),
            multitask_strategy=strategy,
        )
        cancelled = op.runs.get(thread["thread_id"], held["run_id"])
        assert cancelled["status"] == "interrupted"
        assert cancelled["error"].startswith(f"cancelled by {operator.username} ({strategy}): multitask_strategy=")
        _release(hold_dir, "before_effect", pid)
        done = op.runs.join(thread["thread_id"], second["run_id"])
        assert done["payment_id"] == "C-b" and done["paid_by"]
        _stopped(live_worker, held["run_id"])
        history = op.threads.get_history(thread["thread_id"], limit=100)
        held_steps = [h for h in history if h["values"].get("payment_id") == "C-a"]
        assert bool(held_steps) is (strategy == "interrupt")  # rollback removed the held run's checkpoints
        # A finished run is not cancellable.
        with pytest.raises(httpx.HTTPStatusError) as late:
            op.runs.cancel(thread["thread_id"], second["run_id"], wait=True, action="interrupt")
        assert late.value.response.status_code == 409


def test_cancel_with_wait_returns_once_the_worker_has_stopped(server, personas, live_worker, hold_dir):  # noqa: F811
    operator = personas["operator"]
    with get_sync_client(url=server, api_key=operator.token, timeout=httpx.Timeout(scaled(30.0))) as op:
        thread = op.threads.create()
        run = op.runs.create(thread["thread_id"], "zombie_pay", input=_input(hold_dir, "before_effect", "C-w"))
    pid = wait_for(lambda: _reached(hold_dir, "before_effect"), timeout=30, what="the run to hold")

    def release_once_cancelled() -> None:
        # The node goes on only after the cancel committed: the wait must outlast the worker's stop.
        wait_for(
            lambda: Run.objects.filter(pk=run["run_id"], status=RunStatus.CANCELLED).exists(),
            timeout=30,
            what="the cancel to commit",
        )
        assert Run.objects.get(pk=run["run_id"]).lease_owner  # the worker still holds it
        _release(hold_dir, "before_effect", pid)
        connection.close()

    releaser = threading.Thread(target=release_once_cancelled)
    releaser.start()
    try:
        response = httpx.post(
            f"{server}/threads/{thread['thread_id']}/runs/{run['run_id']}/cancel",
            params={"wait": 1, "action": "interrupt"},
            headers={"x-api-key": operator.token},
            timeout=scaled(40),
        )
    finally:
        releaser.join(timeout=scaled(40))
    assert response.status_code == 204, response.text
    assert Run.objects.get(pk=run["run_id"]).lease_owner == ""  # the worker let go before the wait returned
    # ...and says so in its log, a moment after its release committed (and woke the wait).
    wait_for(
        lambda: _logged(live_worker, f"run {run['run_id']}: cancelled; stopped"),
        timeout=10,
        what="the worker to log that it stopped the cancelled run",
    )


def test_cancel_refuses_a_bad_action_naming_the_field_and_changes_nothing(server, personas, hold_dir):  # noqa: F811
    operator = personas["operator"]
    with get_sync_client(url=server, api_key=operator.token, timeout=httpx.Timeout(scaled(30.0))) as op:
        thread = op.threads.create()
        run = op.runs.create(thread["thread_id"], "zombie_pay", input=_input(hold_dir, "before_effect", "C-x"))
        pid = wait_for(lambda: _reached(hold_dir, "before_effect"), timeout=30, what="the run to hold")
        with pytest.raises(httpx.HTTPStatusError) as bad:
            op.runs.cancel(thread["thread_id"], run["run_id"], action="explode")
        assert bad.value.response.status_code == 422
        assert bad.value.response.json()["error"]["field"] == "action"
        native = operator.client.post(f"/api/threads/{thread['thread_id']}/cancel-run", {"action": "explode"})
        assert native.status_code == 422 and native.json()["error"]["field"] == "action"
        with pytest.raises(httpx.HTTPStatusError) as enqueue:
            op.runs.create(
                thread["thread_id"], "zombie_pay", input=_input(hold_dir, "none"), multitask_strategy="enqueue"
            )
        assert enqueue.value.response.status_code == 422
        assert enqueue.value.response.json()["error"]["field"] == "multitask_strategy"
        # A reviewer may see the thread but not cancel its run.
        refused = personas["reviewer"].client.post(f"/api/threads/{thread['thread_id']}/cancel-run", {})
        assert refused.status_code == 403
        assert Run.objects.get(pk=run["run_id"]).status == RunStatus.RUNNING
        op.runs.cancel(thread["thread_id"], run["run_id"], action="interrupt")
        _release(hold_dir, "before_effect", pid)
