"""A graph whose messages speak a sensitive value (``/lg/`` and native reads, streams, their masking).

``chatty_secret`` declares ``secret`` sensitive. Its first node puts the value
in words in the ``messages`` state key: a chat model's reply streamed in two
tokens split inside the value, a message whose content blocks and tool call
arguments quote it, and one that says nothing sensitive. It then pauses at a
Gatehouse gate inside a subgraph (so ``get_state(subgraphs=True)`` has a
subgraph's state to show), and says the value once more when it is approved.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from runtime.gatekeeper import request_review

PLAIN_REPLY = "Nothing sensitive here."


class PiecesModel(BaseChatModel):
    """Replies with ``pieces`` joined, streamed one piece per token."""

    pieces: list[str]

    @property
    def _llm_type(self) -> str:
        return "pieces-fake"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="".join(self.pieces)))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        for piece in self.pieces:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


class ChatState(TypedDict, total=False):
    secret: str
    messages: Annotated[list[AnyMessage], add_messages]
    status: str


def spoken_pieces(secret: str) -> list[str]:
    """The reply's two tokens: the value is split between them."""
    half = len(secret) // 2
    return [f"I know {secret[:half]}", f"{secret[half:]} well"]


def speak(state: ChatState) -> dict[str, Any]:
    secret = str(state.get("secret", ""))
    reply = PiecesModel(pieces=spoken_pieces(secret)).invoke([HumanMessage(content="Who do you know?")])
    call = {"name": "lookup", "args": {"query": f"who knows {secret}"}, "id": "call_1"}
    blocks = AIMessage(content=[{"type": "text", "text": f"blocks say {secret}"}], tool_calls=[call])
    return {"messages": [reply, blocks, AIMessage(content=PLAIN_REPLY)]}


def ask(state: ChatState) -> dict[str, Any]:
    decision = request_review(title="Send the replies?", details={"replies": len(state.get("messages") or [])})
    return {"status": "approved" if decision.approved else "rejected"}


def close(state: ChatState) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"Done with {state.get('secret', '')}.")]}


def _chatty_secret() -> StateGraph[ChatState]:
    inner = StateGraph(ChatState)
    inner.add_node(ask)
    inner.add_edge(START, "ask")
    builder = StateGraph(ChatState)
    builder.add_node(speak)
    builder.add_node("review", inner.compile())
    builder.add_node(close)
    builder.add_edge(START, "speak")
    builder.add_edge("speak", "review")
    builder.add_edge("review", "close")
    builder.add_edge("close", END)
    return builder


chatty_secret = _chatty_secret()
