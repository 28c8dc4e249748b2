"""Time travel in-process (runtime.branches, approvals.time_travel): fork, replay, effects per branch.

``run_dispatch`` is replaced by a recorder and the runs are executed here by
the same executor a worker runs, so each test controls exactly which run
executes when. PostgreSQL checkpointer (the suite's database); the SQLite
checkpointer needs the SQLite database it fences against (tests/embedded).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from django.db import transaction

from approvals import time_travel
from approvals.errors import Conflict, Forbidden, InvalidInput, NotFound
from approvals.models import ApprovalTask, AuditEvent, TaskStatus
from runtime import runs
from runtime.branches import BRANCH_KEY, scoped_effect_key
from runtime.executor import run_execute
from runtime.models import Branch, BranchKind, Effect, EffectStatus, Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.registry import graph_get

pytestmark = pytest.mark.usefixtures("live_db")


def _calls() -> list[str]:
    """The keys the graph's provider was called with (the registry imports the graph file as its own module)."""
    graph_get("travel_pay")
    return sys.modules["gatehouse_graphs.travel_pay"].CALLS  # type: ignore[no-any-return]


def _execute(run: Run) -> Run:
    run_execute(run_id=str(run.id))
    run.refresh_from_db()
    return run


def _start(amount: int = 100, **extra: Any) -> Thread:
    thread = Thread.objects.create(graph="travel_pay")
    with transaction.atomic():
        run = runs.run_enqueue(thread=thread, kind=RunKind.START, input={"amount": amount, **extra})
    assert _execute(run).status == RunStatus.INTERRUPTED, run.error
    thread.refresh_from_db()
    return thread


def _pending(thread: Thread) -> ApprovalTask:
    [task] = ApprovalTask.objects.filter(thread=thread, status=TaskStatus.PENDING)
    return task


def _resume(thread: Thread, task: ApprovalTask) -> Run:
    with transaction.atomic():
        run = runs.run_enqueue(
            thread=thread,
            kind=RunKind.RESUME,
            command={"resume": {task.interrupt_id: {"decision": "approve"}}, "checkpoint_id": task.checkpoint_id},
        )
    return _execute(run)


def _paid(amount: int = 100, **extra: Any) -> tuple[Thread, str]:
    """A thread that paused at the gate, was approved and paid: (thread, the gate's checkpoint)."""
    thread = _start(amount, **extra)
    task = _pending(thread)
    assert _resume(thread, task).status == RunStatus.SUCCEEDED
    thread.refresh_from_db()
    return thread, task.checkpoint_id


def _state(thread: Thread) -> Any:
    return graph_get("travel_pay").compiled().get_state({"configurable": {"thread_id": str(thread.id)}})


def test_a_forked_payment_is_a_new_effect_and_the_original_is_untouched(dispatched, personas):
    operator = personas["operator"].user
    thread, gate_checkpoint = _paid(100)
    original_key = f"gh:{thread.id}:pay"
    original = Effect.objects.get(key=original_key)
    assert _calls().count(original_key) == 1

    branch = time_travel.thread_fork(
        actor=operator,
        thread_id=thread.id,
        checkpoint_id=gate_checkpoint,
        values={"amount": 250},
        reason="customer asked for the corrected amount",
        run=True,
    )
    assert branch.kind == BranchKind.FORK and branch.parent is None and branch.created_by == operator
    assert branch.run is not None and str(branch.run.id) in dispatched
    assert _execute(branch.run).status == RunStatus.INTERRUPTED
    task = _pending(thread)
    assert task.checkpoint_id != gate_checkpoint  # a new task, bound to the fork's checkpoint
    assert _resume(thread, task).status == RunStatus.SUCCEEDED

    fork_key = scoped_effect_key(original_key, {BRANCH_KEY: str(branch.id)})
    assert fork_key == f"{original_key}@{branch.id}"
    forked = Effect.objects.get(key=fork_key)
    assert forked.status == EffectStatus.DONE and forked.args == {"amount": 250}
    assert _calls().count(fork_key) == 1
    # the original branch: same effect row, same result, its provider key called once
    again = Effect.objects.get(key=original_key)
    assert (again.pk, again.result, again.calls, again.args) == (original.pk, original.result, 1, {"amount": 100})
    assert _calls().count(original_key) == 1
    assert _state(thread).values["payment"] == {"paid": 250, "key": fork_key}
    # the past is still there: the gate's checkpoint reads as it was
    past = (
        graph_get("travel_pay")
        .compiled()
        .get_state({"configurable": {"thread_id": str(thread.id), "checkpoint_id": gate_checkpoint}})
    )
    assert past.values["amount"] == 100


