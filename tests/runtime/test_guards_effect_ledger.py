"""The effect ledger's guards, each attacked as a crash, a retry or a zombie would (runtime/effect_ledger.py).

Written against the mutation survivors of ``make mutants`` on runtime/effect_ledger.py (docs/mutation-testing.md):
what the intent row records before the call, the arguments a key is bound to (and a row recorded before
arguments were kept), a retry by another run, the row handed to the ``effect_executed`` receivers (the
audit trail), and a thread that has no row.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import django.db
import pytest
from django.db import transaction
from langgraph.graph import END, START, StateGraph

from approvals.models import AuditAction, AuditEvent
from runtime import effect_ledger
from runtime.effects import EffectArgsConflict, args_digest, canonical_json, perform_effect
from runtime.fencing import FENCE_KEY, LeaseLost
from runtime.models import Effect, EffectStatus, Run, RunKind, RunStatus, Thread
from tests.approvals.races import Side
from tests.conftest import scaled

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture(autouse=True)
def _fenced_insert_built_afresh() -> Iterator[None]:
    """The fenced intent insert is built once per process (``functools.cache``): without this, every test
    but the first ran the statement an earlier test built, and a wrong cast in ``_typed`` went unseen
    (mutmut's children inherit the statement their parent built from the unmutated code)."""
    effect_ledger._intent_insert_fenced.cache_clear()
    yield
    effect_ledger._intent_insert_fenced.cache_clear()


def _graph(call: Callable[[str], Any], *, args: dict[str, Any] | None = None, key: str | None = None) -> Any:
    def act(state: dict[str, Any]) -> dict[str, Any]:
        return {"result": perform_effect("charge", call, key=key, args=args)}

    builder: StateGraph[Any] = StateGraph(dict)  # type: ignore[type-var]
    builder.add_node("act", act)
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    return builder.compile()


def _config(thread_id: Any, *, fence: int | None = None, run: Run | None = None) -> Any:
    configurable: dict[str, Any] = {"thread_id": str(thread_id)}
    if fence is not None:
        configurable[FENCE_KEY] = fence
    if run is not None:
        configurable["gatehouse_run_id"] = str(run.id)
    return {"configurable": configurable}


def _thread_and_run() -> tuple[Thread, Run]:
    thread = Thread.objects.create(graph="zombie_pay", fence=3)
    # Finished: a queued one was swept to the session's live worker, which ran it behind later tests' backs.
    return thread, Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.SUCCEEDED)


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_the_intent_row_records_what_the_effect_is_before_the_call(fenced):
    """What an auditor reads if the process dies mid-call: the effect's name, its thread and run, the
    arguments it is executed with and their digest (what ``decisions_verify`` compares with the decision)."""
    thread, run = _thread_and_run()
    args = {"amount": 250, "iban": "DE00 1234"}
    seen: list[Effect] = []
    _graph(lambda key: seen.append(Effect.objects.get(key=key)) or {"ok": True}, args=args).invoke(
        {}, _config(thread.id, fence=thread.fence if fenced else None, run=run)
    )
    [intent] = seen
    assert (intent.name, intent.thread_id, intent.run_id) == ("charge", thread.id, run.id)
    assert (intent.args, intent.args_digest) == (args, args_digest(args))
    assert (intent.status, intent.calls, intent.result, intent.error) == (EffectStatus.STARTED, 1, None, "")
    assert intent.created_at is not None and intent.completed_at is None


def test_an_effect_without_arguments_records_none_and_no_digest():
    """No arguments is not the JSON ``null``: a later attempt that passes some records them (not a conflict)."""
    thread, run = _thread_and_run()
    _graph(lambda key: {"ok": True}).invoke({}, _config(thread.id, fence=thread.fence, run=run))
    effect = Effect.objects.get(thread=thread)
    assert (effect.args, effect.args_digest) == (None, "")


def test_the_same_key_with_other_arguments_is_refused_before_the_call_naming_both():
    """A key stands for one effect: a replay with another body (a zombie's stale state, an edited
    amount) is refused as a provider refuses an idempotency key reused, and nothing is called."""
    thread, run = _thread_and_run()
    calls: list[int] = []
    config = _config(thread.id, fence=thread.fence, run=run)
    _graph(lambda key: calls.append(250) or {"paid": 250}, args={"amount": 250}).invoke({}, config)
    with pytest.raises(EffectArgsConflict) as refused:
        _graph(lambda key: calls.append(300) or {"paid": 300}, args={"amount": 300}).invoke({}, config)
    assert calls == [250]
    message = str(refused.value)
    assert canonical_json({"amount": 250}) in message and canonical_json({"amount": 300}) in message
    effect = Effect.objects.get(thread=thread)
    assert (effect.args, effect.result) == ({"amount": 250}, {"paid": 250})


