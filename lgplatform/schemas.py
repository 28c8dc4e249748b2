"""Request bodies and responses of the LangGraph Platform-compatible API (``/lg/``), as ``langgraph_sdk`` knows them.

Field names and defaults follow the SDK (``langgraph_sdk/_async/*.py``). Fields the
SDK may send that Gatehouse ignores are listed in ``docs/platform-api.md``; fields
whose meaning Gatehouse cannot honour are accepted here and refused by the API
with a 422 naming them, so a client never believes an option took effect.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from approvals.inputs import Offset

SortOrder = Literal["asc", "desc"]


class AssistantSearchIn(Schema):
    graph_id: str | None = Field(default=None, max_length=200)
    metadata: dict[str, Any] | None = None
    name: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0
    sort_by: str | None = None
    sort_order: SortOrder | None = None


class ThreadCreateIn(Schema):
    thread_id: str | None = Field(default=None, max_length=64)
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    supersteps: list[Any] | None = None
    ttl: Any = None


class ThreadSearchIn(Schema):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    ids: list[Annotated[str, Field(max_length=64)]] | None = Field(default=None, max_length=1000)
    status: Literal["idle", "busy", "interrupted", "error"] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] | None = None
    sort_order: SortOrder | None = None
    select: list[str] | None = None
    extract: dict[str, str] | None = None


class ThreadStateUpdateIn(Schema):
    values: dict[str, Any] | None = None
    as_node: str | None = Field(default=None, max_length=200)
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = Field(default=None, max_length=64)


class ThreadCheckpointIn(Schema):
    checkpoint: dict[str, Any]
    subgraphs: bool = False


class HistoryIn(Schema):
    limit: int = Field(default=10, ge=1, le=1000)
    before: str | dict[str, Any] | None = None  # a checkpoint id, checked by the handler
    metadata: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None


class CommandIn(Schema):
    resume: Any = None
    update: dict[str, Any] | None = None
    goto: Any = None


class StateQuery(Schema):
    subgraphs: bool = False


class RunListQuery(Schema):
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0
    status: str | None = Field(default=None, max_length=20)


class CancelQuery(Schema):
    wait: bool = False
    action: str = Field(default="interrupt", max_length=20)


class RunCreateIn(Schema):
    assistant_id: str = Field(min_length=1, max_length=200)
    input: dict[str, Any] | None = None
    command: CommandIn | None = None
    metadata: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    stream_mode: str | list[str] | None = None
    interrupt_before: Any = None
    interrupt_after: Any = None
    webhook: str | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = Field(default=None, max_length=64)
    after_seconds: float | None = None
    if_not_exists: Literal["create", "reject"] | None = None


# --- the store (``client.store``): bodies as LangGraph Server's store routes take them ---


class StorePutIn(Schema):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    index: bool | list[str] | None = None
    ttl: float | None = None


class StoreDeleteIn(Schema):
    namespace: list[str]
    key: str


class StoreGetQuery(Schema):
    namespace: str = ""
    key: str = ""
    refresh_ttl: bool | None = None


class StoreSearchIn(Schema):
    namespace_prefix: list[str] = Field(default_factory=list)
    filter: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=100_000)
    query: str | None = Field(None, max_length=4000)
    refresh_ttl: bool | None = None


class StoreNamespacesIn(Schema):
    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = Field(None, ge=1, le=100)
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=100_000)


# --- responses: the shapes of langgraph_sdk's ``schema.py`` (Assistant, Thread, ThreadState, Run, ...) ---
# The envelopes are typed; what a graph or a caller puts in them (state values, metadata) stays any JSON.


class AssistantOut(Schema):
    assistant_id: str
    graph_id: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    version: int
    created_at: str
    updated_at: str


class GraphNodeOut(Schema):
    id: str
    type: str
    data: str


class GraphEdgeOut(Schema):
    source: str
    target: str


class AssistantGraphOut(Schema):
    nodes: list[GraphNodeOut]
    edges: list[GraphEdgeOut]


class AssistantSchemasOut(Schema):
    graph_id: str
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
        # LangGraph sends ``response_schema`` only when the interrupt declared one.
        data: dict[str, Any] = handler(self)
        if self.response_schema is None:
            data.pop("response_schema", None)
        return data


class ThreadOut(Schema):
    thread_id: str
    created_at: datetime
    updated_at: datetime
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
    checkpoint_map: dict[str, Any] | None


class StateTaskOut(Schema):
    id: str
    name: str
    path: list[str]
    error: str | None
    interrupts: list[InterruptOut]
    checkpoint: CheckpointRefOut | None
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


class ThreadUpdateStateOut(Schema):
    checkpoint: CheckpointRefOut


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


class StoreItemsOut(Schema):
    items: list[dict[str, Any]]  # langgraph's Item / SearchItem, values masked per reader (approvals.store)


class StoreNamespacesOut(Schema):
    namespaces: list[list[str]]


StateTaskOut.model_rebuild()  # its ``state`` refers to ThreadStateOut, defined after it
