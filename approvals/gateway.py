"""The only way into the checkpoint store: authorise, then read.

Views, the API, websockets and exports read thread state through these
functions, never through ``runtime.state`` or a graph directly.
"""

from __future__ import annotations

from typing import Any

from approvals import permissions
from approvals.errors import NotFound
from approvals.models import ApprovalTask
from runtime.state import CheckpointView, thread_history_read, thread_state_read


def state_for(user: permissions.Principal, thread_id: Any, checkpoint_id: str | None = None) -> CheckpointView | None:
    thread = permissions.thread_get_for(user, thread_id)
    view = thread_state_read(thread, checkpoint_id)
    if checkpoint_id and view is None:
        raise NotFound(f"checkpoint {checkpoint_id} not found", field="checkpoint_id")
    return view


def history_for(
    user: permissions.Principal, thread_id: Any, *, limit: int = 50, before: str | None = None
) -> list[CheckpointView]:
    thread = permissions.thread_get_for(user, thread_id)
    return thread_history_read(thread, limit=limit, before=before)


def task_state_for(user: permissions.Principal, task: ApprovalTask) -> CheckpointView | None:
    """The state the task's reviewer decides on: the checkpoint where it paused."""
    permissions.task_get_for(user, task.pk)
    return thread_state_read(task.thread, task.checkpoint_id)
