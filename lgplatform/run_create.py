"""A run made from a ``/lg/`` run body (``RunCreateIn``): the checks and records every way of making one
shares — ``runs.create``, ``wait``, ``stream`` and ``batch`` (lgplatform/api.py) and each firing of a cron
(lgplatform/crons.py), which checks its body with the same ``run_body_check`` when it is created."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db import transaction

from approvals.errors import InvalidInput
from approvals.payloads import NOT_GIVEN
from lgplatform import services as platform
from lgplatform import stream as platform_stream
from lgplatform import time_travel as platform_time_travel
from lgplatform.schemas import RunCreateIn
from runtime.models import Run
from runtime.runs import run_options_record

UNSUPPORTED = {
    "interrupt_before": "static breakpoints are part of the registered graph",
    "interrupt_after": "static breakpoints are part of the registered graph",
    "webhook": "use Gatehouse's outbound webhooks",
    "after_seconds": "delayed runs are not supported",
    "context": "runs take no context; the graph is configured by its registration",
}

# A run from a past checkpoint (time travel), made by the caller: it needs the request (lgplatform/api.py).
Replay = Callable[[str], Run]


def run_body_check(body: RunCreateIn) -> None:
    """Refuse, naming the field, what no run made here supports."""
    for name, why in UNSUPPORTED.items():
        if getattr(body, name):
            raise InvalidInput(f"not supported: {why}", field=name)
    if body.config and any(body.config.get(k) for k in ("configurable",)):
        raise InvalidInput("not supported: runs take no configurable values", field="config.configurable")
    if body.multitask_strategy == "enqueue":
        raise InvalidInput(
            "multitask_strategy 'enqueue' is not supported: a thread runs one run at a time; use 'reject', "
            "'interrupt' or 'rollback'",
            field="multitask_strategy",
        )
    if body.command is not None and body.command.goto is not None:
        raise InvalidInput("command.goto is not supported; the graph routes itself", field="command.goto")


def published_modes(body: RunCreateIn) -> list[str] | None:
    """The modes a background run publishes, for GET .../runs/{run_id}/stream to join (None: none named)."""
    return platform_stream.stream_modes_parse(body.stream_mode) if body.stream_mode else None


@transaction.atomic  # the run and the stream it is to publish commit together: its worker reads both
def run_create_recorded(
    actor: User, thread_id: UUID, body: RunCreateIn, *, stream: list[str] | None = None, replay: Replay | None = None
) -> Run:
    """Start, resume, retry, continue or replay a thread as ``actor``, as ``body`` says, with the run's options
    (limits, config, metadata) and the modes it publishes recorded with it."""
    # Read before anything is written: a refused limit leaves no run (and cancels no active one).
    platform.run_config_check(body.config)
    graph = platform.assistant_graph(actor, body.assistant_id)
    recursion_limit = platform.recursion_limit_read(body.config, graph)
    metadata = platform.run_metadata_read(body.config, body.metadata)
    run = _run_made(actor, thread_id, body, metadata, replay)
    # Every way a run is made here hands it back with its thread read (no query): its metadata is made from it.
    run_options_record(
        run=run,
        multitask_strategy=body.multitask_strategy or "reject",
        recursion_limit=recursion_limit,
        config=platform.run_config_read(body.config),
        metadata=platform.run_metadata_for(run.thread, graph, metadata),
    )
    if stream:
        platform_stream.run_stream_record(run=run, modes=stream, subgraphs=body.stream_subgraphs)
    return run


def _run_made(actor: User, thread_id: UUID, body: RunCreateIn, metadata: dict[str, Any], replay: Replay | None) -> Run:
    replay_from = platform_time_travel.checkpoint_wanted(body.checkpoint, body.checkpoint_id)
    run_body_check(body)
    if replay_from:  # time travel: a run from a past checkpoint replays it on a new branch
        if replay is None:
            raise InvalidInput("a run from a checkpoint is not supported here", field="checkpoint_id")
        return replay(replay_from)
    command = body.command
    resume = command.resume if command is not None and "resume" in command.model_fields_set else NOT_GIVEN
    return platform.run_create(
        actor=actor,
        thread_id=thread_id,
        assistant_id=body.assistant_id,
        input=body.input,
        resume=resume,
        update=command.update if command is not None else None,
        metadata=body.metadata,
        multitask_strategy=body.multitask_strategy,
        if_not_exists=body.if_not_exists,
        thread_metadata=metadata,
    )