def test_a_row_recorded_without_arguments_gets_them_on_its_next_attempt_and_is_then_bound_to_them():
    """A row written before arguments were kept (or by a call without them): its retry records its
    arguments on that row only, and from then on the key refuses any others."""
    thread, run = _thread_and_run()
    key = f"legacy:{uuid.uuid4()}"
    other = Effect.objects.create(key=f"legacy:{uuid.uuid4()}", name="charge", status=EffectStatus.FAILED, calls=1)
    Effect.objects.create(key=key, name="charge", thread=thread, status=EffectStatus.FAILED, calls=1)
    config = _config(thread.id, fence=thread.fence, run=run)
    args = {"amount": 250}
    assert _graph(lambda k: {"paid": 250}, key=key, args=args).invoke({}, config)["result"] == {"paid": 250}
    effect = Effect.objects.get(key=key)
    assert (effect.args, effect.args_digest, effect.status, effect.calls) == (
        args, args_digest(args), EffectStatus.DONE, 2,
    )  # fmt: skip
    other.refresh_from_db()
    assert (other.args, other.args_digest) == (None, "")
    calls: list[str] = []
    with pytest.raises(EffectArgsConflict):
        _graph(calls.append, key=key, args={"amount": 300}).invoke({}, config)
    assert calls == []


@pytest.mark.parametrize(
    "second,answer",
    [({"amount": 300}, EffectArgsConflict), ({"amount": 250}, {"paid": 250})],
    ids=["other-arguments-refused", "same-arguments-answered"],
)
def test_two_callers_racing_on_a_row_without_arguments_leave_the_key_bound_to_the_first(second, answer):
    """Two unfenced callers of a key an old version recorded without arguments both read it bare; the first
    records its arguments and pays while holding the row, the second's update queues behind it and writes
    nothing. That row count is how the second learns it lost: other arguments are refused, the same ones are
    answered with the first's result. Before, it ignored the count and paid again (the same payment twice, or
    one with arguments that conflict with the record).

    The race is held open, not hoped for: the first caller's transaction locks the row before the second
    starts, and pays only once the database shows the second waiting for that lock."""
    thread, _ = _thread_and_run()
    key = f"legacy:{uuid.uuid4()}"
    Effect.objects.create(key=key, name="charge", thread=thread, status=EffectStatus.FAILED, calls=1)
    config = _config(thread.id)  # a graph driven directly: no fence orders the two
    paid: list[dict[str, Any]] = []

    def pay(args: dict[str, Any]) -> Any:
        return _graph(lambda k: paid.append(args) or {"paid": args["amount"]}, key=key, args=args).invoke({}, config)

    racer = Side(lambda: pay(second))
    with transaction.atomic():
        Effect.objects.select_for_update().get(key=key)
        racer.start()
        racer.queued("the second caller to queue behind the first's row lock")
        assert pay({"amount": 250})["result"] == {"paid": 250}
    racer.join(scaled(30))
    assert not racer.is_alive()
    if answer is EffectArgsConflict:
        assert isinstance(racer.error, EffectArgsConflict), racer.error or racer.result
        assert canonical_json({"amount": 250}) in str(racer.error)
    else:
        assert racer.error is None and racer.result["result"] == answer
    assert paid == [{"amount": 250}]  # the provider was called once, with what the row records
    row = Effect.objects.get(key=key)
    assert (row.args, row.args_digest, row.status, row.result, row.calls) == (
        {"amount": 250}, args_digest({"amount": 250}), EffectStatus.DONE, {"paid": 250}, 2,
    )  # fmt: skip


