"""Agents as their authors write them, registered unchanged: LangChain's HITL middleware and an Agent Inbox gate.

The chat model is a ``langchain_core`` fake whose reply depends only on the
conversation (not on a shared iterator), so any worker, on any resume, gives the
same answer: the first user message is a JSON list of tool calls to request; once
tool results are in, it answers with them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TypedDict

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class ScriptedChatModel(GenericFakeChatModel):
    messages: Iterator[Any] = iter(())  # unused: replies are computed from the conversation

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            calls = json.loads(str(last.content))
            reply = AIMessage(
                content="",
                tool_calls=[{"name": c["name"], "args": c["args"], "id": f"call_{i}"} for i, c in enumerate(calls)],
            )
        else:
            results = [m.content for m in messages if isinstance(m, ToolMessage)]
            reply = AIMessage(content="done: " + " | ".join(str(r) for r in results))
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def transfer(to: str, amount: int) -> str:
    """Send money."""
    return f"sent {amount!r} ({type(amount).__name__}) to {to}"


@tool
def lookup(query: str) -> str:
    """Ask a person; the reviewer usually answers in its place."""
    return f"looked up {query}"


INTERRUPT_ON: dict[str, Any] = {
    "transfer": {"allowed_decisions": ["approve", "edit", "reject"], "description": "Money leaves the bank"},
    "lookup": {"allowed_decisions": ["approve", "respond"]},
}


def _agent(mode: str) -> Any:
    return create_agent(
        ScriptedChatModel(),
        tools=[transfer, lookup],
        middleware=[HumanInTheLoopMiddleware(interrupt_on=INTERRUPT_ON, interrupt_mode=mode)],  # type: ignore[arg-type]
    )


hitl_agent = _agent("batched")
hitl_agent_per_call = _agent("per_call")


# --- Agent Inbox (langgraph's HumanInterrupt / HumanResponse convention) -------------------


class EmailState(TypedDict, total=False):
    to: str
    subject: str
    outcome: str
    sent: dict[str, Any]


def draft_review(state: EmailState) -> dict[str, Any]:
    request = {
        "action_request": {"action": "send_email", "args": {"to": state.get("to"), "subject": state.get("subject")}},
        "config": {"allow_accept": True, "allow_edit": True, "allow_respond": True, "allow_ignore": True},
        "description": f"Send '{state.get('subject')}' to {state.get('to')}?",
    }
    [response] = interrupt([request])
    kind = response["type"]
    if kind == "accept":
        return {"outcome": "accepted", "sent": request["action_request"]["args"]}
    if kind == "edit":
        return {"outcome": "edited", "sent": response["args"]["args"]}
    if kind == "response":
        return {"outcome": f"answered: {response['args']}"}
    return {"outcome": "ignored"}


def _inbox() -> StateGraph[EmailState]:
    builder = StateGraph(EmailState)
    builder.add_node(draft_review)
    builder.add_edge(START, "draft_review")
    builder.add_edge("draft_review", END)
    return builder


agent_inbox = _inbox()


# --- a graph whose node always raises (thread.failed events) -------------------------------


def vendor_down(state: EmailState) -> dict[str, Any]:
    raise RuntimeError(f"mail relay unavailable for {state.get('to')}")


def _always_fails() -> StateGraph[EmailState]:
    builder = StateGraph(EmailState)
    builder.add_node(vendor_down)
    builder.add_edge(START, "vendor_down")
    builder.add_edge("vendor_down", END)
    return builder


always_fails = _always_fails()
