"""Writes of thread rows between runs: create, bind to a graph, write state, cancel.

A run's own writes (claim, finish, fail) are ``runtime.runs``'; these are the
ones a decision or an API request makes while no run holds the thread. Each
runs in the caller's transaction, so the caller's audit row commits with the
change, and every adapter changes a thread through here instead of writing
the row itself.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from runtime.models import ACTIVE_RUN_STATUSES, Run, RunStatus, Thread, ThreadStatus
from runtime.notify import thread_notify
from runtime.registry import graph_get
from runtime.runs import ThreadBusy
from runtime.state import StateUnreadable, thread_state_read


def _atomic_required(service: str) -> None:
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError(f"{service} must be called inside transaction.atomic()")


def thread_create(
    *, graph: str, metadata: dict[str, Any], created_by: User | None, thread_id: uuid.UUID | None = None
) -> Thread:
    """A new thread with no run yet. ``graph`` may be empty: the first run binds it (``thread_graph_bind``)."""
    return Thread.objects.create(id=thread_id or uuid.uuid4(), graph=graph, metadata=metadata, created_by=created_by)


def thread_lock_idle(thread: Thread) -> Thread:
    """The thread, row-locked; ``ThreadBusy`` while a run is queued or running (its worker writes the state)."""
    _atomic_required("thread_lock_idle")
    locked = Thread.objects.select_for_update().get(pk=thread.pk)
    if locked.status == ThreadStatus.BUSY or Run.objects.filter(thread=locked, status__in=ACTIVE_RUN_STATUSES).exists():
        raise ThreadBusy(locked)
    return locked


def thread_stopped_midway(thread: Thread, last_run: Run | None = None) -> bool:
    """Whether an operator's cancel (interrupt) stopped ``thread`` with work left: it is idle, its last run
    was cancelled, and its state has a next step. A retry continues it from there; without one the thread
    sat idle with its payment made and its state short of it, and only /lg/ could move it on.

    ``last_run``: the thread's latest run when the caller has it loaded."""
    if thread.status != ThreadStatus.IDLE:
        return False
    last = last_run if last_run is not None else thread.runs.order_by("-created_at").first()
    if last is None or last.status != RunStatus.CANCELLED:
        return False
    view = thread_state_read(thread, resolve_blobs=False)
    return view is not None and bool(view.next)


def thread_graph_bind(*, thread: Thread, graph: str) -> None:
    """Bind a thread created without a graph to ``graph``; a thread already bound keeps its graph."""
    _atomic_required("thread_graph_bind")
    if thread.graph:
        return
    if Thread.objects.filter(pk=thread.pk, graph="").update(graph=graph):
        thread.graph = graph


def thread_state_write(*, thread: Thread, values: dict[str, Any] | None, as_node: str | None) -> str:
    """LangGraph's ``update_state`` on the thread's latest checkpoint; returns the new checkpoint id.

    Under the thread's row lock and only while no run is active (``ThreadBusy``):
    a worker writing the same thread's checkpoints would race it. The update runs
    no node (the channels' reducers apply it). The thread row's ``values``, the
    snapshot listings read, take the new state unmasked (readers mask per reader).
    A thread between runs is idle while the new state leaves nodes to run (a run
    with no input continues it, as LangGraph's ``invoke(None)``), else completed.
    ``StateUnreadable`` if the graph cannot load the thread's latest checkpoint.
    """
    thread = thread_lock_idle(thread)
    # LangGraph applies an update by loading the state it updates: a checkpoint the graph cannot load fails
    # inside update_state (StateUnreadable names why, for the caller's 409).
    current = thread_state_read(thread, resolve_blobs=False)
    if current is not None and current.unreadable:
        raise StateUnreadable(current.unreadable)
    compiled = graph_get(thread.graph).compiled()
    config = compiled.update_state({"configurable": {"thread_id": str(thread.id)}}, values, as_node=as_node)
    checkpoint_id = str(config["configurable"]["checkpoint_id"])
    view = thread_state_read(thread)
    if thread.status in (ThreadStatus.IDLE, ThreadStatus.COMPLETED) and not (view and view.unreadable):
        thread.status = ThreadStatus.IDLE if view and view.next else ThreadStatus.COMPLETED
    Thread.objects.filter(pk=thread.pk).update(
        checkpoint_id=checkpoint_id,
        values=view.values if view else thread.values,
        status=thread.status,
        updated_at=timezone.now(),
    )
    thread_notify(thread.id)  # a thread's stream sends the update (lgplatform.thread_stream)
    return checkpoint_id


def thread_cancel(*, thread: Thread) -> None:
    """Mark the thread cancelled (nothing runs on it again) and wake whoever waits on it, on commit."""
    _atomic_required("thread_cancel")
    Thread.objects.filter(pk=thread.pk).update(status=ThreadStatus.CANCELLED, updated_at=timezone.now())
    thread.status = ThreadStatus.CANCELLED
    thread_notify(thread.id)