def test_a_retry_by_another_run_is_recorded_as_that_runs_with_every_attempt_counted(executed):
    """The console and the audit trail name the run that performed the effect and how often it was
    called: a failed first attempt, then the retry run that paid."""
    thread, first = _thread_and_run()
    attempts: list[str] = []

    def flaky(key: str) -> Any:
        attempts.append(key)
        if len(attempts) == 1:
            raise ConnectionRefusedError("bank down")
        return {"paid": 250}

    with pytest.raises(ConnectionRefusedError):
        _graph(flaky).invoke({}, _config(thread.id, fence=thread.fence, run=first))
    Run.objects.filter(pk=first.pk).update(status=RunStatus.FAILED)
    retry = Run.objects.create(thread=thread, kind=RunKind.RETRY)
    _graph(flaky).invoke({}, _config(thread.id, fence=thread.fence, run=retry))
    effect = Effect.objects.get(thread=thread)
    assert (effect.status, effect.run_id, effect.calls, effect.error) == (EffectStatus.DONE, retry.id, 2, "")
    [handed] = executed
    assert (handed.run_id, handed.calls) == (retry.id, 2)
    event = AuditEvent.objects.get(action=AuditAction.EFFECT_EXECUTED, subject_id=effect.key)
    assert (event.details["run"], event.details["calls"]) == (str(retry.id), 2)


def test_receivers_are_handed_the_row_as_written(executed):
    """The audit receiver records what it is handed: it must be the row (the result as the JSON column
    gives it back, no error, the attempts, the run), and a saved one (a receiver validating it, as a
    form or the admin would, must not be told its key is taken)."""
    thread, run = _thread_and_run()
    _graph(lambda key: {1: (2, 3)}).invoke({}, _config(thread.id, fence=thread.fence, run=run))
    row = Effect.objects.get(thread=thread)
    [handed] = executed
    fields = ("pk", "key", "status", "result", "error", "calls", "run_id", "thread_id", "completed_at")
    assert {f: getattr(handed, f) for f in fields} == {f: getattr(row, f) for f in fields}
    assert handed.result == {"1": [2, 3]}
    handed.validate_unique()
    event = AuditEvent.objects.get(action=AuditAction.EFFECT_EXECUTED, subject_id=row.key)
    assert (event.details["result"], event.details["calls"]) == ({"1": [2, 3]}, 1)


def test_an_effect_for_a_thread_that_is_gone_is_refused_as_a_lost_lease_before_the_call():
    """A run whose thread was deleted under it: the fenced insert writes nothing, and the read that tells
    why finds no thread. Refused (LeaseLost, no fence), not a crash, and nothing called."""
    gone = uuid.uuid4()
    calls: list[str] = []
    with pytest.raises(LeaseLost, match=rf"thread {gone}: write under fence 3 refused, the thread's fence is now None"):
        _graph(calls.append).invoke({}, _config(gone, fence=3))
    assert calls == [] and not Effect.objects.filter(key__contains=str(gone)).exists()


@pytest.mark.parametrize("as_uuid", [True, False], ids=["uuid", "not-a-uuid"])
def test_a_graph_driven_directly_on_a_thread_without_a_row_records_the_effect_without_a_thread(as_uuid):
    """Outside a claimed run (a graph invoked in-process) the thread id may name no Thread row, or be no
    UUID at all (a graph author's unit test: ``thread_id: "t1"``, which raised Django's ValidationError):
    the effect is recorded and kept once all the same, naming no thread. The id is new on every call: a
    session that keeps its database (``make mutants`` runs the tests twice in one process) must not find
    the first run's effect."""
    thread_id: Any = uuid.uuid4() if as_uuid else f"t1-{uuid.uuid4().hex[:8]}"
    calls: list[str] = []
    graph = _graph(lambda key: calls.append(key) or {"paid": 1})
    assert graph.invoke({}, _config(thread_id))["result"] == {"paid": 1}
    assert graph.invoke({}, _config(thread_id))["result"] == {"paid": 1}
    effect = Effect.objects.get(key=f"gh:{thread_id}:charge")
    assert (effect.thread_id, effect.status, calls) == (None, EffectStatus.DONE, [effect.key])


def test_a_fenced_key_longer_than_its_column_is_refused_not_cut_by_the_statement_built_now():
    """test_effects.py checks this too, but with the statement an earlier test built: here it is built
    for this test, so a cast to the column's ``varchar(255)`` (which cuts silently) is caught."""
    thread, run = _thread_and_run()
    calls: list[str] = []
    with pytest.raises(django.db.DataError):
        _graph(calls.append, key="k" * 300).invoke({}, _config(thread.id, fence=thread.fence, run=run))
    assert calls == [] and not Effect.objects.filter(thread=thread).exists()
