"""Time travel: fork a thread at a past checkpoint, or replay from one, as a new branch.

LangGraph does the branching itself: ``update_state`` with a config naming a
past ``checkpoint_id`` writes a new checkpoint whose parent is that one, and
streaming ``None`` from a past ``checkpoint_id`` re-executes the steps after
it. Either way the new checkpoints become the thread's latest, so the thread
continues on the new branch; the old checkpoints, the decisions taken on them
and the effects they caused stay as they were.

What Gatehouse adds:

- a ``Branch`` row (who, why, from which checkpoint, on which parent branch);
- the branch id in every run's config (``gatehouse_branch_id``): LangGraph
  copies it into the metadata of each checkpoint the run writes, which tells
  which branch a checkpoint belongs to, and ``runtime.effects`` scopes
  idempotency keys with it, so a forked payment is a new effect while a
  crash-retry on one branch still pays once;
- execution stays on the worker: a replay, or a fork that continues, is a
  queued ``RunKind.REPLAY`` run. The fork's ``update_state`` itself runs no
  node (it applies the update through the channels' reducers only), as the
  existing ``/lg/`` ``update_state`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from runtime.blobs import blobs_lazy
from runtime.checkpointer import checkpointer_get
from runtime.jsonable import to_jsonable
from runtime.models import Branch, BranchKind, Run, RunKind, Thread, ThreadStatus
from runtime.registry import graph_get
from runtime.runs import run_enqueue
from runtime.threads import thread_lock_idle

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.pregel import Pregel
    from langgraph.types import StateSnapshot

BRANCH_KEY = "gatehouse_branch_id"  # in a run's configurable, hence in its checkpoints' metadata
REPLAY_FROM = "replay_from"  # in a replay run's command: the checkpoint it re-executes from


class CheckpointNotFound(LookupError):
    def __init__(self, thread: Thread, checkpoint_id: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id} not found on thread {thread.id}")
        self.checkpoint_id = checkpoint_id


class UnknownNode(ValueError):
    def __init__(self, node: str, nodes: list[str]) -> None:
        super().__init__(f"unknown node {node!r} (the graph has: {', '.join(nodes)})")


@dataclass(frozen=True)
class ReplayFrom:
    """The executor's input for a replay that has not written a checkpoint on its branch yet."""

    checkpoint_id: str


def branch_current_id(*, thread_id: Any) -> str | None:
    """The branch the thread's latest checkpoint is on: every fork or replay moves the thread to its branch."""
    branch_id = Branch.objects.filter(thread_id=thread_id).order_by("-created_at").values_list("id", flat=True).first()
    return None if branch_id is None else str(branch_id)


def branches_before(*, thread: Any, at: Any) -> QuerySet[Branch]:
    """The thread's branches made by ``at``, newest first: the first is the line something opened at ``at``
    is on (every fork or replay moves the thread to its branch; nothing of the line before it opens after).

    ``thread`` and ``at`` may be ``OuterRef``s: the inbox reads each row's branch inside its own query.
    """
    return Branch.objects.filter(thread_id=thread, created_at__lte=at).order_by("-created_at")


def branch_at(*, thread_id: Any, at: Any) -> Branch | None:
    """The branch the thread was on at ``at`` (None: its first line), with who made it."""
    return branches_before(thread=thread_id, at=at).select_related("created_by").first()


def scoped_effect_key(key: str, configurable: dict[str, Any]) -> str:
    """An effect's ledger (and provider) key on a branch: the same key plus the branch.

    The thread's first line keeps its keys unchanged, so effects recorded before
    a fork keep answering their retries.
    """
    branch = configurable.get(BRANCH_KEY)
    return f"{key}@{branch}" if branch else key


def effect_key_branch(key: str) -> str | None:
    """The branch an effect's key was scoped to (``scoped_effect_key``); None for the thread's first line."""
    _, at, branch = key.rpartition("@")
    return branch if at else None


