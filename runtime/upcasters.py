"""State schema versions and upcasters: paused threads survive a deploy that changes the state.

Each checkpoint Gatehouse writes for a graph carries the graph's schema
version in its metadata (``gatehouse_schema_version``; checkpoints written
before there was one count as version 1). When a checkpoint of an older
version is loaded to run the thread, the graph's upcasters turn its values
into the current shape (``upcasters[n]`` maps version n to n + 1), the
required fields of the current schema are checked, and the checkpoint is
rewritten in place (same checkpoint id, so pending interrupts and their
writes stay valid) with the new values under new channel versions. A
checkpoint that cannot be brought up to date raises ``CheckpointLoadError``,
which fails the run with its message: the thread never resumes with missing
data.

Reads for the console (``runtime.state``) upcast in memory only and never
write (``schema_readonly()``). See docs/schema-evolution.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.state_schema import keys_marked_required, pydantic_fields

if TYPE_CHECKING:  # Django's start reads graph schemas' settings: it does not load LangGraph (runtime.registry)
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import CheckpointTuple

VERSION_KEY = "gatehouse_schema_version"

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class CheckpointLoadError(RuntimeError):
    """A checkpoint cannot be loaded under the graph's current schema."""


@dataclass(frozen=True)
class GraphSchema:
    graph: str
    version: int = 1
    upcasters: Mapping[int, Upcaster] = field(default_factory=dict)
    required: tuple[str, ...] = ()

    def upcast(self, values: dict[str, Any], from_version: int) -> dict[str, Any]:
        for version in range(from_version, self.version):
            upcaster = self.upcasters.get(version)
            if upcaster is None:
                continue  # additive change: nothing to transform
            try:
                values = upcaster(dict(values))
            except Exception as exc:
                raise CheckpointLoadError(
                    f"graph {self.graph!r}: upcaster from schema version {version} to {version + 1} failed: {exc!r}"
                ) from exc
            if not isinstance(values, dict):
                raise CheckpointLoadError(
                    f"graph {self.graph!r}: upcaster from schema version {version} returned "
                    f"{type(values).__name__}, not a dict"
                )
        return values


_readonly: contextvars.ContextVar[bool] = contextvars.ContextVar("gatehouse_schema_readonly", default=False)


@contextlib.contextmanager
def schema_readonly() -> Iterator[None]:
    """Upcast in memory only (reads for the console); never rewrite a checkpoint."""
    token = _readonly.set(True)
    try:
        yield
    finally:
        _readonly.reset(token)


def schema_build(
    graph: str, state_schema: type | None, *, version: int | None, upcasters: Mapping[int, Upcaster] | None
) -> GraphSchema:
    upcasters = dict(upcasters or {})
    for key, fn in upcasters.items():
        if not isinstance(key, int) or key < 1 or not callable(fn):
            raise ValueError(f"graph {graph!r}: upcasters must map a schema version (int >= 1) to a function")
    if version is None:
        version = max(upcasters) + 1 if upcasters else 1
    if upcasters and max(upcasters) >= version:
        raise ValueError(f"graph {graph!r}: an upcaster from version {max(upcasters)} needs schema version > it")
    return GraphSchema(graph, version, upcasters, tuple(required_fields(state_schema)))


