"""The effect ledger in-process: what it records, what it replays, and who records a result first.

(The fence check of ``perform_effect`` is in test_fencing.py; effects across
worker processes in tests/faults.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django.db
import pytest
from langgraph.graph import END, START, StateGraph

from runtime.effects import effect_key, perform_effect
from runtime.fencing import FENCE_KEY
from runtime.models import Effect, EffectStatus, Run, RunCancelAction, RunKind, RunStatus, Thread

pytestmark = pytest.mark.usefixtures("live_db")


def _graph(call: Callable[[str], Any], *parts: object) -> Any:
    def act(state: dict[str, Any]) -> dict[str, Any]:
        key = effect_key("charge", *parts) if parts else None
        return {"result": perform_effect("charge", call, key=key)}

    builder: StateGraph[Any] = StateGraph(dict)  # type: ignore[type-var]
    builder.add_node("act", act)
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    return builder.compile()


def _config(thread: Thread, run: Run | None = None) -> Any:
    configurable: dict[str, Any] = {"thread_id": str(thread.id), FENCE_KEY: thread.fence}
    if run is not None:
        configurable["gatehouse_run_id"] = str(run.id)
    return {"configurable": configurable}


def test_it_records_the_result_and_replays_it_without_calling_again(executed):
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    run = Run.objects.create(thread=thread, kind=RunKind.START)
    keys: list[str] = []
    graph = _graph(lambda key: keys.append(key) or {"charged": 10})
    first = graph.invoke({}, _config(thread, run))
    again = graph.invoke({}, _config(thread, run))
    assert first["result"] == again["result"] == {"charged": 10}
    assert keys == [f"gh:{thread.id}:charge"]
    effect = Effect.objects.get(key=keys[0])
    assert (effect.status, effect.result, effect.error, effect.calls) == (EffectStatus.DONE, {"charged": 10}, "", 1)
    assert effect.completed_at is not None and effect.run_id == run.id and effect.thread_id == thread.id
    assert [e.key for e in executed] == keys


def test_a_failed_call_is_recorded_and_the_retry_uses_the_same_key(executed):
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    run = Run.objects.create(thread=thread, kind=RunKind.START)
    keys: list[str] = []

    def flaky(key: str) -> Any:
        keys.append(key)
        if len(keys) == 1:
            raise ConnectionRefusedError("bank down")  # refused before the request left: not performed
        return {"charged": 10}

    with pytest.raises(ConnectionRefusedError):
        _graph(flaky).invoke({}, _config(thread, run))
    effect = Effect.objects.get(key=f"gh:{thread.id}:charge")
    assert effect.status == EffectStatus.FAILED and "bank down" in effect.error and effect.run_id == run.id
    assert executed == []
    _graph(flaky).invoke({}, _config(thread, run))
    effect.refresh_from_db()
    assert keys == [effect.key, effect.key]
    assert (effect.status, effect.error, effect.calls) == (EffectStatus.DONE, "", 2)


def test_a_result_recorded_meanwhile_by_another_worker_is_kept(executed):
    """The first to record wins: a worker whose call was under way when it lost its lease adds nothing."""
    thread = Thread.objects.create(graph="zombie_pay", fence=1)

    def late(key: str) -> Any:
        # The worker that took over finished the same effect while this call was in flight.
        Effect.objects.filter(key=key).update(status=EffectStatus.DONE, result={"charged": "first"})
        return {"charged": "replayed"}

    _graph(late).invoke({}, _config(thread))
    effect = Effect.objects.get(key=f"gh:{thread.id}:charge")
    assert effect.result == {"charged": "first"}
    assert executed == []


def test_a_failure_after_another_worker_recorded_the_result_leaves_it_done(executed):
    """A zombie's call failed (its connection cut while it was paused) after the worker that took over
    had recorded the payment: the failure overwrote 'done', and the next run paid again."""
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    calls: list[str] = []

    def cut(key: str) -> Any:
        calls.append(key)
        Effect.objects.filter(key=key).update(status=EffectStatus.DONE, result={"charged": "by the other worker"})
        raise ConnectionError("server disconnected without sending a response")

    with pytest.raises(ConnectionError):
        _graph(cut).invoke({}, _config(thread))
    effect = Effect.objects.get(key=f"gh:{thread.id}:charge")
    assert (effect.status, effect.error) == (EffectStatus.DONE, "")
    # The next run replays the recorded result: no second call.
    again = _graph(lambda key: calls.append(key) or {"charged": "again"}).invoke({}, _config(thread))
    assert again["result"] == {"charged": "by the other worker"} and len(calls) == 1


def test_the_key_names_the_thread_the_effect_and_its_parts():
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    keys: list[str] = []
    _graph(lambda key: keys.append(key) or {}, "invoice", 7).invoke({}, _config(thread))
    assert keys == [f"gh:{thread.id}:charge:invoice:7"]


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_a_key_longer_than_its_column_is_refused_not_cut(fenced):
    """Two long keys that share their first 255 characters are two effects: cutting them to the
    column would make the second replay the first's result. Refused before any call, fenced or not."""
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    config = _config(thread) if fenced else {"configurable": {"thread_id": str(thread.id)}}
    calls: list[str] = []
    with pytest.raises(django.db.DataError):
        _graph(lambda key: calls.append(key) or {}, "x" * 300).invoke({}, config)
    assert calls == [] and not Effect.objects.filter(thread=thread).exists()


