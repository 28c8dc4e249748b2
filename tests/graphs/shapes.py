"""Graphs that exercise the runtime's corner cases (parallel, subgraph, breakpoint, failure)."""

from __future__ import annotations

import operator
import os
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict as StrictTypedDict


class ReviewState(TypedDict, total=False):
    subject: str
    marker: str  # a file whose existence "fixes" the flaky graph
    answers: Annotated[list[str], operator.add]
    amount: int
    done: bool


def _ask(name: str):
    def node(state: ReviewState) -> dict[str, Any]:
        answer = interrupt({"title": f"{name} check for {state.get('subject')}", "check": name})
        return {"answers": [f"{name}:{answer.get('decision')}"]}

    node.__name__ = name
    return node


def finish(state: ReviewState) -> dict[str, Any]:
    return {"done": True}


def _parallel() -> StateGraph[ReviewState]:
    builder = StateGraph(ReviewState)
    builder.add_node("legal", _ask("legal"))
    builder.add_node("risk", _ask("risk"))
    builder.add_node(finish)
    builder.add_edge(START, "legal")
    builder.add_edge(START, "risk")
    builder.add_edge(["legal", "risk"], "finish")
    builder.add_edge("finish", END)
    return builder


parallel_review = _parallel()


def _nested() -> StateGraph[ReviewState]:
    inner = StateGraph(ReviewState)
    inner.add_node("inner_gate", _ask("inner_gate"))
    inner.add_edge(START, "inner_gate")
    builder = StateGraph(ReviewState)
    builder.add_node("child", inner.compile())
    builder.add_node(finish)
    builder.add_edge(START, "child")
    builder.add_edge("child", "finish")
    builder.add_edge("finish", END)
    return builder


nested_review = _nested()


def prepare(state: ReviewState) -> dict[str, Any]:
    return {"answers": ["prepared"]}


def commit(state: ReviewState) -> dict[str, Any]:
    return {"answers": [f"committed:{state.get('amount')}"], "done": True}


def _breakpoint() -> Any:
    builder = StateGraph(ReviewState)
    builder.add_node(prepare)
    builder.add_node(commit)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "commit")
    builder.add_edge("commit", END)
    return builder.compile(interrupt_before=["commit"])


breakpoint_review = _breakpoint()


def explode(state: ReviewState) -> dict[str, Any]:
    # Fails until the marker file named in the input exists, so a test can "fix" it and retry.
    marker = state.get("marker", "")
    if not (marker and os.path.exists(marker)):
        raise RuntimeError(f"downstream system unavailable for {state.get('subject')}")
    return {"done": True}


def _flaky() -> StateGraph[ReviewState]:
    builder = StateGraph(ReviewState)
    builder.add_node(explode)
    builder.add_edge(START, "explode")
    builder.add_edge("explode", END)
    return builder


flaky = _flaky


class Reply(StrictTypedDict):  # Pydantic builds the response schema from it
    approved: bool
    limit: int


def reply_gate(state: ReviewState) -> dict[str, Any]:
    answer = interrupt({"title": "Set a limit"}, response_schema=Reply)
    return {"amount": answer["limit"], "done": answer["approved"]}


def _schema_reply() -> StateGraph[ReviewState]:
    builder = StateGraph(ReviewState)
    builder.add_node(reply_gate)
    builder.add_edge(START, "reply_gate")
    builder.add_edge("reply_gate", END)
    return builder


schema_reply = _schema_reply()


def _four_eyes_gate(state: ReviewState) -> dict[str, Any]:
    from runtime.gatekeeper import request_review

    review = request_review(
        title=f"Release {state.get('amount')} for {state.get('subject')}",
        proposed_action={"name": "release", "args": {"amount": state.get("amount")}},
        editable=["amount"],
        required_approvals=int(state.get("amount", 0) > 1000) + 1,  # big releases need two approvers
        rejections_required=int(state.get("amount", 0) > 1_000_000) + 1,  # huge ones, two vetoes to stop
    )
    return {"answers": [f"{review.decision}:{state.get('amount')}"], "done": review.approved}


def _four_eyes() -> StateGraph[ReviewState]:
    builder = StateGraph(ReviewState)
    builder.add_node("release_gate", _four_eyes_gate)
    builder.add_edge(START, "release_gate")
    builder.add_edge("release_gate", END)
    return builder


four_eyes = _four_eyes()


class FaultState(TypedDict, total=False):
    mode: str  # "kill": the node SIGKILLs its worker; "db": it raises a database connection error
    counter: str  # a file counting the node's attempts
    fail_times: int  # with mode "db": fail this many attempts, then succeed (0: always fail)
    attempts_seen: int
    done: bool


def hazard(state: FaultState) -> dict[str, Any]:
    """A node that hurts its worker the way real faults do, for the fault-tolerance tests."""
    import psycopg

    seen = 0
    if state.get("counter"):
        with open(state["counter"], "a+") as fh:
            fh.write("x")
            fh.seek(0)
            seen = len(fh.read())
    mode = state.get("mode", "")
    if mode == "kill" and not os.path.exists(f"{state.get('counter')}.healed"):
        os.kill(os.getpid(), 9)  # a poison run: segfault, OOM kill, a C extension aborting
    if mode == "db" and (not state.get("fail_times") or seen <= int(state.get("fail_times", 0))):
        raise psycopg.OperationalError("server closed the connection unexpectedly (simulated)")
    return {"attempts_seen": seen, "done": True}


def _faulty() -> StateGraph[FaultState]:
    builder = StateGraph(FaultState)
    builder.add_node(hazard)
    builder.add_edge(START, "hazard")
    builder.add_edge("hazard", END)
    return builder


faulty = _faulty()


class FanOutState(TypedDict, total=False):
    items: list[str]
    item: str  # what one ``review_item`` branch (a Send) is given
    answers: Annotated[list[str], operator.add]


def _fan_out(state: FanOutState) -> list[Send]:
    return [Send("review_item", {"item": item}) for item in state.get("items", [])]


def review_item(state: FanOutState) -> dict[str, Any]:
    answer = interrupt({"title": f"Review {state.get('item')}", "item": state.get("item")})
    return {"answers": [f"{state.get('item')}:{answer.get('decision')}"]}


def _fan_out_review() -> StateGraph[FanOutState]:
    # One interrupt per Send branch, all pending at one checkpoint under the same node name.
    builder = StateGraph(FanOutState)
    builder.add_node(review_item)
    builder.add_conditional_edges(START, _fan_out, ["review_item"])
    builder.add_edge("review_item", END)
    return builder


fan_out_review = _fan_out_review()


class StepsState(TypedDict, total=False):
    x: int
    seen: Annotated[list[str], operator.add]


def _step(name: str):
    def node(state: StepsState) -> dict[str, Any]:
        return {"seen": [name]}

    node.__name__ = name
    return node


def _three_steps() -> StateGraph[StepsState]:
    # No gate: a thread of it completes, so an update_state "as" a node leaves the nodes after it to run.
    builder = StateGraph(StepsState)
    for name in ("t1", "t2", "t3"):
        builder.add_node(name, _step(name))
    builder.add_edge(START, "t1")
    builder.add_edge("t1", "t2")
    builder.add_edge("t2", "t3")
    builder.add_edge("t3", END)
    return builder


three_steps = _three_steps()
