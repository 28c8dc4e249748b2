"""Reading thread state from the checkpointer.

These functions do no access control: call them only through
``approvals.gateway``, which authorises and audits every read.

Reads never write: a checkpoint saved under an older schema version is
upcast in memory only (``schema_readonly``). Large values stored as blobs
(``runtime.blobs``) are resolved for a single state (the detail a reviewer
decides on) and shown as ``{"$blob": sha, "size": n}`` placeholders in
history listings, so listing a thread never loads its documents;
``thread_blob_read`` fetches one on demand.

A checkpoint the graph cannot load (LangGraph builds a Pydantic state from it
to tell what runs next, and a stored value that fails the model's validation
raises; so does a graph that cannot be built) is still read: its values as
stored, with ``unreadable`` saying why and no next nodes or tasks, which only
the graph knows. The thread stays readable (every read answered a 500), and an
operator can fork it from an earlier checkpoint with corrected values, or cancel it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from runtime.blobs import MARKER, BlobSpillingSaver, blobs_lazy
from runtime.checkpointer import checkpointer_get
from runtime.jsonable import to_jsonable
from runtime.models import BlobRef, Thread
from runtime.registry import graph_get, graph_is_external, graph_is_registered
from runtime.retry import class_names, exception_chain, is_transient
from runtime.state_schema import field_message
from runtime.upcasters import schema_readonly

if TYPE_CHECKING:  # LangGraph is imported where a state is read: Django's start imports this module
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

log = logging.getLogger(__name__)


class StateUnreadable(Exception):
    """A write needs the graph to load a checkpoint it cannot (``CheckpointView.unreadable`` says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
    # Why the graph cannot load this checkpoint ("" when it can): ``values`` are then as stored, and ``next``
    # and ``tasks`` are unknown (empty).
    unreadable: str = ""


def _namespace_of(state: Any) -> str:
    """A subgraph task's namespace: LangGraph gives its config (or, with subgraphs, its snapshot's)."""
    from langgraph.types import StateSnapshot

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
    from runtime.as_saved import config_as_saved  # LangGraph's: loaded when a state is first read

    lazy = contextlib.nullcontext() if resolve_blobs else blobs_lazy()
    if not graph_is_registered(thread.graph):
        with lazy:
            item = checkpointer_get().get_tuple(_retired_config(thread, checkpoint_id))
        return _retired_view(item) if item is not None else None
    graph: Any = None
    try:
        graph = graph_get(thread.graph).compiled()
        with schema_readonly(), lazy:
            snapshot = graph.get_state(config_as_saved(graph, _config(thread, checkpoint_id)))
    except Exception as exc:
        if _storage_failure(exc):
            raise
        return _stored_view(thread, checkpoint_id, graph, exc, resolve_blobs=resolve_blobs)
    if not snapshot.created_at:
        return None
    return _view(snapshot)


def _storage_failure(exc: BaseException) -> bool:
    """The database failed, not the graph: no stored state would be read either (the API answers its 503)."""
    return is_transient(exc) or any(class_names(link) & _STORAGE_ERRORS for link in exception_chain(exc))


_STORAGE_ERRORS = {("django.db.utils", "DatabaseError"), ("psycopg", "Error"), ("sqlite3", "Error")}


def _unreadable_reason(exc: BaseException) -> str:
    """Why the graph cannot load a checkpoint, in words: a state model's refusal names each field (not the
    values, which may be sensitive); anything else is the exception's line, then each it was raised from.

    Not the last line of the formatted exception: LangGraph adds a note to it ("Before task with name
    'review' and path ..."), which replaced the error itself ("missing 1 required positional argument: 'q'")."""
    refusal = next((link for link in exception_chain(exc) if isinstance(link, ValidationError)), None)
    if refusal is not None:
        return _refusal_reason(refusal)
    # Causes only: what was being handled when it was raised is noise (LangGraph's "no running event loop" was
    # named as the cause of a missing field).
    said = "; caused by ".join(_one_line(link) for link in exception_chain(exc, context=False))
    return f"the graph cannot load this state: {said}"[:1000]


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, without the notes added to the exception."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _refusal_reason(exc: ValidationError) -> str:
    """A state model's refusal, each field named (not its value, which may be sensitive)."""
    said = []
    for err in exc.errors()[:5]:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".") or "state"
        if err.get("type") == "value_error":  # a validator's own words: "Value error, <its message>"
            said.append(f"{path}: {str(err.get('msg', '')).removeprefix('Value error, ')}")
        else:
            said.append(field_message(path, err))
    return "the graph cannot load this state: " + "; ".join(said)


