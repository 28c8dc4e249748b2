"""Time travel and subgraph state on ``/lg/``, as LangGraph Server serves them.

- ``threads.copy(thread_id)`` → ``POST /threads/{id}/copy`` (this router);
- ``threads.update_state(thread_id, values, checkpoint_id=...)`` forks the thread at
  that checkpoint (the existing ``POST /threads/{id}/state`` handler calls ``state_fork``);
- ``runs.create(thread_id, assistant, checkpoint_id=...)`` (or ``checkpoint=``) with
  neither input nor command replays from that checkpoint (``run_replay``);
- ``threads.get_state(thread_id, subgraphs=True)`` nests each in-flight subgraph's
  state in ``tasks[].state`` (``state_with_subgraphs``).

Gatehouse requires a reason for time travel, which the SDK's methods have no
argument for: send it as the ``X-Gatehouse-Reason`` header (every SDK method
takes ``headers=``), or for runs as ``metadata={"reason": ...}``.
"""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

from django.http import HttpRequest
from ninja import Router

from approvals import time_travel
from approvals.errors import Conflict, InvalidInput
from approvals.inputs import CHECKPOINT_ID_PATTERN
from lgplatform import services as platform
from lgplatform.responses import InterruptOut, ThreadOut, ThreadStateOut, ThreadUpdateStateOut
from lgplatform.schemas import RunCreateIn, ThreadStateUpdateIn
from runtime.models import Run
from runtime.state import SubgraphView

router = Router(tags=["threads"])

REASON_HEADER = "X-Gatehouse-Reason"


def _reason(request: HttpRequest, metadata: dict[str, Any] | None = None) -> str | None:
    from_metadata = (metadata or {}).get("reason")
    return request.headers.get(REASON_HEADER) or (from_metadata if isinstance(from_metadata, str) else None)


def checkpoint_wanted(checkpoint: dict[str, Any] | None, checkpoint_id: str | None) -> str | None:
    """The checkpoint id a request names (``checkpoint_id`` or ``checkpoint.checkpoint_id``), checked."""
    if checkpoint is not None:
        if checkpoint.get("checkpoint_ns"):
            raise InvalidInput("only root checkpoints can be forked or replayed", field="checkpoint.checkpoint_ns")
        wanted, field = checkpoint.get("checkpoint_id"), "checkpoint.checkpoint_id"
    else:
        wanted, field = checkpoint_id, "checkpoint_id"
    if wanted is None:
        return None
    if not isinstance(wanted, str) or not re.fullmatch(CHECKPOINT_ID_PATTERN, wanted):
        raise InvalidInput(f"{field}: {wanted!r} is not a checkpoint id", field=field)
    return wanted


def state_fork(
    request: HttpRequest, thread_id: UUID, body: ThreadStateUpdateIn, checkpoint_id: str
) -> ThreadUpdateStateOut:
    """``update_state`` at a past checkpoint: a new branch whose head is returned, as LangGraph Server does."""
    branch = time_travel.thread_fork(
        actor=request.auth,  # type: ignore[attr-defined]
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        values=body.values,
        as_node=body.as_node,
        reason=_reason(request),
    )
    return ThreadUpdateStateOut(checkpoint=platform.checkpoint_ref(thread_id, branch.head_checkpoint_id))


def run_replay(request: HttpRequest, thread_id: UUID, body: RunCreateIn, checkpoint_id: str) -> Run:
    """A run from a past checkpoint: a replay on a new branch (input or a command there is not supported)."""
    if body.input is not None or body.command is not None:
        field = "input" if body.input is not None else "command"
        raise InvalidInput(
            "a run from a checkpoint replays it; to change the state there, "
            "update_state(..., checkpoint_id=...) first, then create a run",
            field=field,
        )
    graph = platform.assistant_graph(request.auth, body.assistant_id)  # type: ignore[attr-defined]
    thread = platform.thread_get_for(request.auth, thread_id)  # type: ignore[attr-defined]
    if thread.graph and thread.graph != graph:
        raise Conflict(f"thread {thread.id} runs graph {thread.graph!r}, not {graph!r}", field="assistant_id")
    branch = time_travel.thread_replay(
        actor=request.auth,  # type: ignore[attr-defined]
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        reason=_reason(request, body.metadata),
    )
    assert branch.run is not None  # noqa: S101 - a replay always queues its run
    return branch.run


def state_with_subgraphs(request: HttpRequest, state: ThreadStateOut, thread_id: UUID) -> ThreadStateOut:
    """Nest each in-flight subgraph's (redacted) state in ``tasks[].state``, by task name."""
    checkpoint_id = state.checkpoint.checkpoint_id
    if not checkpoint_id:
        return state
    user = request.auth  # type: ignore[attr-defined]
    subgraphs = time_travel.subgraph_states_for(user, thread_id, checkpoint_id)
    by_id = {s.task_id: s for s in subgraphs}
    pending = platform.pending_interrupts(user, platform.thread_get_for(user, thread_id), checkpoint_id)
    for task in state.tasks:
        sub = by_id.get(task.id)
        if sub is not None:  # the subgraph's state in place of where its checkpoints are, as the server does
            task.state = _subgraph_out(thread_id, sub, pending)
            task.checkpoint = None
    return state


def _enclosing(sub: SubgraphView) -> dict[str, str]:
    return {ns: checkpoint for ns, checkpoint in sub.checkpoint_map.items() if ns != sub.checkpoint_ns}


def _subgraph_out(
    thread_id: UUID, sub: SubgraphView, pending: dict[tuple[str, str], list[InterruptOut]]
) -> ThreadStateOut:
    """A subgraph's state, its tasks under LangGraph's ids, each with the interrupts raised in it."""
    view = sub.view
    children = {c.task_id: c for c in sub.children}
    tasks = []
    for step_task in view.tasks:
        interrupts = platform.interrupts_held(
            pending, step_task.checkpoint_ns, step_task.name, inside=sub.checkpoint_ns
        )
        task = platform.task_out(step_task.id, step_task.name, interrupts, result=step_task.result)
        child = children.get(step_task.id)
        task.state = _subgraph_out(thread_id, child, pending) if child is not None else None
        tasks.append(task)
    return ThreadStateOut(
        values=view.values,
        next=view.next,
        tasks=tasks,
        checkpoint=platform.checkpoint_ref(thread_id, view.checkpoint_id, sub.checkpoint_ns, sub.checkpoint_map),
        metadata={
            "step": view.step,
            "source": view.source,
            "writes": view.writes,
            "thread_id": str(thread_id),
            "checkpoint_ns": sub.checkpoint_ns,
            # as LangGraph keeps it in a subgraph checkpoint's metadata: the enclosing graphs' checkpoints
            **({"checkpoint_map": parents} if (parents := _enclosing(sub)) else {}),
        },
        created_at=view.created_at,
        parent_checkpoint=platform.checkpoint_ref(
            thread_id, view.parent_id, sub.checkpoint_ns, sub.parent_checkpoint_map
        )
        if view.parent_id
        else None,
        interrupts=[i for t in tasks for i in t.interrupts],
    )


@router.post("/threads/{uuid:thread_id}/copy", response=ThreadOut)
def thread_copy(request: HttpRequest, thread_id: UUID) -> ThreadOut:
    copy = time_travel.thread_copy_make(
        actor=request.auth,  # type: ignore[attr-defined]
        thread_id=thread_id,
        reason=_reason(request),
    )
    return platform.thread_out(request.auth, copy)  # type: ignore[attr-defined]