def _config(thread: Thread, checkpoint_id: str | None = None, branch: Branch | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": str(thread.id), "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    if branch is not None:
        configurable[BRANCH_KEY] = str(branch.id)
    return {"configurable": configurable}


def checkpoint_snapshot(*, thread: Thread, checkpoint_id: str) -> StateSnapshot:
    """The thread's checkpoint ``checkpoint_id`` (root namespace), or ``CheckpointNotFound``."""
    graph = graph_get(thread.graph).compiled()
    snapshot = graph.get_state(_config(thread, checkpoint_id))
    found = snapshot.config.get("configurable", {}).get("checkpoint_id") if snapshot.created_at else None
    if found != checkpoint_id:
        raise CheckpointNotFound(thread, checkpoint_id)
    return snapshot


def checkpoint_saved(*, thread: Thread, checkpoint_id: str | None = None) -> CheckpointTuple:
    """The thread's checkpoint ``checkpoint_id`` (root namespace; None: its latest) as the saver keeps it, or
    ``CheckpointNotFound``: when it was written and its metadata (its branch) without the graph loading it.

    ``checkpoint_snapshot`` builds the graph's state to tell what runs next, which fails on a state the graph
    cannot load (a dataclass state missing a required field raises a ``TypeError``): a page asking when a
    checkpoint was written answered a 500 for it. Large values stay blob placeholders (only ts and metadata
    are read)."""
    with blobs_lazy():
        saved = checkpointer_get().get_tuple(_config(thread, checkpoint_id))
    found = saved.config["configurable"].get("checkpoint_id") if saved is not None else None
    if saved is None or (checkpoint_id and found != checkpoint_id):
        raise CheckpointNotFound(thread, checkpoint_id or "(latest)")
    return saved


def _parent_branch(thread: Thread, snapshot: StateSnapshot) -> Branch | None:
    branch_id = (snapshot.metadata or {}).get(BRANCH_KEY)
    return Branch.objects.filter(pk=str(branch_id), thread=thread).first() if branch_id else None


def branch_fork(
    *,
    thread: Thread,
    checkpoint_id: str,
    values: dict[str, Any] | None,
    as_node: str | None,
    reason: str,
    created_by: User | None,
    run: bool,
) -> Branch:
    """Write ``values`` at the past checkpoint as a new branch; with ``run``, queue a run that continues it.

    Call inside ``transaction.atomic()`` (the branch, the thread snapshot and the
    run commit together). The checkpoint itself is written by the checkpointer
    on its own connection, last, after every check passed.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("branch_fork must be called inside transaction.atomic()")
    thread = thread_lock_idle(thread)
    snapshot = checkpoint_snapshot(thread=thread, checkpoint_id=checkpoint_id)
    entry = graph_get(thread.graph)
    if as_node is not None and as_node not in entry.builder.nodes:
        raise UnknownNode(as_node, list(entry.builder.nodes))
    branch = Branch.objects.create(
        thread=thread,
        parent=_parent_branch(thread, snapshot),
        kind=BranchKind.FORK,
        from_checkpoint_id=checkpoint_id,
        update_keys=sorted(values or {}),
        as_node=as_node or "",
        reason=reason,
        created_by=created_by,
    )
    config = entry.compiled().update_state(_config(thread, checkpoint_id, branch), values, as_node=as_node)
    head = str(config["configurable"]["checkpoint_id"])
    branch.head_checkpoint_id = head
    state = entry.compiled().get_state(_config(thread, head))
    Thread.objects.filter(pk=thread.pk).update(
        status=ThreadStatus.IDLE,
        checkpoint_id=head,
        values=to_jsonable(state.values or {}),
        error="",
        updated_at=timezone.now(),
    )
    if run:
        branch.run = run_enqueue(
            thread=thread, kind=RunKind.REPLAY, command={"branch_id": str(branch.id)}, created_by=created_by
        )
    branch.save(update_fields=["head_checkpoint_id", "run"])
    return branch


def branch_replay(*, thread: Thread, checkpoint_id: str, reason: str, created_by: User | None) -> Branch:
    """Queue a run that re-executes the thread from the past checkpoint, on a new branch."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("branch_replay must be called inside transaction.atomic()")
    thread = thread_lock_idle(thread)
    snapshot = checkpoint_snapshot(thread=thread, checkpoint_id=checkpoint_id)
    branch = Branch.objects.create(
        thread=thread,
        parent=_parent_branch(thread, snapshot),
        kind=BranchKind.REPLAY,
        from_checkpoint_id=checkpoint_id,
        reason=reason,
        created_by=created_by,
    )
    branch.run = run_enqueue(
        thread=thread,
        kind=RunKind.REPLAY,
        command={"branch_id": str(branch.id), REPLAY_FROM: checkpoint_id},
        created_by=created_by,
    )
    branch.save(update_fields=["run"])
    return branch


def replay_input(*, run: Run, graph: Pregel[Any, Any, Any, Any], config: RunnableConfig) -> ReplayFrom | None:
    """Where a replay run starts: its checkpoint, unless an earlier attempt already wrote on its branch.

    A redelivered replay must not re-execute from the source checkpoint again
    (that would start a second, unrecorded line); it continues from the latest
    checkpoint, which the first attempt wrote on this branch.
    """
    command = run.command or {}
    source = str(command.get(REPLAY_FROM, ""))
    if run.attempts > 1:
        latest = graph.get_state(config)
        if (latest.metadata or {}).get(BRANCH_KEY) == command.get("branch_id"):
            return None
    return ReplayFrom(source)


def replay_head_record(*, run: Run, checkpoint_id: str) -> None:
    """The replay's first checkpoint on its branch, for the branch tree (first writer wins)."""
    branch_id = (run.command or {}).get("branch_id")
    if branch_id and checkpoint_id:
        Branch.objects.filter(pk=branch_id, head_checkpoint_id="").update(head_checkpoint_id=checkpoint_id)


def branches_of(*, thread: Thread) -> list[Branch]:
    return list(thread.branches.select_related("created_by", "run").order_by("created_at"))


def thread_copy(*, thread: Thread, created_by: User | None) -> Thread:
    """A new thread with a copy of every checkpoint of ``thread`` (LangGraph Server's ``threads.copy``).

    The checkpoints keep their ids, parents, metadata and pending writes (subgraph
    namespaces included), written through the checkpointer's own ``put``/``put_writes``
    (the PostgreSQL and SQLite savers have no ``copy_thread``). Branch rows are not
    copied: the copy's history is one plain line of LangGraph checkpoints.
    """
    copy = Thread.objects.create(
        graph=thread.graph,
        metadata=dict(thread.metadata or {}),
        values=thread.values,
        checkpoint_id=thread.checkpoint_id,
        # Approval tasks are not copied: a copy of a paused thread is idle, and a run
        # continuing it pauses at the same gate again, opening the copy's own task.
        status=ThreadStatus.IDLE if thread.status in (ThreadStatus.BUSY, ThreadStatus.INTERRUPTED) else thread.status,
        error=thread.error,
        created_by=created_by,
    )
    if not thread.graph or not thread.checkpoint_id:
        return copy
    saver = checkpointer_get()
    source: RunnableConfig = {"configurable": {"thread_id": str(thread.id)}}
    for saved in reversed(list(saver.list(source))):  # oldest first: a parent is written before its children
        ns = saved.config["configurable"].get("checkpoint_ns", "")
        parent = (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        target: RunnableConfig = {"configurable": {"thread_id": str(copy.id), "checkpoint_ns": ns}}
        if parent:
            target["configurable"]["checkpoint_id"] = parent
        written = saver.put(target, saved.checkpoint, saved.metadata, dict(saved.checkpoint["channel_versions"]))
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in saved.pending_writes or []:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            saver.put_writes(written, writes, task_id)
    return copy
