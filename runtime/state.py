"""Reading thread state from the checkpointer.

These functions do no access control: call them only through
``approvals.gateway``, which authorises and audits every read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

from runtime.jsonable import to_jsonable
from runtime.models import Thread
from runtime.registry import graph_get


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
    )


def thread_state_read(thread: Thread, checkpoint_id: str | None = None) -> CheckpointView | None:
    if not thread.graph:  # created through /lg/ and not bound to a graph by a first run yet
        return None
    graph = graph_get(thread.graph).compiled()
    snapshot = graph.get_state(_config(thread, checkpoint_id))
    if not snapshot.created_at:
        return None
    return _view(snapshot)


def thread_history_read(thread: Thread, *, limit: int = 100, before: str | None = None) -> list[CheckpointView]:
    if not thread.graph:
        return []
    graph = graph_get(thread.graph).compiled()
    before_cfg = _config(thread, before) if before else None
    return [_view(s) for s in graph.get_state_history(_config(thread), limit=limit, before=before_cfg)]
