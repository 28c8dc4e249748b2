"""A graph with the bug ``decisions_verify`` exists to catch: its action pays an amount nobody signed.

The gate proposes ``disburse(amount=state.amount)`` and lets the reviewer edit
``amount``; the action node then pays from a copy of the amount taken before
the review (``requested``), so a reviewer's edit never reaches the bank.
"""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from demo import bank_client
from runtime.effects import perform_effect
from runtime.gatekeeper import request_review


class PayoutState(TypedDict, total=False):
    loan_id: str
    amount: int
    requested: int
    status: str


def intake(state: PayoutState) -> dict[str, Any]:
    return {"requested": state.get("amount", 0)}


def review(state: PayoutState) -> dict[str, Any]:
    decision = request_review(
        title=f"Pay {state.get('amount')}?",
        proposed_action={"name": "disburse", "args": {"amount": state.get("amount")}},
        editable=["amount"],
    )
    return {"status": "approved" if decision.approved else "declined"}


def pay(state: PayoutState) -> dict[str, Any]:
    if state.get("status") != "approved":
        return {}
    args: dict[str, Any] = {"loan_id": state.get("loan_id", ""), "amount": state.get("requested", 0)}  # the bug
    perform_effect("disburse", lambda key: bank_client.disburse(**args, idempotency_key=key), args=args)
    return {"status": "paid"}


def _buggy_payout() -> StateGraph[PayoutState]:
    builder = StateGraph(PayoutState)
    builder.add_node(intake)
    builder.add_node(review)
    builder.add_node(pay)
    builder.add_edge(START, "intake")
    builder.add_edge("intake", "review")
    builder.add_edge("review", "pay")
    builder.add_edge("pay", END)
    return builder


buggy_payout = _buggy_payout()
