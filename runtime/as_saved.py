"""A checkpoint as it was saved, without the state update a resume wrote onto it.

LangGraph stores a ``Command(update=...)`` (and the resume value) as pending writes of the checkpoint
the thread paused at, under the null task id, and applies them whenever that checkpoint is loaded.
Two readers must not see them: a state read of that checkpoint ("the state the signer saw",
``runtime.state``), and a replay from it, which re-runs the steps after the checkpoint as it was
saved, not after the edit a reviewer decided on it (the replay paused on the reviewer's 15000, not
the 18000 it had paused on).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER, NULL_TASK_ID
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple


def without_update(item: CheckpointTuple | None) -> CheckpointTuple | None:
    if item is None or not item.pending_writes:
        return item
    return item._replace(pending_writes=[w for w in item.pending_writes if w[0] != NULL_TASK_ID])


_replaying_from: contextvars.ContextVar[str | None] = contextvars.ContextVar("gatehouse_replay_from", default=None)


@contextlib.contextmanager
def replaying_from(checkpoint_id: str) -> Iterator[None]:
    """While a replay runs in this context, its source checkpoint loads as saved (``ReplaySourceAsSaved``)."""
    token = _replaying_from.set(checkpoint_id)
    try:
        yield
    finally:
        _replaying_from.reset(token)


class ReplaySourceAsSaved:
    """Mixin for the savers (first in the bases): a replay's source checkpoint loads without its update."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        item: CheckpointTuple | None = super().get_tuple(config)  # type: ignore[misc]
        source = _replaying_from.get()
        if source and item is not None and _checkpoint_id(item) == source:
            return without_update(item)
        return item


def _checkpoint_id(item: CheckpointTuple) -> Any:
    return item.config.get("configurable", {}).get("checkpoint_id")


class AsSaved(BaseCheckpointSaver[Any]):
    """A thread's checkpoints as they were saved, without the state update a resume wrote onto them.

    LangGraph stores a ``Command(update=...)`` as pending writes of the checkpoint the thread paused at,
    and ``get_state`` applies them: the checkpoint a reviewer decided on then showed their own edit, as
    if it had been the state they saw ("the state the signer saw" said 15000 where they saw 18000). A
    read goes through this view (``runtime.state``); runs use the saver itself (a replay's source loads as
    saved there: ``ReplaySourceAsSaved``).
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


def config_as_saved(graph: Any, config: RunnableConfig) -> RunnableConfig:
    """``config`` reading ``graph``'s checkpoints through ``AsSaved`` (LangGraph takes a saver from the config)."""
    saver = graph.checkpointer
    if not isinstance(saver, BaseCheckpointSaver):
        return config
    return {**config, "configurable": {**config["configurable"], CONFIG_KEY_CHECKPOINTER: AsSaved(saver)}}
