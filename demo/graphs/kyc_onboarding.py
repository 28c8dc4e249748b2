"""KYC onboarding: collect documents → screen → wait for the identity vendor → compliance review → open account.

Gatekeeper nodes (``identity_check``, ``compliance_review``) only ask and
route; the side effect lives in ``open_account`` and goes through the effect
ledger with a stable idempotency key.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from demo import bank_client
from runtime.effects import perform_effect
from runtime.gatekeeper import gate_payload, request_review

SANCTIONED_COUNTRIES = {"KP", "IR", "SY"}


class Applicant(TypedDict, total=False):
    name: str
    country: str
    date_of_birth: str
    email: str


class KycState(TypedDict, total=False):
    applicant: Applicant
    documents: list[dict[str, Any]]
    screening: dict[str, Any]
    identity: dict[str, Any]
    tier: Literal["basic", "standard", "premium"]
    review: dict[str, Any]
    account: dict[str, Any]
    status: str


class KycInput(TypedDict, total=False):
    """What a caller opens a case with; the rest of ``KycState`` is the graph's own working state."""

    applicant: Applicant
    documents: list[dict[str, Any]]
    tier: Literal["basic", "standard", "premium"]


def collect_documents(state: KycState) -> dict[str, Any]:
    documents = state.get("documents") or [{"type": "passport", "status": "received"}]
    return {"documents": documents, "status": "documents_collected"}


def screen_applicant(state: KycState) -> dict[str, Any]:
    applicant = state.get("applicant") or {}
    country = str(applicant.get("country", "")).upper()
    sanctions_hit = country in SANCTIONED_COUNTRIES
    risk = 0.9 if sanctions_hit else 0.2 + 0.1 * len(state.get("documents") or [])
    return {
        "screening": {"sanctions_hit": sanctions_hit, "pep": False, "risk_score": round(risk, 2)},
        "tier": state.get("tier") or "standard",
        "status": "screened",
    }


def identity_check(state: KycState) -> Command[Literal["compliance_review", "close_case"]]:
    # Waits for the identity vendor's verdict (a signed webhook, or a reviewer).
    thread_id = get_config()["configurable"]["thread_id"]
    applicant = state.get("applicant") or {}
    verdict = interrupt(
        gate_payload(
            title=f"Identity verification: {applicant.get('name', 'applicant')}",
            summary="Waiting for the identity vendor's result for the submitted documents.",
            decisions=["approve", "reject"],
            correlation_key=f"kyc-{thread_id}",
            details={"documents": state.get("documents") or []},
        )
    )
    verified = isinstance(verdict, dict) and verdict.get("decision") == "approve"
    identity = {"verified": verified, "by": verdict.get("reviewer", "") if isinstance(verdict, dict) else ""}
    if not verified:
        return Command(goto="close_case", update={"identity": identity})
    return Command(goto="compliance_review", update={"identity": identity})


def compliance_review(state: KycState) -> Command[Literal["open_account", "close_case"]]:
    applicant = state.get("applicant") or {}
    review = request_review(
        title=f"Open a {state.get('tier', 'standard')} account for {applicant.get('name', 'applicant')}?",
        summary=f"Screening risk {state.get('screening', {}).get('risk_score')}; identity verified.",
        proposed_action={"name": "open_account", "args": {"tier": state.get("tier", "standard")}},
        editable=["tier", "applicant"],
        decisions=["approve", "reject", "edit"],  # no "respond": whatever is not approved closes the case
        sla_seconds=4 * 3600,
        details={"screening": state.get("screening"), "applicant": applicant},
    )
    decision = {"decision": review.decision, "reason": review.reason, "reviewer": review.reviewer}
    if not review.approved:
        return Command(goto="close_case", update={"review": decision})
    tier = review.action_args.get("tier", state.get("tier", "standard"))
    return Command(goto="open_account", update={"review": decision, "tier": tier})


def open_account(state: KycState) -> dict[str, Any]:
    applicant = state.get("applicant") or {}
    tier = state.get("tier", "standard")
    account = perform_effect(
        "open_account",
        lambda key: bank_client.open_account(applicant=applicant, tier=tier, idempotency_key=key),
        args={"applicant": applicant.get("name"), "tier": tier},  # what the bank is sent
    )
    return {"account": account, "status": "account_opened"}


def close_case(state: KycState) -> dict[str, Any]:
    return {"status": "rejected"}


builder = StateGraph(KycState, input_schema=KycInput)
builder.add_node(collect_documents)
builder.add_node(screen_applicant)
builder.add_node(identity_check)
builder.add_node(compliance_review)
builder.add_node(open_account)
builder.add_node(close_case)
builder.add_edge(START, "collect_documents")
builder.add_edge("collect_documents", "screen_applicant")
builder.add_edge("screen_applicant", "identity_check")
builder.add_edge("open_account", END)
builder.add_edge("close_case", END)

# A compiled graph, as most LangGraph projects export it; Gatehouse re-binds
# it to its own checkpointer.
graph = builder.compile()
