"""Reading thread state from the checkpointer.

These functions do no access control: call them only through
``approvals.gateway``, which authorises and audits every read.

Reads never write: a checkpoint saved under an older schema version is
upcast in memory only (``schema_readonly``). Large values stored as blobs
(``runtime.blobs``) are resolved for a single state (the detail a reviewer
decides on) and shown as ``{"$blob": sha, "size": n}`` placeholders in
history listings, so listing a thread never loads its documents;
``thread_blob_read`` fetches one on demand.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.types import StateSnapshot

from runtime.as_saved import without_update
from runtime.blobs import MARKER, BlobSpillingSaver, blobs_lazy
from runtime.checkpointer import checkpointer_get
from runtime.jsonable import to_jsonable
from runtime.models import BlobRef, Thread
from runtime.registry import graph_get, graph_is_external, graph_is_registered
from runtime.upcasters import schema_readonly


@dataclass(frozen=True)
class StepTask:
    """One task of a checkpoint's step: LangGraph's task id, its node, and what it returned once it finished."""

    id: str
    name: str
    result: Any = None
    checkpoint_ns: str = ""  # a subgraph's task: the namespace its own checkpoints are kept under
    # LangGraph's path for the task: ("__pregel_pull", node), or ("__pregel_push", index, ...) for a Send's.
    path: tuple[Any, ...] = ()
    # The ids of the interrupts the task raised, as LangGraph lists them on it; None when not read from
    # LangGraph (several tasks of one node, as a Send fan-out makes, each hold only their own).
    interrupt_ids: tuple[str, ...] | None = None


@dataclass(frozen=True)
class CheckpointView:
    checkpoint_id: str
    parent_id: str
    step: int
    source: str
    created_at: str
    next: list[str]
    values: dict[str, Any]
    writes: Any
    tasks: tuple[StepTask, ...] = ()


def _namespace_of(state: Any) -> str:
    """A subgraph task's namespace: LangGraph gives its config (or, with subgraphs, its snapshot's)."""
    config = state.config if isinstance(state, StateSnapshot) else state
    return str(((config or {}).get("configurable") or {}).get("checkpoint_ns", "")) if isinstance(config, dict) else ""


def _config(thread: Thread, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": str(thread.id)}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _view(snapshot: Any) -> CheckpointView:
    metadata = snapshot.metadata or {}
    parent = (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id", "")
    return CheckpointView(
        checkpoint_id=snapshot.config["configurable"].get("checkpoint_id", ""),
        parent_id=parent,
        step=int(metadata.get("step", -1)),
        source=str(metadata.get("source", "")),
        created_at=snapshot.created_at or "",
        next=list(snapshot.next),
        values=to_jsonable(snapshot.values or {}),
        writes=to_jsonable(metadata.get("writes")),
        tasks=tuple(_step_task(t) for t in snapshot.tasks),
    )


def _step_task(task: Any) -> StepTask:
    return StepTask(
        str(task.id),
        task.name,
        to_jsonable(task.result),
        _namespace_of(task.state),
        path=tuple(to_jsonable(list(task.path))),
        interrupt_ids=tuple(str(i.id) for i in task.interrupts),
    )


class _AsSaved(BaseCheckpointSaver[Any]):
    """A thread's checkpoints as they were saved, without the state update a resume wrote onto them.

    LangGraph stores a ``Command(update=...)`` as pending writes of the checkpoint the thread paused at,
    and ``get_state`` applies them: the checkpoint a reviewer decided on then showed their own edit, as
    if it had been the state they saw ("the state the signer saw" said 15000 where they saw 18000). A
    read goes through this view; runs use the saver itself (a replay's source loads as saved there:
    ``runtime.as_saved.ReplaySourceAsSaved``).
    """

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        super().__init__(serde=saver.serde)
        self._saver = saver

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return without_update(self._saver.get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for item in self._saver.list(config, filter=filter, before=before, limit=limit):
            kept = without_update(item)
            if kept is not None:
                yield kept


def _as_saved(graph: Any, config: RunnableConfig) -> RunnableConfig:
    """``config`` reading ``graph``'s checkpoints through ``_AsSaved`` (LangGraph takes a saver from the config)."""
    saver = graph.checkpointer
    if not isinstance(saver, BaseCheckpointSaver):
        return config
    return {**config, "configurable": {**config["configurable"], CONFIG_KEY_CHECKPOINTER: _AsSaved(saver)}}


