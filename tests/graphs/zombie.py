"""A payment graph that a test can freeze at an exact point, for the pause (zombie worker) faults.

``prepare`` → (``gate`` if ``review``) → ``pay``. When the input names a hold
point (``hold``: ``"gate"``, ``"before_effect"`` or ``"after_effect"``) and a
directory (``hold_dir``), the node reaching that point writes
``<point>.<pid>.reached`` there and waits until the test writes
``<point>.<pid>.go``: a fake of the outside world that answers when the test
says so. The test then knows exactly where each worker process is, and can
SIGSTOP it there. A process released once at a point passes it from then on.

Every node records the process that ran it (``*_by``), so a test can tell whose
writes ended up in the thread's state.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from demo import bank_client
from runtime.effects import perform_effect


class PayState(TypedDict, total=False):
    payment_id: str
    amount: int
    review: bool
    hold: str
    hold_dir: str
    prepared_by: int
    gated_by: int
    decision: str
    payment: dict[str, Any]
    paid_by: int


def hold(state: PayState, point: str) -> None:
    if state.get("hold") != point or not state.get("hold_dir"):
        return
    base = Path(state["hold_dir"]) / f"{point}.{os.getpid()}"
    go = Path(f"{base}.go")
    if go.exists():
        return
    Path(f"{base}.reached").write_text(str(os.getpid()))
    while not go.exists():
        time.sleep(0.02)


def prepare(state: PayState) -> dict[str, Any]:
    return {"prepared_by": os.getpid()}


def after_prepare(state: PayState) -> Literal["gate", "pay"]:
    return "gate" if state.get("review") else "pay"


def gate(state: PayState) -> dict[str, Any]:
    hold(state, "gate")
    # The payload names the process that built it, as a real gate's payload
    # carries what it computed (a summary, a timestamp): a write from another
    # process is visible, not silently identical.
    answer = interrupt({"title": f"Pay {state.get('amount')}", "prepared_by": os.getpid()})
    return {"decision": str(answer.get("decision", "")), "gated_by": os.getpid()}


def pay(state: PayState) -> dict[str, Any]:
    hold(state, "before_effect")
    payment_id, amount = state.get("payment_id", ""), int(state.get("amount", 0))
    payment = perform_effect(
        "pay", lambda key: bank_client.disburse(loan_id=payment_id, amount=amount, idempotency_key=key)
    )
    hold(state, "after_effect")
    return {"payment": payment, "paid_by": os.getpid()}


def _zombie_pay() -> StateGraph[PayState]:
    builder = StateGraph(PayState)
    builder.add_node(prepare)
    builder.add_node(gate)
    builder.add_node(pay)
    builder.add_edge(START, "prepare")
    builder.add_conditional_edges("prepare", after_prepare)
    builder.add_edge("gate", "pay")
    builder.add_edge("pay", END)
    return builder


zombie_pay = _zombie_pay()
