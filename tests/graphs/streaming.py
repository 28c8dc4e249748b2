"""A graph that streams what a reader may not see (``/lg/`` stream modes and their masking).

``chatty_review`` declares ``applicant.date_of_birth`` sensitive and carries it
everywhere a stream can: the state (values, updates, debug, tasks,
checkpoints), a custom event in structure and in free text, a chat model that
says it aloud token by token (messages; its reply is not kept in the state),
and a tool call's arguments in the message the node returns. Then a Gatehouse
gate, so the redaction canary can plant and decide it like the demo graphs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from runtime.gatekeeper import request_review

PIECE = 3  # characters per streamed token: a value spans several tokens


class SpeakingModel(BaseChatModel):
    """Replies with a fixed text, streamed a few characters at a time."""

    reply: str

    @property
    def _llm_type(self) -> str:
        return "speaking-fake"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.reply))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        for start in range(0, len(self.reply), PIECE):
            piece = self.reply[start : start + PIECE]
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


class Applicant(TypedDict, total=False):
    name: str
    date_of_birth: str


class ChattyState(TypedDict, total=False):
    applicant: Applicant
    messages: Annotated[list[AnyMessage], add_messages]
    status: str


def screen(state: ChattyState) -> dict[str, Any]:
    applicant = state.get("applicant") or {}
    born = str(applicant.get("date_of_birth", ""))
    writer = get_stream_writer()
    writer({"applicant": {"date_of_birth": born}})
    writer(f"screening someone born {born}")
    SpeakingModel(reply=f"The applicant was born on {born}, it says.").invoke(
        [HumanMessage(content="Summarise the applicant")]
    )
    call = {"name": "open_account", "args": {"applicant": {"date_of_birth": born}}, "id": "call_1"}
    return {"messages": [AIMessage(content="Screened.", tool_calls=[call])], "status": "screened"}


def review(state: ChattyState) -> dict[str, Any]:
    applicant = state.get("applicant") or {}
    # The action takes the applicant: an edited argument can carry a sensitive value (the redaction canary's).
    decision = request_review(
        title="Open the account?",
        details={"applicant": applicant},
        proposed_action={"name": "open_account", "args": {"applicant": applicant}},
    )
    return {"status": "approved" if decision.approved else "rejected"}


def _chatty_review() -> StateGraph[ChattyState]:
    builder = StateGraph(ChattyState)
    builder.add_node(screen)
    builder.add_node(review)
    builder.add_edge(START, "screen")
    builder.add_edge("screen", "review")
    builder.add_edge("review", END)
    return builder


chatty_review = _chatty_review()