def test_a_finished_thread_given_new_input_pays_again_under_a_key_of_its_own(executed):
    """A finished thread given new input ("invoke it again") ran the graph from the start: its payment was
    answered with the first input's result under the thread's one key (paid once for two expenses), or,
    with other arguments, refused after the approval (EffectArgsConflict)."""
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    keys: list[str] = []

    def pay(amount: int) -> Any:
        def call(key: str) -> Any:
            keys.append(key)
            return {"paid": amount}

        def act(state: dict[str, Any]) -> dict[str, Any]:
            return {"result": perform_effect("charge", call, args={"amount": amount})}

        builder: StateGraph[Any] = StateGraph(dict)  # type: ignore[type-var]
        builder.add_node("act", act)
        builder.add_edge(START, "act")
        builder.add_edge("act", END)
        return builder.compile()

    first = Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.SUCCEEDED)
    assert pay(250).invoke({}, _config(thread, first))["result"] == {"paid": 250}
    second = Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.SUCCEEDED)
    assert pay(300).invoke({}, _config(thread, second))["result"] == {"paid": 300}
    # A retry in the second cycle is that cycle's payment again: answered, not paid a third time.
    retry = Run.objects.create(thread=thread, kind=RunKind.RETRY, status=RunStatus.SUCCEEDED)
    assert pay(300).invoke({}, _config(thread, retry))["result"] == {"paid": 300}
    base = f"gh:{thread.id}:charge"
    assert keys == [base, f"{base}~{second.id.hex[:12]}"]  # the first cycle keeps the thread's key
    assert [e.key for e in executed] == keys