def test_a_crash_retry_within_a_branch_still_pays_once(dispatched, personas):
    thread, gate_checkpoint = _paid(100)
    branch = time_travel.thread_fork(
        actor=personas["operator"].user,
        thread_id=thread.id,
        checkpoint_id=gate_checkpoint,
        values={"amount": 300, "crash": True},  # pay dies once after the provider answered
        reason="re-issue with the corrected amount",
        run=True,
    )
    assert branch.run is not None
    _execute(branch.run)
    task = _pending(thread)
    failed = _resume(thread, task)
    assert failed.status == RunStatus.FAILED, "the first attempt dies after the call"
    fork_key = f"gh:{thread.id}:pay@{branch.id}"
    assert _calls().count(fork_key) == 1

    with transaction.atomic():
        retry = runs.run_enqueue(thread=thread, kind=RunKind.RETRY, command=runs.retry_command(thread=thread))
    assert _execute(retry).status == RunStatus.SUCCEEDED, retry.error
    assert _calls().count(fork_key) == 1  # the ledger answered the retry
    assert Effect.objects.get(key=fork_key).status == EffectStatus.DONE
    assert _state(thread).values["payment"]["paid"] == 300


def test_a_replay_reruns_from_the_checkpoint_on_a_new_branch(dispatched, personas):
    thread, gate_checkpoint = _paid(100)
    before = ApprovalTask.objects.filter(thread=thread).count()
    branch = time_travel.thread_replay(
        actor=personas["admin"].user, thread_id=thread.id, checkpoint_id=gate_checkpoint, reason="audit re-run"
    )
    assert branch.kind == BranchKind.REPLAY and branch.head_checkpoint_id == ""
    assert branch.run is not None and branch.run.kind == RunKind.REPLAY
    assert _execute(branch.run).status == RunStatus.INTERRUPTED
    branch.refresh_from_db()
    assert branch.head_checkpoint_id
    # the replay paused at the gate again: a new task on the branch's checkpoint
    assert ApprovalTask.objects.filter(thread=thread).count() == before + 1
    task = _pending(thread)
    assert task.checkpoint_id == branch.head_checkpoint_id != gate_checkpoint
    assert (_state(thread).metadata or {}).get(BRANCH_KEY) == str(branch.id)


def test_a_redelivered_replay_continues_its_branch_instead_of_starting_another(dispatched, personas):
    thread, gate_checkpoint = _paid(100)
    branch = time_travel.thread_replay(
        actor=personas["operator"].user, thread_id=thread.id, checkpoint_id=gate_checkpoint, reason="re-run"
    )
    assert branch.run is not None
    assert _execute(branch.run).status == RunStatus.INTERRUPTED
    head = _state(thread).config["configurable"]["checkpoint_id"]
    # a second delivery of the same run after its first attempt wrote on the branch (a lost ack)
    Run.objects.filter(pk=branch.run.pk).update(status=RunStatus.QUEUED)
    _execute(branch.run)
    assert _state(thread).config["configurable"]["checkpoint_id"] == head
    assert ApprovalTask.objects.filter(thread=thread, status=TaskStatus.PENDING).count() == 1


def test_a_fork_of_a_fork_records_its_parent_branch(dispatched, personas):
    operator = personas["operator"].user
    thread, gate_checkpoint = _paid(100)
    first = time_travel.thread_fork(
        actor=operator, thread_id=thread.id, checkpoint_id=gate_checkpoint, values={"amount": 1}, reason="one"
    )
    second = time_travel.thread_fork(
        actor=operator, thread_id=thread.id, checkpoint_id=first.head_checkpoint_id, values={"amount": 2}, reason="two"
    )
    assert second.parent == first and first.parent is None
    assert [b.id for b in time_travel.branches_for(operator, thread.id)] == [first.id, second.id]


def test_forking_supersedes_the_tasks_pending_on_the_old_line(dispatched, personas):
    thread = _start(100)
    task = _pending(thread)
    branch = time_travel.thread_fork(
        actor=personas["operator"].user,
        thread_id=thread.id,
        checkpoint_id=task.checkpoint_id,
        values={"amount": 5},
        reason="wrong amount",
    )
    task.refresh_from_db()
    assert task.status == TaskStatus.SUPERSEDED
    thread.refresh_from_db()
    assert thread.status == ThreadStatus.IDLE and thread.checkpoint_id == branch.head_checkpoint_id
    audit = AuditEvent.objects.get(thread_id=thread.id, action="thread.forked")
    assert audit.actor == personas["operator"].user
    assert audit.details["reason"] == "wrong amount" and audit.details["superseded_tasks"] == [str(task.id)]


