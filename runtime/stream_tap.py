"""The worker's side of a run's stream (``runtime.stream``): LangGraph's chunks as named JSON events, published
to the run's log from the executor's stream loop."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, BaseMessageChunk, message_chunk_to_message
from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel
from langgraph.types import Interrupt, Send

from runtime.jsonable import to_jsonable
from runtime.models import Run
from runtime.stream import _NATIVE, ALWAYS_PUBLISHED, RunLog, run_log
from runtime.stream_events import events_config

log = logging.getLogger(__name__)


# --- the worker's side: chunks → named JSON events -----------------------------------------------


def chunk_jsonable(value: Any) -> Any:
    """A chunk as JSON values, with LangGraph's objects in the Platform API's shapes."""
    if isinstance(value, Interrupt):
        # ``response_schema`` is null when the interrupt declared none, as LangGraph Server sends it.
        return {
            "value": chunk_jsonable(value.value),
            "id": value.id,
            "response_schema": to_jsonable(getattr(value, "response_schema", None)),
        }
    if isinstance(value, Send):
        return {"node": value.node, "arg": chunk_jsonable(value.arg)}
    if isinstance(value, Mapping):
        return {str(k): chunk_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [chunk_jsonable(v) for v in value]
    return to_jsonable(value)


def _checkpoint_ref(config: Any) -> dict[str, Any] | None:
    configurable = (config or {}).get("configurable") if isinstance(config, Mapping) else None
    if not configurable:
        return None
    ref = {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": configurable.get("checkpoint_id"),
    }
    if configurable.get("checkpoint_map"):
        ref["checkpoint_map"] = configurable["checkpoint_map"]
    return ref


def _debug_checkpoint(payload: Any) -> Any:
    # As LangGraph Server sends a ``debug`` checkpoint: the configs also as checkpoint references, and a
    # subgraph task by its checkpoint. (Its ``checkpoints`` chunks are LangGraph's own: the configs alone,
    # and a subgraph task's ``state`` the config naming the subgraph's checkpoints.)
    if not isinstance(payload, dict) or "config" not in payload:
        return payload
    out = dict(payload)
    out["checkpoint"] = _checkpoint_ref(payload.get("config"))
    out["parent_checkpoint"] = _checkpoint_ref(payload.get("parent_config"))
    tasks = []
    for task in payload.get("tasks") or []:
        task = dict(task)
        state = task.get("state")
        if isinstance(state, Mapping) and state.get("configurable"):
            task["checkpoint"] = state["configurable"]
            del task["state"]
        tasks.append(task)
    out["tasks"] = tasks
    return out


class Publisher:
    """Names and publishes one run attempt's chunks; thread-safe (callbacks may run on the graph's executor)."""

    def __init__(self, run_id: str, modes: set[str], subgraphs: bool, sink: RunLog) -> None:
        self.run_id = run_id
        self.modes = modes
        self.subgraphs = subgraphs
        self.sink: RunLog | None = sink
        self._messages: dict[str, BaseMessage] = {}
        self._lock = threading.Lock()

    def chunk(self, namespace: tuple[str, ...], mode: str, chunk: Any) -> None:
        if namespace and not self.subgraphs:
            return
        suffix = "|" + "|".join(namespace) if namespace else ""
        events: list[tuple[str, Any]] = []
        if mode == "messages":
            message, metadata = chunk
            if "messages-tuple" in self.modes:
                events.append(("messages" + suffix, [message, metadata]))
            if "messages" in self.modes:
                events.extend(self._accumulated(message, metadata))
        elif mode == "debug":
            if "debug" in self.modes:
                payload = chunk.get("payload") if isinstance(chunk, dict) else None
                if isinstance(chunk, dict) and chunk.get("type") == "checkpoint":
                    chunk = {**chunk, "payload": _debug_checkpoint(payload)}
                events.append(("debug" + suffix, chunk))
        elif mode in self.modes or mode == ALWAYS_PUBLISHED:
            events.append((mode + suffix, chunk))
        self.publish(events)

    def _accumulated(self, message: BaseMessage, metadata: Any) -> list[tuple[str, Any]]:
        # "messages" as LangGraph Server streams it: the message so far, re-sent whole on every token.
        events: list[tuple[str, Any]] = []
        key = str(message.id)
        seen = self._messages.get(key)
        if seen is None:
            events.append(("messages/metadata", {key: {"metadata": metadata}}))
            self._messages[key] = message
        elif isinstance(seen, BaseMessageChunk) and isinstance(message, BaseMessageChunk):
            self._messages[key] = seen + message
        else:
            self._messages[key] = message
        name = "messages/partial" if isinstance(message, BaseMessageChunk) else "messages/complete"
        events.append((name, [message_chunk_to_message(self._messages[key])]))
        return events

    def publish(self, events: Sequence[tuple[str, Any]]) -> None:
        if not events or self.sink is None:
            return
        try:
            encoded = [(name, json.dumps(chunk_jsonable(data), separators=(",", ":"))) for name, data in events]
            with self._lock:
                self.sink.append(self.run_id, encoded)
        except Exception:  # a stream is a view of the run: it must never fail it
            log.warning(
                "run %s: its stream could not be published; readers get the final values", self.run_id, exc_info=True
            )
            self.sink = None


# --- the hook in the executor's stream loop ----------------------------------------------------------


def stream_tap(
    run: Run, graph: Pregel[Any, Any, Any, Any], graph_input: Any, config: RunnableConfig, **kwargs: Any
) -> Iterator[Any]:
    """``graph.stream(graph_input, config, **kwargs)``, unchanged for the executor.

    When a client streams this run (``run.stream``), LangGraph is asked for the
    client's modes as well, every chunk is published to the run's log, and the
    executor still gets only the chunks, in the shape, it asked for.
    """
    options = run.stream or {}
    if not options.get("modes"):
        return graph.stream(graph_input, config, **kwargs)
    return _tapped(run, options, graph, graph_input, config, kwargs)


def _tapped(
    run: Run,
    options: dict[str, Any],
    graph: Pregel[Any, Any, Any, Any],
    graph_input: Any,
    config: RunnableConfig,
    kwargs: dict[str, Any],
) -> Iterator[Any]:
    asked = kwargs.pop("stream_mode", None) or graph.stream_mode
    asked_modes = [asked] if isinstance(asked, str) else list(asked)
    asked_subgraphs = bool(kwargs.pop("subgraphs", False))
    client = set(options["modes"])
    publisher = Publisher(str(run.id), client, bool(options.get("subgraphs")), run_log())
    modes: Any = sorted({*asked_modes, ALWAYS_PUBLISHED, *(_NATIVE[m] for m in client if m in _NATIVE)})
    if "events" in client:
        config = events_config(config, publisher)
    subgraphs = publisher.subgraphs or asked_subgraphs
    for item in graph.stream(graph_input, config, stream_mode=modes, subgraphs=subgraphs, **kwargs):
        namespace, mode, chunk = item if subgraphs else ((), *item)
        namespace = tuple(namespace)
        publisher.chunk(namespace, mode, chunk)
        if mode not in asked_modes or (namespace and not asked_subgraphs):
            continue
        if asked_subgraphs:
            yield (namespace, chunk) if isinstance(asked, str) else (namespace, mode, chunk)
        else:
            yield chunk if isinstance(asked, str) else (mode, chunk)