def test_the_start_run_after_a_rolled_back_one_continues_its_cycle(executed):
    """An outside tester's find: a run cancelled with ``rollback`` mid-payment (the LangGraph client's "a new
    message cancels the old run", ``multitask_strategy="rollback"``) and the thread run again with the same
    input paid twice: the new start run opened a cycle of its own. A rollback takes the run's checkpoints,
    not its payment: the next start run continues the rolled-back one's cycle, in a thread's first cycle
    and in a later one."""
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    keys: list[str] = []

    def pay(amount: int) -> Any:
        def act(state: dict[str, Any]) -> dict[str, Any]:
            return {
                "result": perform_effect(
                    "charge", lambda key: keys.append(key) or {"paid": amount}, args={"amount": amount}
                )
            }

        builder: StateGraph[Any] = StateGraph(dict)  # type: ignore[type-var]
        builder.add_node("act", act)
        builder.add_edge(START, "act")
        builder.add_edge("act", END)
        return builder.compile()

    def start(status: str = RunStatus.SUCCEEDED, cancel_action: str = "") -> Run:
        return Run.objects.create(thread=thread, kind=RunKind.START, status=status, cancel_action=cancel_action)

    rolled_back = {"status": RunStatus.CANCELLED, "cancel_action": RunCancelAction.ROLLBACK}
    first = start(**rolled_back)
    assert pay(250).invoke({}, _config(thread, first))["result"] == {"paid": 250}
    again = start()
    assert pay(250).invoke({}, _config(thread, again))["result"] == {"paid": 250}  # answered, not paid
    base = f"gh:{thread.id}:charge"
    assert keys == [base]
    # A later cycle (a new input), rolled back twice mid-payment, then run again: one payment for it.
    later = start(**rolled_back)
    assert pay(300).invoke({}, _config(thread, later))["result"] == {"paid": 300}
    later_again = start(**rolled_back)
    assert pay(300).invoke({}, _config(thread, later_again))["result"] == {"paid": 300}
    last = start()
    assert pay(300).invoke({}, _config(thread, last))["result"] == {"paid": 300}
    assert keys == [base, f"{base}~{later.id.hex[:12]}"]
    # A start run cancelled with ``interrupt`` keeps its checkpoints: the next input is a cycle of its own.
    kept = start(status=RunStatus.CANCELLED, cancel_action=RunCancelAction.INTERRUPT)
    assert pay(400).invoke({}, _config(thread, kept))["result"] == {"paid": 400}
    fresh = start()
    assert pay(500).invoke({}, _config(thread, fresh))["result"] == {"paid": 500}
    assert keys[2:] == [f"{base}~{kept.id.hex[:12]}", f"{base}~{fresh.id.hex[:12]}"]
    assert [e.key for e in executed] == keys


def test_a_second_cycles_effect_recorded_under_the_threads_key_keeps_answering(executed):
    """Recorded before keys were scoped to cycles: its retry must find it, not pay under a new key."""
    thread = Thread.objects.create(graph="zombie_pay", fence=1)
    Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.SUCCEEDED)
    second = Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.SUCCEEDED)
    Effect.objects.create(
        key=f"gh:{thread.id}:charge", name="charge", thread=thread, run=second, status=EffectStatus.DONE,
        result={"charged": 10}, calls=1,
    )  # fmt: skip
    retry = Run.objects.create(thread=thread, kind=RunKind.RETRY, status=RunStatus.SUCCEEDED)
    calls: list[str] = []
    assert _graph(calls.append).invoke({}, _config(thread, retry))["result"] == {"charged": 10}
    assert calls == []


_LANGGRAPH_ALONE = """
from typing import Any, TypedDict
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from runtime.effects import perform_effect
from runtime.gatekeeper import request_review

class S(TypedDict, total=False):
    amount: int
    paid: Any

calls = []

def review(state: S) -> dict:
    request_review(title="Pay?", summary="pay?", editable=["amount"])
    return {}

def pay(state: S) -> dict:
    return {"paid": perform_effect("pay", lambda key: calls.append(key) or key, args={"amount": state["amount"]})}

b = StateGraph(S)
b.add_node("review", review)
b.add_node("pay", pay)
b.add_edge(START, "review")
b.add_edge("review", "pay")
b.add_edge("pay", END)
g = b.compile(checkpointer=InMemorySaver())
config = {"configurable": {"thread_id": "t1"}}
assert "__interrupt__" in g.invoke({"amount": 5}, config)
out = g.invoke(Command(resume={"decision": "approve"}), config)
assert out["paid"] == "gh:t1:pay" and calls == ["gh:t1:pay"], (out, calls)
import sys
assert not any(m == "django.db" or m.startswith("django.db.") for m in sys.modules), "imported Django's ORM"
print("ok")
"""


def test_a_graph_using_the_helpers_runs_under_langgraph_alone(tmp_path):
    """`from runtime.effects import perform_effect` raised ImproperlyConfigured outside Gatehouse: the same
    graph file could not be unit-tested with InMemorySaver or served by `langgraph dev`."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", _LANGGRAPH_ALONE], env=env, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
