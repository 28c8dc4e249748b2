"""Request bodies of the LangGraph Platform-compatible API (``/lg/``), as ``langgraph_sdk`` sends them.

Field names and defaults follow the SDK (``langgraph_sdk/_async/*.py``). Fields the
SDK may send that Gatehouse ignores are listed in ``docs/platform-api.md``; fields
whose meaning Gatehouse cannot honour are accepted here and refused by the API
with a 422 naming them, so a client never believes an option took effect.
The responses are in ``lgplatform.responses``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args
from uuid import UUID

from ninja import Schema
from pydantic import BeforeValidator, Field, Strict, StrictBool
from pydantic_core import PydanticCustomError

from approvals.inputs import Offset, ThreadMetadata
from approvals.store import STORE_LIMIT_MAX, STORE_OFFSET_MAX
from runtime.stream import CLIENT_MODES

SortOrder = Literal["asc", "desc"]
# A filter's keys each become a condition of one statement; SQLite (embedded) refuses a statement of
# more than ~1000 nested terms ("Expression tree is too large", a 500), so a filter names at most this many.
FILTER_KEYS_MAX = 100
Filter = Annotated[dict[str, Any], Field(max_length=FILTER_KEYS_MAX)]
# A number in a JSON body is a JSON number: Pydantic's lax mode read ``true`` as 1 (``{"limit": true}``
# listed one state, ``"ttl": true`` kept an item a minute). Query strings stay lax: they are text.
BodyOffset = Annotated[Offset, Strict()]
BodySeconds = Annotated[float, Strict()]


class AssistantSearchIn(Schema):
    graph_id: str | None = Field(default=None, max_length=200)
    metadata: Filter | None = None
    name: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=10, ge=1, le=1000, strict=True)
    offset: BodyOffset = 0
    sort_by: Literal["assistant_id", "graph_id", "name", "created_at", "updated_at"] | None = None
    sort_order: SortOrder | None = None


class AssistantCountIn(Schema):
    graph_id: str | None = Field(default=None, max_length=200)
    metadata: Filter | None = None
    name: str | None = Field(default=None, max_length=200)


class AssistantVersionsIn(Schema):
    metadata: Filter | None = None
    limit: int = Field(default=10, ge=1, le=1000, strict=True)
    offset: BodyOffset = 0


class ThreadCreateIn(Schema):
    thread_id: str | None = Field(default=None, max_length=64)
    metadata: ThreadMetadata | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    supersteps: list[Any] | None = None
    ttl: Any = None


class ThreadPatchIn(Schema):
    metadata: ThreadMetadata | None = None
    ttl: Any = None


ThreadStatusIn = Literal["idle", "busy", "interrupted", "error"]


class ThreadSearchIn(Schema):
    metadata: Filter | None = None
    values: Filter | None = None
    ids: list[Annotated[str, Field(max_length=64)]] | None = Field(default=None, max_length=1000)
    status: ThreadStatusIn | None = None
    limit: int = Field(default=10, ge=1, le=1000, strict=True)
    offset: BodyOffset = 0
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] | None = None
    sort_order: SortOrder | None = None
    select: list[str] | None = None
    extract: dict[str, str] | None = None


class ThreadCountIn(Schema):
    metadata: Filter | None = None
    values: Filter | None = None
    status: ThreadStatusIn | None = None


class ThreadStateUpdateIn(Schema):
    values: dict[str, Any] | None = None
    as_node: str | None = Field(default=None, max_length=200)
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = Field(default=None, max_length=64)


class ThreadCheckpointIn(Schema):
    checkpoint: dict[str, Any]
    subgraphs: StrictBool = False


class HistoryIn(Schema):
    limit: int = Field(default=10, ge=1, le=1000, strict=True)
    # A checkpoint id, a checkpoint or a config naming one (``lgplatform.services.checkpoint_id_read``).
    before: str | dict[str, Any] | None = None
    metadata: Filter | None = None
    checkpoint: dict[str, Any] | None = None  # only this checkpoint, as LangGraph lists a config naming one


class HistoryQuery(Schema):
    limit: int = Field(default=10, ge=1, le=1000)
    before: str | None = Field(default=None, max_length=100)


class CommandIn(Schema):
    resume: Any = None
    update: dict[str, Any] | None = None
    goto: Any = None


def _object_or_null(value: Any) -> Any:
    # A ninja Schema reads any value by attribute: "x" or [] was a command with nothing set, i.e. none.
    if value is not None and not isinstance(value, dict):
        raise PydanticCustomError("dict_type", "must be an object")
    return value


class StateQuery(Schema):
    subgraphs: bool = False


# A run's statuses as LangGraph Server reports them (``langgraph_sdk.schema.RunStatus``).
RunStatusIn = Literal["pending", "running", "error", "success", "timeout", "interrupted"]


class RunListQuery(Schema):
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0
    status: RunStatusIn | None = None


class JoinStreamQuery(Schema):
    stream_mode: list[str] = Field(default_factory=list, max_length=len(CLIENT_MODES))
    cancel_on_disconnect: bool = False  # ignored: runs always continue


class ThreadStreamQuery(Schema):
    # langgraph_sdk sends ``stream_mode`` (repeated for several); LangGraph Server reads ``stream_modes``, a
    # comma-separated list. Values: lgplatform.thread_stream.THREAD_MODES.
    stream_mode: list[str] = Field(default_factory=list, max_length=8)
    stream_modes: str | None = Field(default=None, max_length=200)
    follow: bool = True  # Gatehouse's own: false ends the stream once the runs it found have settled


class RunsCancelIn(Schema):
    status: Literal["pending", "running", "all"] | None = None
    thread_id: UUID | None = None
    run_ids: list[UUID] | None = Field(default=None, max_length=1000)


class CancelManyQuery(Schema):
    action: Literal["interrupt", "rollback"] = "interrupt"


class CancelQuery(Schema):
    wait: bool = False
    action: str = Field(default="interrupt", max_length=20)


class RunCreateIn(Schema):
    assistant_id: str = Field(min_length=1, max_length=200)
    input: dict[str, Any] | None = None
    command: Annotated[CommandIn | None, BeforeValidator(_object_or_null)] = None
    metadata: ThreadMetadata | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    stream_mode: str | list[str] | None = None
    stream_subgraphs: StrictBool = False
    interrupt_before: Any = None
    interrupt_after: Any = None
    webhook: str | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = Field(default=None, max_length=64)
    after_seconds: BodySeconds | None = None
    if_not_exists: Literal["create", "reject"] | None = None


class StatelessRunCreateIn(RunCreateIn):
    """A stateless run (``client.runs.wait(None, ...)``): a run on a thread made for it. What it may not
    carry is refused by ``lgplatform.services.stateless_run_check``; ``if_not_exists`` is ignored, as
    LangGraph Server ignores it (the thread is always new)."""

    on_completion: Literal["delete", "keep"] | None = None


# A batch is created in one transaction: bounded, as every list a request sends is.
STATELESS_BATCH_MAX = 100
StatelessRunBatchIn = Annotated[list[StatelessRunCreateIn], Field(min_length=1, max_length=STATELESS_BATCH_MAX)]


# --- crons (``client.crons``): bodies as LangGraph Server's cron routes take them ---

CronField = Literal[
    "cron_id",
    "assistant_id",
    "thread_id",
    "on_run_completed",
    "end_time",
    "schedule",
    "timezone",
    "created_at",
    "updated_at",
    "payload",
    "user_id",
    "next_run_date",
    "metadata",
    "enabled",
]
CronSortBy = Literal["cron_id", "assistant_id", "thread_id", "next_run_date", "end_time", "created_at", "updated_at"]
CronSchedule = Annotated[str, Field(min_length=1, max_length=200)]
CronTimezone = Annotated[str, Field(min_length=1, max_length=64)]


class CronRunIn(Schema):
    """What each run a cron starts is made from (``lgplatform.crons``: checked as a run's body is)."""

    input: dict[str, Any] | None = None
    metadata: ThreadMetadata | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    interrupt_before: Any = None
    interrupt_after: Any = None
    webhook: str | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    stream_mode: str | list[str] | None = None
    stream_subgraphs: StrictBool | None = None
    stream_resumable: StrictBool | None = None
    checkpoint_during: StrictBool | None = None
    durability: Literal["sync", "async", "exit"] | None = None


class CronCreateIn(CronRunIn):
    assistant_id: str = Field(min_length=1, max_length=200)
    schedule: CronSchedule
    on_run_completed: Literal["delete", "keep"] | None = None
    end_time: datetime | None = None  # naive: UTC, as LangGraph Server stores it
    enabled: StrictBool = True
    timezone: CronTimezone | None = None


class CronPatchIn(CronRunIn):
    """``crons.update``: what is sent changes; ``end_time: null`` clears the end time."""

    schedule: CronSchedule | None = None
    on_run_completed: Literal["delete", "keep"] | None = None
    end_time: datetime | None = None  # naive: UTC, as LangGraph Server stores it
    enabled: StrictBool | None = None
    timezone: CronTimezone | None = None


class CronSearchIn(Schema):
    assistant_id: str | None = Field(default=None, max_length=200)
    thread_id: str | None = Field(default=None, max_length=64)
    enabled: StrictBool | None = None
    metadata: Filter | None = None
    limit: int = Field(default=10, ge=1, le=1000, strict=True)
    offset: BodyOffset = 0
    sort_by: CronSortBy | None = None
    sort_order: SortOrder | None = None
    select: list[CronField] | None = Field(default=None, max_length=len(get_args(CronField)))


class CronCountIn(Schema):
    assistant_id: str | None = Field(default=None, max_length=200)
    thread_id: str | None = Field(default=None, max_length=64)
    enabled: StrictBool | None = None
    metadata: Filter | None = None


# --- the store (``client.store``): bodies as LangGraph Server's store routes take them ---


class StorePutIn(Schema):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    index: StrictBool | list[str] | None = None
    ttl: BodySeconds | None = None  # minutes, as LangGraph's store takes it


class StoreDeleteIn(Schema):
    namespace: list[str]
    key: str


class StoreGetQuery(Schema):
    namespace: str = ""
    key: str = ""
    refresh_ttl: bool | None = None


class StoreSearchIn(Schema):
    namespace_prefix: list[str] = Field(default_factory=list)
    filter: Filter | None = None
    limit: int = Field(10, ge=1, le=STORE_LIMIT_MAX, strict=True)
    offset: int = Field(0, ge=0, le=STORE_OFFSET_MAX, strict=True)
    query: str | None = Field(None, max_length=4000)
    refresh_ttl: StrictBool | None = None


class StoreNamespacesIn(Schema):
    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = Field(None, ge=1, le=100, strict=True)
    limit: int = Field(100, ge=1, le=STORE_LIMIT_MAX, strict=True)
    offset: int = Field(0, ge=0, le=STORE_OFFSET_MAX, strict=True)
