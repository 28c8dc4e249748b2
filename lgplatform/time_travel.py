"""Time travel and subgraph state on ``/lg/``, as LangGraph Server serves them.

- ``threads.copy(thread_id)`` → ``POST /threads/{id}/copy`` (this router);
- ``threads.update_state(thread_id, values, checkpoint_id=...)`` forks the thread at
  that checkpoint (the existing ``POST /threads/{id}/state`` handler calls ``state_fork``);
- ``runs.create(thread_id, assistant, checkpoint_id=...)`` (or ``checkpoint=``) with
  neither input nor command replays from that checkpoint (``run_replay``);
- ``threads.get_state(thread_id, subgraphs=True)`` nests each in-flight subgraph's
  state in ``tasks[].state`` (``lgplatform.services.thread_state``, read through
  ``approvals.time_travel.subgraph_states_for``).

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
from approvals.inputs import CHECKPOINT_ID_PATTERN, AnyUuid
from approvals.permissions import token_needs
from lgplatform import services as platform
from lgplatform.responses import ThreadOut, ThreadUpdateStateOut
from lgplatform.schemas import RunCreateIn, ThreadStateUpdateIn
from runtime.models import Run

router = Router(tags=["threads"])

REASON_HEADER = "X-Gatehouse-Reason"


def _reason(request: HttpRequest, metadata: dict[str, Any] | None = None) -> str | None:
    from_metadata = platform.metadata_reason(metadata)
    return request.headers.get(REASON_HEADER) or from_metadata


def checkpoint_wanted(checkpoint: dict[str, Any] | None, checkpoint_id: str | None) -> str | None:
    """The checkpoint id a request names (``checkpoint_id`` or ``checkpoint.checkpoint_id``), checked.

    Both, naming different checkpoints, is a 422 naming ``checkpoint_id``: the second was silently ignored
    (and ``checkpoint: {}`` beside a ``checkpoint_id`` ignored the id: no fork, no replay)."""
    if checkpoint is not None and checkpoint.get("checkpoint_ns"):
        raise InvalidInput("only root checkpoints can be forked or replayed", field="checkpoint.checkpoint_ns")
    inside = checkpoint.get("checkpoint_id") if checkpoint is not None else None
    if inside is not None and checkpoint_id is not None and inside != checkpoint_id:
        raise InvalidInput(
            f"names checkpoint {checkpoint_id!r} and checkpoint.checkpoint_id {inside!r}: send one of them",
            field="checkpoint_id",
        )
    if inside is not None:
        wanted, field = inside, "checkpoint.checkpoint_id"
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


@router.post("/threads/{thread_id}/copy", response=ThreadOut)
@token_needs("runtime.time_travel")
def thread_copy(request: HttpRequest, thread_id: AnyUuid) -> ThreadOut:
    copy = time_travel.thread_copy_make(
        actor=request.auth,  # type: ignore[attr-defined]
        thread_id=thread_id,
        reason=_reason(request),
    )
    return platform.thread_out(request.auth, copy)  # type: ignore[attr-defined]