def required_fields(schema: type | None) -> list[str]:
    """Fields the state must hold: ``Required[...]`` TypedDict keys, pydantic and dataclass fields without defaults.

    A plain ``total=True`` TypedDict key is *not* required: LangGraph states
    routinely lack keys that later nodes set, so only an explicit ``Required``
    says "a checkpoint without it is broken".
    """
    if schema is None:
        return []
    # A Pydantic model's or Pydantic dataclass's own word: the dataclass's ``x: int = Field(gt=0)`` has a
    # default (the Field) for ``dataclasses``, yet no value, so it was taken for optional.
    pydantic = pydantic_fields(schema)
    if pydantic is not None:
        return [name for name, info in pydantic.items() if info.is_required()]
    if dataclasses.is_dataclass(schema):
        return [
            f.name
            for f in dataclasses.fields(schema)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
    return keys_marked_required(schema) if isinstance(schema, type) else []


class SchemaVersionedSaver:
    """Mixin for a ``BaseCheckpointSaver``: stamp the schema version on writes, upcast old checkpoints on reads.

    ``graph_schema`` is set on the per-graph copy ``runtime.registry`` binds;
    the process-wide saver has none and passes checkpoints through.
    """

    graph_schema: GraphSchema | None = None

    def for_graph(self, schema: GraphSchema) -> Any:
        import copy

        clone = copy.copy(self)
        clone.graph_schema = schema
        return clone

    def put(self, config: RunnableConfig, checkpoint: Any, metadata: Any, new_versions: Any) -> RunnableConfig:
        if self.graph_schema is not None and not config["configurable"].get("checkpoint_ns"):
            metadata = {**metadata, VERSION_KEY: self.graph_schema.version}
        return super().put(config, checkpoint, metadata, new_versions)  # type: ignore[misc,no-any-return]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        tup: CheckpointTuple | None = super().get_tuple(config)  # type: ignore[misc]
        return self._upcast_tuple(tup, persist=not config["configurable"].get("checkpoint_id"))

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        for tup in super().list(config, **kwargs):  # type: ignore[misc]
            upcast = self._upcast_tuple(tup, persist=False)
            assert upcast is not None  # noqa: S101 - a listed tuple always upcasts; narrows the type
            yield upcast

    def _upcast_tuple(self, tup: CheckpointTuple | None, *, persist: bool) -> CheckpointTuple | None:
        schema = self.graph_schema
        if schema is None or tup is None or tup.config["configurable"].get("checkpoint_ns"):
            return tup
        metadata_in: dict[str, Any] = dict(tup.metadata or {})
        stored = int(metadata_in.get(VERSION_KEY, 1))
        if stored >= schema.version:
            return tup
        thread_id = tup.config["configurable"]["thread_id"]
        checkpoint_id = tup.config["configurable"]["checkpoint_id"]
        old = tup.checkpoint["channel_values"]
        readonly = _readonly.get()
        try:
            values = schema.upcast(dict(old), stored)
        except CheckpointLoadError:
            if readonly:
                return tup  # the console shows the state as stored; a run would fail with the error
            raise
        missing = [name for name in schema.required if name not in values]
        if missing and not readonly:
            raise CheckpointLoadError(
                f"thread {thread_id}: checkpoint {checkpoint_id} was saved under schema version {stored} of graph "
                f"{schema.graph!r}; version {schema.version} requires field(s) {', '.join(map(repr, missing))}, "
                f"which it lacks and no upcaster supplies"
            )
        versions = dict(tup.checkpoint["channel_versions"])
        changed: dict[str, Any] = {}
        for key in set(old) - set(values):
            versions.pop(key, None)
        for key, value in values.items():
            if key not in old or old[key] is not value:
                # A new version, so savers that store values per channel version
                # (PostgresSaver's checkpoint_blobs) keep the upcast value.
                versions[key] = self.get_next_version(versions.get(key), None)  # type: ignore[attr-defined]
                changed[key] = versions[key]
        checkpoint: Any = {**tup.checkpoint, "channel_values": values, "channel_versions": versions}
        metadata: Any = {**metadata_in, VERSION_KEY: schema.version, "gatehouse_upcast_from": stored}
        if persist and not readonly:
            parent = tup.parent_config or {"configurable": {}}
            put_config: RunnableConfig = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": "",
                    **(
                        {"checkpoint_id": parent["configurable"]["checkpoint_id"]}
                        if parent["configurable"].get("checkpoint_id")
                        else {}
                    ),
                }
            }
            self.put(put_config, checkpoint, metadata, changed)
        return tup._replace(checkpoint=checkpoint, metadata=metadata)