def _retired_view(item: CheckpointTuple) -> CheckpointView:
    """A checkpoint of a graph this instance no longer registers, read from the saver alone: the state's
    channels, without what only the graph knows (the nodes next, the step's tasks)."""
    metadata = item.metadata or {}
    parent = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id", "")
    channels = item.checkpoint.get("channel_values") or {}
    # LangGraph's own channels ("__start__", "branch:to:node", ...) are not the graph's state.
    values = {k: v for k, v in channels.items() if not k.startswith("__") and ":" not in k}
    return CheckpointView(
        checkpoint_id=str(item.config["configurable"].get("checkpoint_id", "")),
        parent_id=parent,
        step=int(metadata.get("step", -1)),
        source=str(metadata.get("source", "")),
        created_at=str(item.checkpoint.get("ts", "")),
        next=[],
        values=to_jsonable(values),
        writes=None,
    )


def _retired_config(thread: Thread, checkpoint_id: str | None = None) -> RunnableConfig:
    config = _config(thread, checkpoint_id)
    config["configurable"]["checkpoint_ns"] = ""  # the root graph's checkpoints, not its subgraphs'
    return config


def thread_state_read(
    thread: Thread, checkpoint_id: str | None = None, *, resolve_blobs: bool = True
) -> CheckpointView | None:
    # Created through /lg/ and not bound to a graph by a first run yet, or an external engine's thread.
    if not thread.graph or graph_is_external(thread.graph):
        return None
    lazy = contextlib.nullcontext() if resolve_blobs else blobs_lazy()
    if not graph_is_registered(thread.graph):
        with lazy:
            item = checkpointer_get().get_tuple(_retired_config(thread, checkpoint_id))
        return _retired_view(item) if item is not None else None
    graph = graph_get(thread.graph).compiled()
    with schema_readonly(), lazy:
        snapshot = graph.get_state(_as_saved(graph, _config(thread, checkpoint_id)))
    if not snapshot.created_at:
        return None
    return _view(snapshot)


def thread_history_read(
    thread: Thread,
    *,
    limit: int = 100,
    before: str | None = None,
    checkpoint_id: str | None = None,
    resolve_blobs: bool = False,
) -> list[CheckpointView]:
    """The thread's checkpoints, newest first: those ``before`` one of its checkpoints (none before a
    checkpoint it does not have: ids compare by time, so an unknown one would page arbitrarily), or
    only ``checkpoint_id``, as LangGraph lists them for a config naming one."""
    if not thread.graph or graph_is_external(thread.graph):
        return []
    lazy = contextlib.nullcontext() if resolve_blobs else blobs_lazy()
    if not graph_is_registered(thread.graph):
        before_cfg = _retired_config(thread, before) if before else None
        with lazy:
            items = checkpointer_get().list(_retired_config(thread), limit=limit, before=before_cfg)
            return _with_nodes_that_ran([_retired_view(item) for item in items])
    graph = graph_get(thread.graph).compiled()
    before_cfg = _config(thread, before) if before else None
    with schema_readonly(), lazy:
        if before_cfg is not None and checkpointer_get().get_tuple(before_cfg) is None:
            return []
        config = _as_saved(graph, _config(thread, checkpoint_id))
        listed = graph.get_state_history(config, limit=limit, before=before_cfg)
        views = [_view(s) for s in listed]
    return _with_nodes_that_ran(views)