@pytest.mark.parametrize("persona", ["reviewer", "approver", "auditor", "outsider"])
def test_only_operators_travel_in_time(dispatched, personas, persona):
    thread, gate_checkpoint = _paid(100)
    branches = Branch.objects.filter(thread=thread).count()
    expected = NotFound if persona == "outsider" else Forbidden  # the outsider may not even see the thread
    with pytest.raises(expected):
        time_travel.thread_replay(
            actor=personas[persona].user, thread_id=thread.id, checkpoint_id=gate_checkpoint, reason="x"
        )
    assert Branch.objects.filter(thread=thread).count() == branches


@pytest.mark.parametrize(
    ("change", "error", "field"),
    [
        ({"reason": "  "}, InvalidInput, "reason"),
        ({"checkpoint_id": "not-a-checkpoint"}, InvalidInput, "checkpoint_id"),
        ({"checkpoint_id": "1f000000-0000-6000-8000-000000000000"}, NotFound, "checkpoint_id"),
        ({"values": {"amount": "lots"}}, InvalidInput, "values.amount"),
        ({"as_node": "nowhere"}, InvalidInput, "as_node"),
    ],
)
def test_bad_fork_input_is_refused_naming_the_field_and_writes_nothing(dispatched, personas, change, error, field):
    thread, gate_checkpoint = _paid(100)
    head = thread.checkpoint_id
    kwargs: dict[str, Any] = {
        "actor": personas["operator"].user,
        "thread_id": thread.id,
        "checkpoint_id": gate_checkpoint,
        "values": {"amount": 7},
        "reason": "fix",
        **change,
    }
    with pytest.raises(error) as raised:
        time_travel.thread_fork(**kwargs)
    assert raised.value.field == field
    if "not found" in raised.value.message:
        assert kwargs["checkpoint_id"] in raised.value.message  # it names the checkpoint
    thread.refresh_from_db()
    assert thread.checkpoint_id == head and not Branch.objects.filter(thread=thread).exists()
    assert _state(thread).config["configurable"]["checkpoint_id"] == head


def test_a_thread_with_an_active_run_cannot_be_forked(dispatched, personas):
    thread, gate_checkpoint = _paid(100)
    with transaction.atomic():
        runs.run_enqueue(thread=thread, kind=RunKind.RETRY)
    with pytest.raises(Conflict):
        time_travel.thread_replay(
            actor=personas["operator"].user, thread_id=thread.id, checkpoint_id=gate_checkpoint, reason="busy"
        )
    Run.objects.filter(thread=thread, status=RunStatus.QUEUED).update(status=RunStatus.FAILED)


def test_a_copy_needs_a_reason_and_writes_nothing_without_one(dispatched, personas):
    thread, _ = _paid(100)
    threads_before = Thread.objects.count()
    for reason in (None, "", "   "):
        with pytest.raises(InvalidInput) as raised:
            time_travel.thread_copy_make(actor=personas["operator"].user, thread_id=thread.id, reason=reason)
        assert raised.value.field == "reason"
    assert Thread.objects.count() == threads_before
    assert not AuditEvent.objects.filter(action="thread.copied", details__copied_from=str(thread.id)).exists()


@pytest.mark.parametrize("how", ["fork", "replay", "copy"])
def test_a_reason_over_4000_characters_is_refused_not_cut(dispatched, personas, how):
    thread, gate_checkpoint = _paid(100)
    operator = personas["operator"].user
    calls = {
        "fork": lambda reason: time_travel.thread_fork(
            actor=operator, thread_id=thread.id, checkpoint_id=gate_checkpoint, values={"amount": 7}, reason=reason
        ),
        "replay": lambda reason: time_travel.thread_replay(
            actor=operator, thread_id=thread.id, checkpoint_id=gate_checkpoint, reason=reason
        ),
        "copy": lambda reason: time_travel.thread_copy_make(actor=operator, thread_id=thread.id, reason=reason),
    }
    threads_before = Thread.objects.count()
    with pytest.raises(InvalidInput) as raised:
        calls[how]("r" * 4001)
    assert raised.value.field == "reason" and "4000" in raised.value.message
    assert Thread.objects.count() == threads_before and not Branch.objects.filter(thread=thread).exists()
    calls[how]("r" * 4000)  # the cap itself is allowed, and kept whole
    action = {"fork": "thread.forked", "replay": "thread.replayed", "copy": "thread.copied"}[how]
    event = AuditEvent.objects.filter(action=action).order_by("-id").first()
    assert event is not None and event.details["reason"] == "r" * 4000
