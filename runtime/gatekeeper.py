"""Gatekeeper helper for graph authors: pause for a human (or a webhook) and get a Review back.

A gatekeeper node must be free of side effects: on resume LangGraph runs it
again from its first line, and ``interrupt`` then returns the decision::

    def compliance_gate(state) -> Command[Literal["open_account", "close_case"]]:
        review = request_review(
            title=f"Open account for {state['applicant']['name']}?",
            proposed_action={"name": "open_account", "args": {"tier": state["tier"]}},
            editable=["tier", "limit"],
        )
        if review.approved:
            return Command(goto="open_account", update={"tier": review.action_args.get("tier", state["tier"])})
        return Command(goto="close_case", update={"rejection": review.reason})
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

GATE_MARKER = "gatehouse.gate/v1"
ALL_DECISIONS = ("approve", "reject", "edit", "respond")


@dataclass(frozen=True)
class Review:
    decision: str
    reason: str = ""
    reviewer: str = ""
    message: str = ""
    action_args: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def approved(self) -> bool:
        return self.decision in ("approve", "edit")

    @property
    def rejected(self) -> bool:
        return self.decision == "reject"


def gate_payload(
    *,
    title: str,
    summary: str = "",
    proposed_action: dict[str, Any] | None = None,
    editable: Sequence[str] = (),
    decisions: Sequence[str] = ALL_DECISIONS,
    required_approvals: int = 1,
    rejections_required: int = 1,
    sla_seconds: int | None = None,
    correlation_key: str | None = None,
    details: dict[str, Any] | None = None,
    due: str | None = None,
    remind_before: str | None = None,
    escalate_to: str | None = None,
    on_timeout: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Gatehouse gate payload. The deadline keys (``due``, ``remind_before``, ``escalate_to``, ``on_timeout``:
    docs/deadlines.md) are written only when given; the payload could carry them, this builder refused them."""
    unknown = set(decisions) - set(ALL_DECISIONS)
    if unknown:
        raise ValueError(f"unknown decisions {sorted(unknown)}; allowed: {ALL_DECISIONS}")
    return {
        "type": GATE_MARKER,
        "title": title,
        "summary": summary,
        "proposed_action": proposed_action,
        "editable": list(editable),
        "allowed_decisions": list(decisions),
        "required_approvals": required_approvals,
        "rejections_required": rejections_required,
        "sla_seconds": sla_seconds,
        "correlation_key": correlation_key,
        "details": details or {},
        # deadlines: "4h", "30m" (docs/deadlines.md); only when given, so existing payloads are unchanged
        **{
            key: value
            for key, value in (
                ("due", due),
                ("remind_before", remind_before),
                ("escalate_to", escalate_to),
                ("on_timeout", on_timeout),
            )
            if value is not None
        },
    }


def request_review(**kwargs: Any) -> Review:
    """Pause the thread with a Gatehouse gate payload; returns the reviewer's decision on resume."""
    from langgraph.types import interrupt  # here: the console reads gate payloads without loading LangGraph

    answer = interrupt(gate_payload(**kwargs))
    if not isinstance(answer, dict) or "decision" not in answer:
        raise ValueError(f"a gate was resumed with {answer!r}; expected an object with a 'decision'")
    return Review(
        decision=str(answer["decision"]),
        reason=str(answer.get("reason") or ""),
        reviewer=str(answer.get("reviewer") or ""),
        message=str(answer.get("message") or ""),
        action_args=dict(answer.get("action_args") or {}),
        data=dict(answer.get("data") or {}),
    )