def _stored_view(
    thread: Thread, checkpoint_id: str | None, graph: Any, exc: Exception, *, resolve_blobs: bool
) -> CheckpointView | None:
    """The checkpoint's values as stored, read from the saver alone, for a checkpoint the graph cannot load."""
    reason = _unreadable_reason(exc)
    log.warning("thread %s (graph %s): %s", thread.id, thread.graph, reason)
    lazy = contextlib.nullcontext() if resolve_blobs else blobs_lazy()
    with schema_readonly(), lazy:
        item = _saver_of(graph).get_tuple(_retired_config(thread, checkpoint_id))
    return dataclasses.replace(_retired_view(item), unreadable=reason) if item is not None else None


def _saver_of(graph: Any) -> BaseCheckpointSaver[Any]:
    """The graph's own saver (it upcasts an older checkpoint, in memory under ``schema_readonly``), or the
    process's for a graph that could not be built."""
    from langgraph.checkpoint.base import BaseCheckpointSaver

    saver = getattr(graph, "checkpointer", None)
    return saver if isinstance(saver, BaseCheckpointSaver) else checkpointer_get()


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
    from runtime.as_saved import config_as_saved  # LangGraph's: loaded when a state is first read

    lazy = contextlib.nullcontext() if resolve_blobs else blobs_lazy()
    if not graph_is_registered(thread.graph):
        before_cfg = _retired_config(thread, before) if before else None
        with lazy:
            items = checkpointer_get().list(_retired_config(thread), limit=limit, before=before_cfg)
            return _with_nodes_that_ran([_retired_view(item) for item in items])
    before_cfg = _config(thread, before) if before else None
    with schema_readonly(), lazy:
        if before_cfg is not None and checkpointer_get().get_tuple(before_cfg) is None:
            return []
    graph: Any = None
    try:
        graph = graph_get(thread.graph).compiled()
        with schema_readonly(), lazy:
            config = config_as_saved(graph, _config(thread, checkpoint_id))
            views = [_view(s) for s in graph.get_state_history(config, limit=limit, before=before_cfg)]
    except Exception as exc:
        if _storage_failure(exc):
            raise
        views = _history_stored(
            thread, graph, exc, limit=limit, before=before, checkpoint_id=checkpoint_id, resolve_blobs=resolve_blobs
        )
    return _with_nodes_that_ran(views)


def _history_stored(
    thread: Thread,
    graph: Any,
    exc: Exception,
    *,
    limit: int,
    before: str | None,
    checkpoint_id: str | None,
    resolve_blobs: bool,
) -> list[CheckpointView]:
    """The history of a thread with a checkpoint the graph cannot load (``exc``: why the listing failed):
    each checkpoint the graph loads as it does, the others as stored (``_stored_view``)."""
    before_cfg = _retired_config(thread, before) if before else None
    lazy = contextlib.nullcontext() if resolve_blobs else blobs_lazy()
    with schema_readonly(), lazy:
        items = list(_saver_of(graph).list(_retired_config(thread, checkpoint_id), limit=limit, before=before_cfg))
    if graph is None:  # the graph cannot be built: no checkpoint loads
        reason = _unreadable_reason(exc)
        log.warning("thread %s (graph %s): %s", thread.id, thread.graph, reason)
        return [dataclasses.replace(_retired_view(item), unreadable=reason) for item in items]
    ids = [str(item.config["configurable"]["checkpoint_id"]) for item in items]
    views = [thread_state_read(thread, one, resolve_blobs=resolve_blobs) for one in ids]
    return [v for v in views if v is not None]


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
    from langgraph.types import StateSnapshot

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
    try:
        graph = graph_get(thread.graph).compiled()
        with schema_readonly():
            snapshot = graph.get_state(_config(thread, checkpoint_id), subgraphs=True)
    except Exception as exc:
        if _storage_failure(exc):
            raise
        return []  # the graph cannot load the checkpoint: nor tell its tasks (its state says why: unreadable)
    return _subgraphs_of(snapshot) if snapshot.created_at else []
