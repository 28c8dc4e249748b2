"""A graph whose Pydantic state has a ``@field_validator`` and a ``@model_validator`` spanning two fields.

LangGraph runs them only when a node reads the state: a write they refuse was accepted (an edit was signed)
and the next run failed. Gatehouse runs them before the write (``runtime.state_schema._validators_run``).
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel, Field, field_validator, model_validator

from runtime.gatekeeper import request_review

FORBIDDEN = "forbidden"


class SpendState(BaseModel):
    subject: str = ""
    requested: float = Field(default=1, gt=0)
    approved: float = 0
    outcome: str = ""

    @field_validator("subject")
    @classmethod
    def _subject_allowed(cls, value: str) -> str:
        if value == FORBIDDEN:
            raise ValueError("this subject is not allowed")
        return value

    @model_validator(mode="after")
    def _within_request(self) -> SpendState:
        if self.approved > self.requested:
            raise ValueError("the approved amount exceeds the requested one")
        return self


def review(state: SpendState) -> dict[str, Any]:
    decision = request_review(
        title=f"Approve {state.approved} of {state.requested} for {state.subject}?",
        editable=["approved", "requested", "subject"],
    )
    return {"outcome": decision.decision}


def spend(state: SpendState) -> dict[str, Any]:
    return {"outcome": f"{state.outcome}:{state.approved:g}"}


def _validated_spend() -> StateGraph[SpendState, Any, SpendState, Any]:
    builder = StateGraph(SpendState)
    builder.add_node(review)
    builder.add_node(spend)
    builder.add_edge(START, "review")
    builder.add_edge("review", "spend")
    builder.add_edge("spend", END)
    return builder


validated_spend = _validated_spend()
