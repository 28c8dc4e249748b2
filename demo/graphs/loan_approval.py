"""Loan approval: pull documents → score risk → route → human review for borderline risk → disburse.

Long-term memory (docs/memory-store.md): every outcome is remembered per applicant
in the store under ``("applicants", <applicant id>)``, one item per loan, across
threads; the review gate shows the applicant's previous outcome to the reviewer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from pydantic import Field

from demo import bank_client
from runtime.effects import perform_effect
from runtime.gatekeeper import request_review

AUTO_APPROVE_BELOW = 0.3
AUTO_DECLINE_ABOVE = 0.8


# What the bank takes: the input's bounds, the state's (what a fork or update_state writes) and the
# review's args_schema (an edited amount or term) are one.
AMOUNT_MAX = 10_000_000
TERM_MONTHS_MAX = 480
# The bank lends in euros, in whole units (the amounts in the state and the action's args are integers).
CURRENCY = "EUR"

Amount = Annotated[int, Field(ge=1, le=AMOUNT_MAX)]
Income = Annotated[int, Field(ge=0)]
TermMonths = Annotated[int, Field(ge=1, le=TERM_MONTHS_MAX)]
# A name to pay: "" titled the task "Loan of 18000 for" and kept the memory under "applicants.unknown".
Applicant = Annotated[str, Field(min_length=1, max_length=200, pattern=r"\S")]


class LoanState(TypedDict, total=False):
    """The graph's working state, and what a fork's or update_state's ``values`` are checked against:
    bounded as the input is, or a fork at the review writing ``amount: -500`` was paid once approved."""

    applicant: str
    applicant_id: str
    loan_id: str
    amount: Amount
    income: Income
    term_months: TermMonths
    documents: list[str]
    risk_score: float
    route: str
    review: dict[str, Any]
    disbursement: dict[str, Any]
    status: str


class LoanInput(TypedDict):
    """What a caller starts a loan with; the rest of ``LoanState`` is the graph's own working state.

    Bounded as the bank is (the review's ``args_schema``): a negative amount scored as low risk and was
    paid out without review. The amount, applicant and income are required: without them a start was
    scored as risk 0 and paid 0 without review.
    """

    amount: Amount
    applicant: Applicant
    income: Income
    applicant_id: NotRequired[str]
    loan_id: NotRequired[str]
    term_months: NotRequired[TermMonths]


def pull_documents(state: LoanState) -> dict[str, Any]:
    return {"documents": ["credit_report", "payslips", "bank_statements"], "status": "documents_pulled"}


def score_risk(state: LoanState) -> dict[str, Any]:
    income = max(int(state.get("income") or 1), 1)
    risk = min(1.0, state.get("amount", 0) / (income * 0.8))
    return {"risk_score": round(risk, 3), "status": "scored"}


def route(state: LoanState) -> Literal["disburse", "human_review", "decline"]:
    risk = state.get("risk_score", 1.0)
    if risk < AUTO_APPROVE_BELOW:
        return "disburse"
    if risk > AUTO_DECLINE_ABOVE:
        return "decline"
    return "human_review"


def money(amount: Any) -> str:
    """An amount as a reviewer reads it, "EUR 39,417" (a bare 39417 in a title read as a count or an id)."""
    return f"{CURRENCY} {amount:,}" if isinstance(amount, int) and not isinstance(amount, bool) else str(amount)


def human_review(state: LoanState) -> Command[Literal["disburse", "decline"]]:
    loan_id, applicant = state.get("loan_id"), state.get("applicant", "applicant")
    amount = money(state.get("amount"))
    # The id is optional: without it the title read "Loan : 20000 for …".
    title = f"Loan {loan_id}: {amount} for {applicant}" if loan_id else f"Loan of {amount} for {applicant}"
    review = request_review(
        title=title,
        summary=f"Borderline risk score {state.get('risk_score')}; income {money(state.get('income'))}.",
        proposed_action={
            "name": "disburse",
            "args": {"amount": state.get("amount"), "term_months": state.get("term_months", 12)},
            # What the bank takes: an edited amount or term (of the state or the argument) must fit it.
            "args_schema": {
                "type": "object",
                "properties": {
                    "amount": {"type": "integer", "minimum": 1, "maximum": AMOUNT_MAX},
                    "term_months": {"type": "integer", "minimum": 1, "maximum": TERM_MONTHS_MAX},
                },
                "additionalProperties": False,
            },
        },
        editable=["amount", "term_months"],
        # No "respond": this graph declines whatever is not approved, so a reply would end the loan.
        decisions=["approve", "reject", "edit"],
        sla_seconds=24 * 3600,
        details={
            "risk_score": state.get("risk_score"),
            "documents": state.get("documents"),
            "previous_outcome": previous_outcome(state),
        },
    )
    decision = {"decision": review.decision, "reason": review.reason, "reviewer": review.reviewer}
    if not review.approved:
        return Command(goto="decline", update={"review": decision})
    update: dict[str, Any] = {"review": decision, "route": "human"}
    if "amount" in review.action_args:
        update["amount"] = review.action_args["amount"]
    if "term_months" in review.action_args:
        update["term_months"] = review.action_args["term_months"]
    return Command(goto="disburse", update=update)


def disburse(state: LoanState) -> dict[str, Any]:
    amount = int(state.get("amount") or 0)
    if amount < 1:
        # Defence in depth: the schemas bound the amount, but a node that pays checks what it pays. It
        # ends the thread unpaid rather than routing anywhere new (the graph's edges stay as drawn).
        return {"status": "refused_non_positive_amount"}
    args: dict[str, Any] = {"loan_id": state.get("loan_id", ""), "amount": amount}
    payment = perform_effect(
        "disburse",
        lambda key: bank_client.disburse(**args, idempotency_key=key),
        args=args,  # recorded in the effect ledger: decisions_verify checks them against the signed action
    )
    outcome_remember(state, "disbursed", amount=args["amount"])
    return {"disbursement": payment, "status": "disbursed"}


def decline(state: LoanState) -> dict[str, Any]:
    outcome_remember(state, "declined", amount=int(state.get("amount", 0)))
    return {"status": "declined"}


# --- long-term memory: past outcomes per applicant, across threads -------------------------------


def applicant_namespace(state: LoanState) -> tuple[str, str]:
    # A namespace label cannot hold "." (the store refuses it); an applicant without an id goes by name.
    who = str(state.get("applicant_id") or state.get("applicant") or "unknown").replace(".", "_").strip()
    return ("applicants", who or "unknown")


def previous_outcome(state: LoanState) -> dict[str, Any] | None:
    """The applicant's most recent outcome of another loan (what the reviewer is shown), or None."""
    store = get_store()
    if store is None:  # compiled without a store (a bare test graph)
        return None
    items = [i for i in store.search(applicant_namespace(state), limit=50) if i.key != state.get("loan_id", "")]
    if not items:
        return None
    last = max(items, key=lambda i: i.updated_at)
    # Only what a reviewer needs; the item's other fields (income) stay in the store, redacted there.
    return {"loan_id": last.key, "outcome": last.value.get("outcome"), "amount": last.value.get("amount")}


def outcome_remember(state: LoanState, outcome: str, *, amount: int) -> None:
    store = get_store()
    if store is None:
        return
    # Keyed by loan: a re-executed action node overwrites its own item with the same value.
    store.put(
        applicant_namespace(state),
        str(state.get("loan_id", "")) or "unknown",
        {"outcome": outcome, "amount": amount, "income": state.get("income"), "applicant": state.get("applicant")},
    )


def make_graph() -> StateGraph[LoanState]:
    """A factory returning an uncompiled StateGraph: Gatehouse compiles it with its checkpointer."""
    builder = StateGraph(LoanState, input_schema=LoanInput)
    builder.add_node(pull_documents)
    builder.add_node(score_risk)
    builder.add_node(human_review)
    builder.add_node(disburse)
    builder.add_node(decline)
    builder.add_edge(START, "pull_documents")
    builder.add_edge("pull_documents", "score_risk")
    builder.add_conditional_edges("score_risk", route)
    builder.add_edge("disburse", END)
    builder.add_edge("decline", END)
    return builder
