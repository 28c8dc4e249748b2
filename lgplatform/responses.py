"""Responses of the LangGraph Platform-compatible API (``/lg/``): the shapes of ``langgraph_sdk.schema``.

Assistant, Thread, ThreadState (with its tasks and interrupts), Run and the
store's envelopes are typed here, so the OpenAPI document at ``/lg/docs``
describes them and a builder cannot drift from what the SDK expects. What a
graph or a caller owns (state values, metadata, config, an interrupt's value)
stays any JSON inside the envelope. The builders are ``lgplatform.services``'
``*_out`` functions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema
from pydantic import SerializerFunctionWrapHandler, model_serializer, model_validator


class AssistantVersionOut(Schema):
    # One version of an assistant, as LangGraph Server lists versions: the assistant without ``updated_at``.
    assistant_id: str
    graph_id: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    version: int
    created_at: str


class AssistantOut(AssistantVersionOut):
    updated_at: str


class InfoFlagsOut(Schema):
    assistants: bool
    crons: bool
    langsmith: bool


class InfoHostOut(Schema):
    kind: str


class InfoOut(Schema):
    # LangGraph Server's ``GET /info``: what a client (LangGraph Studio, agent-chat-ui) asks before anything else.
    version: str
    langgraph_py_version: str
    flags: InfoFlagsOut
    host: InfoHostOut


class AssistantGraphOut(Schema):
    # LangGraph's drawable graph as JSON (``Graph.to_json``): nodes ``{id, type?, data?}``, edges
    # ``{source, target, conditional?, data?}``.
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]


class AssistantSchemasOut(Schema):
    graph_id: str
    input_schema: dict[str, Any] | None
    output_schema: dict[str, Any] | None
    state_schema: dict[str, Any] | None
    config_schema: dict[str, Any] | None
    context_schema: dict[str, Any] | None


class SubgraphSchemasOut(Schema):
    # One subgraph's, as LangGraph Server lists them (``assistants.get_subgraphs``): no graph id of its own.
    input_schema: dict[str, Any] | None
    output_schema: dict[str, Any] | None
    state_schema: dict[str, Any] | None
    config_schema: dict[str, Any] | None
    context_schema: dict[str, Any] | None


class InterruptOut(Schema):
    value: Any
    id: str
    response_schema: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _without_absent_schema(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # In a thread or a state LangGraph Server sends ``response_schema`` only when the interrupt
        # declared one; where a run's output carries the interrupt (``__interrupt__``), always:
        # ``as_streamed``.
        data: dict[str, Any] = handler(self)
        if self.response_schema is None:
            data.pop("response_schema", None)
        return data

    def as_streamed(self) -> dict[str, Any]:
        """The interrupt as a run's output carries it (``runs.wait``/``join``, ``values``): null schema included."""
        return {"value": self.value, "id": self.id, "response_schema": self.response_schema}


class ThreadOut(Schema):
    thread_id: str
    created_at: datetime
    updated_at: datetime
    state_updated_at: datetime  # the thread row's last change: a run's outcome or status (its creation if none)
    metadata: dict[str, Any]
    status: str
    values: Any
    interrupts: dict[str, list[InterruptOut]]
    error: str | None
    config: dict[str, Any]


class CheckpointRefOut(Schema):
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    checkpoint_map: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _without_absent_map(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # LangGraph Server leaves ``checkpoint_map`` out of a reference that has none.
        data: dict[str, Any] = handler(self)
        if self.checkpoint_map is None:
            data.pop("checkpoint_map", None)
        return data


class StateTaskOut(Schema):
    id: str
    name: str
    path: list[Any]  # LangGraph's task path: ["__pregel_pull", node] or ["__pregel_push", index, ...]
    error: str | None
    interrupts: list[InterruptOut]
    # A subgraph's task: where its checkpoints are, ``{thread_id, checkpoint_ns}`` as LangGraph Server
    # sends it (null when ``state`` holds the subgraph's state itself).
    checkpoint: dict[str, Any] | None
    state: ThreadStateOut | None  # a subgraph in flight (``get_state(..., subgraphs=True)``)
    result: Any


class ThreadStateOut(Schema):
    values: Any
    next: list[str]
    tasks: list[StateTaskOut]
    checkpoint: CheckpointRefOut
    metadata: dict[str, Any]
    created_at: str | None
    parent_checkpoint: CheckpointRefOut | None
    interrupts: list[InterruptOut]
    # Gatehouse's own: why the graph cannot load this checkpoint ("" when it can); values are then as stored,
    # next and tasks unknown (docs/platform-api.md).
    state_unreadable: str = ""
    # The ids again, as LangGraph Server still sends them beside the references (older clients read these).
    checkpoint_id: str | None = None
    parent_checkpoint_id: str | None = None

    @model_validator(mode="after")
    def _ids_from_references(self) -> ThreadStateOut:
        self.checkpoint_id = self.checkpoint.checkpoint_id
        self.parent_checkpoint_id = self.parent_checkpoint.checkpoint_id if self.parent_checkpoint else None
        return self

    @model_serializer(mode="wrap")
    def _unreadable_only_when_so(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A state LangGraph loads has LangGraph Server's keys exactly; the reason is there only when it cannot.
        out: dict[str, Any] = handler(self)
        if not out.get("state_unreadable"):
            out.pop("state_unreadable", None)
        return out


class ThreadUpdateStateOut(Schema):
    checkpoint: CheckpointRefOut
    # As LangGraph Server answers an update: the new checkpoint also as a configurable, and its id.
    configurable: dict[str, Any] | None = None
    checkpoint_id: str | None = None

    @model_validator(mode="after")
    def _configurable_from_checkpoint(self) -> ThreadUpdateStateOut:
        ref = self.checkpoint
        self.configurable = {
            "thread_id": ref.thread_id,
            "checkpoint_ns": ref.checkpoint_ns,
            "checkpoint_id": ref.checkpoint_id,
        }
        self.checkpoint_id = ref.checkpoint_id
        return self


class RunOut(Schema):
    run_id: str
    thread_id: str
    assistant_id: str | None
    created_at: datetime
    updated_at: datetime
    status: str
    metadata: dict[str, Any]
    kwargs: dict[str, Any]
    multitask_strategy: str
    error: str | None


class CronOut(Schema):
    """A cron as LangGraph Server's ``Cron``; ``payload`` masked for its reader like the state it writes."""

    cron_id: str
    assistant_id: str
    thread_id: str | None
    on_run_completed: str | None
    end_time: datetime | None
    schedule: str
    timezone: str | None
    created_at: datetime
    updated_at: datetime
    payload: dict[str, Any]
    user_id: str | None
    next_run_date: datetime | None
    metadata: dict[str, Any]
    enabled: bool


class StoreItemsOut(Schema):
    items: list[dict[str, Any]]  # langgraph's Item / SearchItem, values masked per reader (approvals.store)


class StoreNamespacesOut(Schema):
    namespaces: list[list[str]]


StateTaskOut.model_rebuild()  # its ``state`` refers to ThreadStateOut, defined after it