def _with_nodes_that_ran(views: list[CheckpointView]) -> list[CheckpointView]:
    """Name the nodes whose writes produced each checkpoint.

    LangGraph 1.x no longer records ``writes`` in checkpoint metadata; the nodes
    that ran between a checkpoint and its parent are the parent's ``next``.
    Views are newest first, so a checkpoint's parent is the following view.
    """
    named = []
    for index, view in enumerate(views):
        parent = views[index + 1] if index + 1 < len(views) else None
        if not view.writes and parent is not None and parent.checkpoint_id == view.parent_id and parent.next:
            view = dataclasses.replace(view, writes=dict.fromkeys(parent.next))
        named.append(view)
    return named


def thread_blob_read(thread: Thread, sha256: str) -> Any:
    """One large value of the thread's state, for a view that shows a ``{"$blob": ...}`` placeholder in full.

    Only blobs the thread references are served, so a sha from one thread
    cannot be used to read another's document.
    """
    saver = checkpointer_get()
    if (
        not isinstance(saver, BlobSpillingSaver)
        or not BlobRef.objects.filter(thread_id=str(thread.id), blob_id=sha256).exists()
    ):
        raise LookupError(f"thread {thread.id} has no blob {sha256}")
    from runtime.models import Blob

    blob = Blob.objects.only("sha256", "size").get(sha256=sha256)
    # The serialiser's type is in the marker, not the row; every marker for a sha has the same bytes.
    marker = _marker_for(saver, str(thread.id), sha256) or {MARKER: sha256, "t": "msgpack", "n": blob.size}
    return to_jsonable(saver.blob_value(marker))


def _marker_for(saver: BlobSpillingSaver, thread_id: str, sha256: str) -> dict[str, Any] | None:
    from runtime.blobs import is_marker

    for tup in super(BlobSpillingSaver, saver).list({"configurable": {"thread_id": thread_id}}):  # type: ignore[misc]
        for value in [*tup.checkpoint["channel_values"].values(), *(w[2] for w in tup.pending_writes or [])]:
            if is_marker(value) and value[MARKER] == sha256:
                return value  # type: ignore[no-any-return]
    return None


# --- subgraph states (time travel / inspection: checkpoint_ns) ------------------------------


@dataclass(frozen=True)
class SubgraphView:
    """The state of a subgraph in flight at a checkpoint: the task that runs it, its namespace, its state."""

    task_id: str
    name: str
    checkpoint_ns: str
    view: CheckpointView
    children: list[SubgraphView]
    # The checkpoint ids of every enclosing graph and its own, by namespace ("" the root's).
    checkpoint_map: dict[str, str] = dataclasses.field(default_factory=dict)
    parent_checkpoint_map: dict[str, str] = dataclasses.field(default_factory=dict)


def _subgraphs_of(snapshot: Any) -> list[SubgraphView]:
    found = []
    for task in snapshot.tasks:
        child = task.state
        if not isinstance(child, StateSnapshot) or not child.created_at:
            continue
        found.append(
            SubgraphView(
                task_id=str(task.id),
                name=task.name,
                checkpoint_ns=str(child.config.get("configurable", {}).get("checkpoint_ns", "")),
                view=_view(child),
                children=_subgraphs_of(child),
                checkpoint_map=_map_of(child.config),
                parent_checkpoint_map=_map_of(child.parent_config),
            )
        )
    return found


def _map_of(config: Any) -> dict[str, str]:
    found = ((config or {}).get("configurable") or {}).get("checkpoint_map") if isinstance(config, dict) else None
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def thread_subgraphs_read(thread: Thread, checkpoint_id: str | None = None) -> list[SubgraphView]:
    """The subgraphs in flight at the checkpoint (LangGraph keeps their state only while they are)."""
    if not thread.graph or graph_is_external(thread.graph) or not graph_is_registered(thread.graph):
        return []  # a graph no longer registered: only the graph knows which tasks are subgraphs
    graph = graph_get(thread.graph).compiled()
    with schema_readonly():
        snapshot = graph.get_state(_config(thread, checkpoint_id), subgraphs=True)
    return _subgraphs_of(snapshot) if snapshot.created_at else []
