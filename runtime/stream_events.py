"""``stream_mode="events"`` for a run executed with the sync ``graph.stream``.

LangGraph Server builds ``events`` from ``astream_events(version="v2")``,
which needs an async graph and checkpointer; the executor runs the sync API.
The events come from LangChain callbacks either way, so a sync callback
handler publishes them in the same shape: ``{"event": "on_chain_start",
"name", "run_id", "parent_ids", "tags", "metadata", "data": {...}}`` for
chains (nodes), chat models and LLMs (``*_start``/``*_stream``/``*_end``),
tools and custom events; an ``*_end`` event carries its run's input beside its
output, as v2 does. A node's ``on_chain_stream``: ``astream_events`` streams
each node and taps its output, so a node's one chunk (its update) comes just
before its ``on_chain_end``; the sync API invokes nodes, so the handler sends
that chunk itself when the node ends (``graph:step:N``-tagged chains: nodes,
not the graph or a node's inner steps, as under LangGraph Server). Not sent:
runnables tagged ``langsmith:hidden`` (LangGraph's internal writers), as
``astream_events`` hides them too.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.outputs import ChatGenerationChunk, LLMResult
from langchain_core.runnables import RunnableConfig


class Publisher(Protocol):
    """Where events go (``runtime.stream_tap.Publisher``)."""

    def publish(self, events: Sequence[tuple[str, Any]]) -> None: ...


HIDDEN_TAG = "langsmith:hidden"
NODE_TAG = "graph:step:"  # the tag LangGraph gives a node's run (``graph:step:<step>``)


@dataclass(frozen=True)
class _RunInfo:
    kind: str  # chain, chat_model, llm, tool
    name: str
    tags: list[str]
    metadata: dict[str, Any]
    parent: UUID | None
    inputs: Any = None  # what its start event carried as ``input``: its end event carries it again


class EventsHandler(BaseCallbackHandler):
    raise_error = False  # an event that cannot be published must not fail the node

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self._runs: dict[UUID, _RunInfo] = {}
        self._parents: dict[UUID, UUID | None] = {}
        self._lock = threading.Lock()

    # --- LangChain's streaming-handler protocol: with it, chat models stream their tokens (as under
    # astream_events) instead of answering in one piece; the outputs pass through untouched.

    def tap_output_iter(self, run_id: UUID, output: Iterator[Any]) -> Iterator[Any]:
        return output

    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[Any]) -> AsyncIterator[Any]:
        return output

    # --- bookkeeping --------------------------------------------------------------------------

    def _start(
        self,
        kind: str,
        serialized: dict[str, Any] | None,
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
        name: str | None,
        data: dict[str, Any],
    ) -> None:
        info = _RunInfo(
            kind=kind,
            name=name or (serialized or {}).get("name") or kind,
            tags=list(tags or []),
            metadata=dict(metadata or {}),
            parent=parent_run_id,
            inputs=data.get("input"),
        )
        with self._lock:
            self._runs[run_id] = info
            self._parents[run_id] = parent_run_id
        self._send(f"on_{kind}_start", run_id, info, data)

    def _parent_ids(self, run_id: UUID) -> list[str]:
        ids: list[str] = []
        with self._lock:
            parent = self._parents.get(run_id)
            while parent is not None and str(parent) not in ids:
                ids.append(str(parent))
                parent = self._parents.get(parent)
        return ids[::-1]  # the root first, as astream_events lists them

    def _send(self, event: str, run_id: UUID, info: _RunInfo, data: dict[str, Any]) -> None:
        if HIDDEN_TAG in info.tags:
            return
        self.publisher.publish(
            [
                (
                    "events",
                    {
                        "event": event,
                        "name": info.name,
                        "run_id": str(run_id),
                        "parent_ids": self._parent_ids(run_id),
                        "tags": info.tags,
                        "metadata": info.metadata,
                        "data": data,
                    },
                )
            ]
        )

    def _end(self, kind: str | None, run_id: UUID, output: Any) -> None:
        with self._lock:
            info = self._runs.pop(run_id, None)
        if info is None:
            return
        kind = kind or info.kind
        if kind == "chain" and any(tag.startswith(NODE_TAG) for tag in info.tags):
            self._send("on_chain_stream", run_id, info, {"chunk": output})
        if info.parent is None:  # the graph's own run: its input was in its start event (as v2 sends it)
            self._send(f"on_{kind}_end", run_id, info, {"output": output})
            return
        inputs = info.inputs if kind != "chain" else info.inputs or {}
        self._send(f"on_{kind}_end", run_id, info, {"output": output, "input": inputs})

    # --- callbacks ----------------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        data = {} if inputs == {"input": ""} else {"input": inputs}  # as v2: LangChain's "no input" placeholder
        self._start("chain", serialized, run_id, parent_run_id, tags, metadata, kwargs.get("name"), data)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end("chain", run_id, outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        data = {"input": {"messages": messages}}
        self._start("chat_model", serialized, run_id, parent_run_id, tags, metadata, kwargs.get("name"), data)

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        data = {"input": {"prompts": prompts}}
        self._start("llm", serialized, run_id, parent_run_id, tags, metadata, kwargs.get("name"), data)

    def on_llm_new_token(self, token: Any, *, run_id: UUID, chunk: Any = None, **kwargs: Any) -> None:
        with self._lock:
            info = self._runs.get(run_id)
        if info is None:
            return
        if info.kind == "chat_model":
            piece = chunk.message if isinstance(chunk, ChatGenerationChunk) else chunk
            self._send("on_chat_model_stream", run_id, info, {"chunk": piece})
        else:
            self._send("on_llm_stream", run_id, info, {"chunk": chunk if chunk is not None else {"text": token}})

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            info = self._runs.get(run_id)
        if info is not None and info.kind == "chat_model":
            generations = [g for batch in response.generations for g in batch]
            message = getattr(generations[0], "message", None) if generations else None
            self._end("chat_model", run_id, message)
        else:
            self._end("llm", run_id, response)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        data = {"input": inputs if inputs is not None else input_str}
        self._start("tool", serialized, run_id, parent_run_id, tags, metadata, kwargs.get("name"), data)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end("tool", run_id, output)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            info = self._runs.pop(run_id, None)
        if info is not None:
            self._send("on_tool_error", run_id, info, {"error": repr(error)})

    def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        info = _RunInfo(kind="custom", name=name, tags=list(tags or []), metadata=dict(metadata or {}), parent=None)
        self._send("on_custom_event", run_id, info, data)


def events_config(config: RunnableConfig, publisher: Publisher) -> RunnableConfig:
    """``config`` with the events handler added to its callbacks (inherited by every node and model)."""
    handler = EventsHandler(publisher)
    callbacks = config.get("callbacks")
    if callbacks is None:
        added: Any = [handler]
    elif isinstance(callbacks, list):
        added = [*callbacks, handler]
    elif isinstance(callbacks, BaseCallbackManager):
        added = callbacks.copy()
        added.add_handler(handler, inherit=True)
    else:
        added = [handler]
    return {**config, "callbacks": added}
