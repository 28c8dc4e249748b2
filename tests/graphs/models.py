"""A graph whose state and input are Pydantic models with ``Field`` bounds.

LangGraph checks a Pydantic state only when a node reads it (``State(**values)``): a write with a value out
of bounds is accepted and the next run fails. Gatehouse must refuse it at the write. ``subject`` also has a
``@field_validator`` on the state (``"unloadable"`` is refused), which a start does not run: it is checked
against ``BudgetInput``, which has none. A thread started with it fails its first run and leaves a checkpoint
the graph cannot load, as a value written before the bounds were checked does.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel, Field, field_validator

from runtime.gatekeeper import request_review

AMOUNT_MAX = 100_000


class Line(BaseModel):
    sku: str = Field(min_length=1)
    quantity: int = Field(ge=1)


class BudgetInput(BaseModel):
    subject: str = Field(min_length=1)
    amount: float = Field(gt=0, le=AMOUNT_MAX)
    lines: list[Line] = Field(default_factory=list)


class BudgetState(BaseModel):
    subject: str = ""
    amount: float = Field(gt=0, le=AMOUNT_MAX, description="What is spent, in euros.")
    lines: list[Line] = Field(default_factory=list)
    outcome: str = ""

    @field_validator("subject")
    @classmethod
    def _loadable(cls, value: str) -> str:
        if value == "unloadable":
            raise ValueError("this subject cannot be loaded")
        return value


def review(state: BudgetState) -> dict[str, Any]:
    decision = request_review(
        title=f"Spend {state.amount} on {state.subject}?",
        proposed_action={"name": "spend", "args": {"amount": state.amount}},
        editable=["amount"],
    )
    return {"outcome": decision.decision}


def spend(state: BudgetState) -> dict[str, Any]:
    return {"outcome": f"{state.outcome}:{state.amount:g}"}


def _budget_review() -> StateGraph[BudgetState, Any, BudgetInput, Any]:
    builder = StateGraph(BudgetState, input_schema=BudgetInput)
    builder.add_node(review)
    builder.add_node(spend)
    builder.add_edge(START, "review")
    builder.add_edge("review", "spend")
    builder.add_edge("spend", END)
    return builder


budget_review = _budget_review()
