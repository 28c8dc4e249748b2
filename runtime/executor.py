"""Execute one run: claim it, stream the graph with our checkpointer, record the outcome.

A run may execute more than once (a worker killed mid-run is replaced after
its lease lapses). The checkpointer tells how far the previous attempt got,
so a redelivered run continues from the last checkpoint instead of applying
its input twice.

A resume carries a signed command (``Command(resume=..., update=...)``). What
ran must be what was signed: the command is checked to be storable before it
runs, and a redelivered or retried resume re-applies whatever part of it the
checkpoints do not hold yet, or fails; it never continues without it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import traceback
from dataclasses import dataclass
from typing import Any, cast

from django.db import DatabaseError, connection
from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import NS_END, NS_SEP
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphRecursionError, UnknownInterruptError
from langgraph.pregel import Pregel
from langgraph.types import Command, StateSnapshot, StreamMode, _interrupt_id

from runtime.as_saved import replaying_from
from runtime.blobs import blobs_lazy
from runtime.branches import BRANCH_KEY, REPLAY_FROM, ReplayFrom, branch_current_id, replay_head_record, replay_input
from runtime.cancel import run_cancel_acknowledge, run_cancel_check
from runtime.checkpointer import checkpointer_get
from runtime.controls import RuntimeControls
from runtime.effects import canonical_json
from runtime.fencing import FENCE_KEY
from runtime.heartbeat import Heartbeat
from runtime.jsonable import to_jsonable
from runtime.models import Run, RunKind, RunStatus
from runtime.registry import GraphRegistryError, UnknownGraph, graph_get
from runtime.retry import is_transient, stale_code
from runtime.run_store import store_for_run
from runtime.runs import (
    RESERVED_METADATA_PREFIX,
    LeaseLost,
    PendingInterrupt,
    RunOutcome,
    SignedCommandRefused,
    lease_lost_record,
    run_claim,
    run_fail,
    run_finish,
    run_release,
    runs_hand_back,
)
from runtime.storable import NotStorable, value_storable_check
from runtime.store import StoreConfigError
from runtime.stream_tap import stream_tap

log = logging.getLogger(__name__)

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
_SKIP = object()  # the previous attempt already got past this run's input
# LangGraph's (private) names for the input step's task and the answers channel;
# tests/security/test_signed_intent.py checks they still match.
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
RESUME_CHANNEL = "__resume__"
INTERRUPT_KEY = "__interrupt__"  # the "updates" stream's key for a pause
INTERRUPT_CHANNEL = "__interrupt__"  # a task's write of the interrupts it asked
# A task's writes that say what happened to it rather than what it produced (langgraph.pregel._task_status).
_CONTROL_CHANNELS = frozenset(("__error__", "__error_source_node__", INTERRUPT_CHANNEL, RESUME_CHANNEL))


@dataclass(frozen=True)
class _Recovery:
    """Re-apply a signed command a failed attempt may have partly stored.

    ``resume``: the signed answers to interrupts still pending (the others were
    shown consumed, ``_answers_stored``); ``update``: the signed update, unless
    stored already. ``answered``: signed interrupt ids whose signed answer the
    checkpoints hold, the only ones LangGraph may call answered and the run go on without.
    """

    resume: dict[str, Any] | None
    update: Any
    answered: frozenset[str]

    def command(self, *, without: frozenset[str] = frozenset()) -> Command[Any] | None:
        resume = {k: v for k, v in (self.resume or {}).items() if k not in without}
        if resume:
            return Command(resume=resume, update=self.update)
        return Command(update=self.update) if self.update else None

    def after_refusal(self, exc: UnknownInterruptError) -> Command[Any] | None:
        """LangGraph called some answers not pending: go on without them only if they are stored."""
        refused = frozenset(exc.interrupt_ids)
        if exc.reason != "not_pending" or not refused <= self.answered:
            raise SignedCommandRefused(
                f"LangGraph refused the signed answer(s) to interrupt(s) {', '.join(sorted(refused - self.answered))} "
                f"({exc}) and the checkpoints do not hold them; the thread cannot continue without the signed command"
            ) from exc
        return self.command(without=refused)


# A worker whose code is older than the database (an upgrade under way: docs/deploy.md, "Upgrades") is refused
# by our database functions at its first audited write. Not a defect of the run: said in one line, the run left
# for a worker on the new release (the sweeper sends it again), instead of an ERROR traceback per attempt.
STALE_WORKER = "this worker runs code older than the database: restart it on the new release"


def run_execute(*, run_id: str) -> None:
    try:
        run = run_claim(run_id=run_id, worker=f"{WORKER_ID}:{threading.get_ident()}")
    except DatabaseError as exc:
        if not stale_code(exc):
            raise
        log.warning("run %s: not claimed, %s; left queued for a worker that is not (%s)", run_id, STALE_WORKER, exc)
        return
    if run is None:
        log.info("run %s is not claimable (done, or held by another worker)", run_id)
        return
    heartbeat = Heartbeat(run)
    heartbeat.start()
    try:
        _execute_claimed(run, heartbeat)
    except LeaseLost as exc:
        if run_cancel_acknowledge(run=run):
            # An operator cancelled the run (runtime.cancel): its writes from here on were refused.
            log.warning("run %s: cancelled; stopped, its late writes are refused (%s)", run.id, exc)
        else:
            log.warning(
                "run %s: lease lost (fence %s); leaving it to the worker that took over: %s", run.id, run.fence, exc
            )
            lease_lost_record(run=run, error=str(exc))
    except Exception as exc:
        if stale_code(exc):
            heartbeat.stop()
            log.warning("run %s: %s; handed back (%s)", run.id, STALE_WORKER, exc)
            run_release(run=run, error=STALE_WORKER)
            return
        if not is_transient(exc):
            raise
        heartbeat.stop()
        _release_after_transient(run, exc)
    finally:
        heartbeat.stop()


def _release_after_transient(run: Run, exc: BaseException) -> None:
    """Give the run back for a later attempt; if even that write fails, its lease lapses on its own."""
    log.warning("run %s: transient error, will be retried with backoff: %s", run.id, exc)
    error = f"transient (attempt {run.attempts}): {_error_text(exc)}"
    for _ in range(2):
        connection.close()  # the connection that failed is unusable; the next query opens a fresh one
        try:
            run_release(run=run, error=error)
            return
        except Exception as again:
            if not is_transient(again):
                raise
    log.warning("run %s: could not release it; its lease will lapse instead", run.id)


def worker_hand_back() -> int:
    """Release every run this worker process holds (see ``console.celery``'s bounded shutdown)."""
    connection.close()
    return runs_hand_back(owner_prefix=f"{WORKER_ID}:")


def run_config(run: Run) -> RunnableConfig:
    # time travel: a run on a branch carries the branch (checkpoint metadata, effect keys);
    # run_claim read the thread's current branch with the run (no branch starts while it is active).
    current = run.current_branch_id if hasattr(run, "current_branch_id") else branch_current_id(thread_id=run.thread_id)
    branch_id = (run.command or {}).get("branch_id") or (str(current) if current else None)
    config: RunnableConfig = {
        "configurable": {
            **({BRANCH_KEY: branch_id} if branch_id else {}),
            "thread_id": str(run.thread_id),
            # An unknown or already-answered interrupt id raises instead of
            # being ignored (or, worse, taken as the answer).
            "__pregel_strict_resume": True,
            "gatehouse_run_id": str(run.id),
            # Every checkpoint write and effect of this run is checked against the
            # thread's current fence (runtime.fencing); it also lands in each
            # checkpoint's metadata, which tells which claim wrote it.
            FENCE_KEY: run.fence,
        }
    }
    # What the client asked the graph to run with (``Run.config``), as LangGraph Server passes it: a node's
    # get_config(), callbacks and traces see the tags, and the root run is named by run_name.
    sent = run.config or {}
    if sent.get("tags"):
        config["tags"] = list(sent["tags"])
    if sent.get("run_name"):
        config["run_name"] = str(sent["run_name"])
    # The run's metadata (``Run.metadata``), as LangGraph Server passes it: a node's config["metadata"], and
    # traces, see it. LangGraph copies its scalars into each checkpoint's metadata ahead of the configurable's,
    # so Gatehouse's own keys there (branch, run id, fence: rollback and time travel read them) are never
    # taken from it.
    if run.metadata:
        config["metadata"] = {k: v for k, v in run.metadata.items() if not k.startswith(RESERVED_METADATA_PREFIX)}
    return config


def _execute_claimed(run: Run, heartbeat: Heartbeat) -> None:
    config = run_config(run)
    try:
        entry = graph_get(run.thread.graph)
        # durability, recursion limit, run timeout (langgraph.json); the run may have lowered its recursion limit
        controls = entry.controls.for_run(run.recursion_limit)
        config = controls.config(config)
        # A factory that takes a config builds this run's graph from it (as LangGraph Server does).
        graph = entry.compiled(config)
        # Long-term memory, as LangGraph Server injects it: nodes take ``store: BaseStore``
        # or call get_store(); every operation is recorded against this run (runtime.store).
        store = store_for_run(thread_id=run.thread_id, run_id=run.id, lease_owner=run.lease_owner)
        # An unnamed graph runs under its registered name, as LangGraph Server names it (the root run of
        # its traces and stream events).
        named = {"name": run.thread.graph} if graph.name == "LangGraph" else {}
        graph = graph.copy(update={"store": store, **named})
    except UnknownGraph as exc:
        run_fail(run=run, error=f"graph {exc.name!r} is not registered", error_type=type(exc).__name__)
        return
    except (GraphRegistryError, StoreConfigError) as exc:  # the graph's factory (or the store) failed for this run
        run_fail(run=run, error=str(exc), error_type=type(exc).__name__)
        return
    try:
        graph_input = _input_for(run, graph, config)
        seen: _Seen | None = None
        if isinstance(graph_input, _Recovery):
            try:
                seen = _stream(graph, graph_input.command(), config, heartbeat, controls, run)
            except UnknownInterruptError as exc:
                # Refused before anything was written: the failed attempt stored these answers, or the run fails.
                seen = _stream(graph, graph_input.after_refusal(exc), config, heartbeat, controls, run)
        elif isinstance(graph_input, ReplayFrom):  # time travel: re-execute from a past checkpoint
            at: RunnableConfig = {
                **config,
                "configurable": {**config.get("configurable", {}), "checkpoint_id": graph_input.checkpoint_id},
            }
            with replaying_from(graph_input.checkpoint_id):  # as saved: not the update a decision wrote on it
                _stream(graph, None, at, heartbeat, controls, run)
        elif graph_input is not _SKIP:
            seen = _stream(graph, graph_input, config, heartbeat, controls, run)
        outcome = seen.completed(graph) if seen is not None else None
        if outcome is None:
            outcome = outcome_read(graph.get_state(config, subgraphs=True))
    except LeaseLost:
        raise
    except Exception as exc:
        heartbeat.check()
        if is_transient(exc):
            raise  # not the graph's fault: run_execute hands the run back for a retry with backoff
        # The graph's own code raised: its author needs the traceback (the run keeps only the message).
        log.warning("run %s: the graph raised; the run fails", run.id, exc_info=exc)
        checkpoint_id = _checkpoint_id_safe(graph, config)
        run_fail(run=run, error=_error_text(exc), error_type=type(exc).__name__, checkpoint_id=checkpoint_id)
        return
    heartbeat.check()
    if run.kind == RunKind.REPLAY:
        replay_head_record(run=run, checkpoint_id=outcome.checkpoint_id)
    run_finish(run=run, outcome=outcome)


# Channel values a checkpoint stores as they are (inline JSON); anything else goes through the serializer.
_INLINE = (str, int, float, bool, type(None))


@dataclass
class _Seen:
    """What one stream told about how the run ended: its last root checkpoint, and whether it paused."""

    checkpoint: dict[str, Any] | None = None  # the last "checkpoints" event (the shape of get_state)
    paused: bool = False  # an ``__interrupt__`` update came (an interrupt, or a static breakpoint)

    def completed(self, graph: Pregel[Any, Any, Any, Any]) -> RunOutcome | None:
        """The outcome of a run that ran to its end, from the stream; None when the checkpoints must say.

        A run that ended has no next task and no interrupt: its last checkpoint
        event is its final state, which is exactly what ``get_state`` would
        read back, once the values have made the same trip through the
        checkpointer's serializer. A pause (tasks, interrupts, subgraphs) is
        read from the checkpoints (``outcome_read``).
        """
        cp = self.checkpoint
        if self.paused or cp is None or cp.get("next") or cp.get("tasks"):
            return None
        checkpoint_id = str(cp["config"]["configurable"]["checkpoint_id"])
        values = _as_stored(graph, cp.get("values"))
        return RunOutcome(RunStatus.SUCCEEDED, checkpoint_id, to_jsonable(values or {}))


def _as_stored(graph: Pregel[Any, Any, Any, Any], values: Any) -> Any:
    """``values`` as the checkpointer would load them back (what ``get_state`` returns)."""
    serde = graph.checkpointer.serde if isinstance(graph.checkpointer, BaseCheckpointSaver) else None
    if serde is None:
        return values

    def stored(value: Any) -> Any:
        return value if isinstance(value, _INLINE) else serde.loads_typed(serde.dumps_typed(value))

    if isinstance(graph.stream_channels_asis, str) or not isinstance(values, dict):
        return stored(values)  # a graph whose state is one root channel
    return {key: stored(value) for key, value in values.items()}


def _stream(
    graph: Pregel[Any, Any, Any, Any],
    graph_input: Any,
    config: RunnableConfig,
    heartbeat: Heartbeat,
    controls: RuntimeControls,
    run: Run,
) -> _Seen:
    deadline = controls.deadline()
    seen = _Seen()
    # Cancelled by an operator? Stop before the next step. Under "sync" durability every step ends
    # with a fenced checkpoint write, which a cancel (it moves the fence) refuses before the next step
    # starts; under async/exit durability no write would tell us until the run ends, so ask the database.
    ask = controls.durability != "sync"
    modes: list[StreamMode] = ["updates", "checkpoints"]
    try:
        # stream_tap is graph.stream; for a run a /lg/ client streams, it also publishes the chunks (runtime.stream).
        for mode, chunk in stream_tap(
            run, graph, graph_input, config, stream_mode=modes, durability=controls.durability
        ):
            if mode == "checkpoints":
                seen.checkpoint = cast(dict[str, Any], chunk)
                continue
            seen.paused = seen.paused or (isinstance(chunk, dict) and INTERRUPT_KEY in chunk)
            heartbeat.check()
            if ask:
                run_cancel_check(run=run)
            controls.check(deadline)
    except GraphRecursionError as exc:
        raise controls.recursion_error(exc) from None
    return seen


def _input_for(run: Run, graph: Pregel[Any, Any, Any, Any], config: RunnableConfig) -> Any:
    if run.kind == RunKind.REPLAY and (run.command or {}).get(REPLAY_FROM):
        replay = replay_input(run=run, graph=graph, config=config)
        if replay is not None:
            return replay
        return _past_input(graph.get_state(config))
    first_input = _first_input(run)
    if isinstance(first_input, Command):
        return _command_input(run, graph, config, first_input)
    if run.attempts <= 1:
        return first_input
    # A previous attempt died. Work out how far it got from the checkpoints.
    snapshot = graph.get_state(config)
    continues = run.kind == RunKind.RETRY and run.input is None  # a retry with input starts as a start run does
    if continues or _checkpoint_of(snapshot) == (run.command or {}).get("checkpoint_id", ""):
        return first_input
    return _past_input(snapshot)


def _checkpoint_of(snapshot: StateSnapshot) -> str:
    return str(snapshot.config.get("configurable", {}).get("checkpoint_id", "")) if snapshot.created_at else ""


def _past_input(snapshot: StateSnapshot) -> Any:
    """The input for a run whose previous attempt got past the checkpoint its input applied to."""
    # ``next`` leaves out tasks whose writes are already saved: an attempt killed
    # after a node finished but before the step's checkpoint has an empty ``next``
    # though the graph is mid-way (found by the chaos test), so "ended" also needs
    # no tasks left.
    if snapshot.interrupts or (not snapshot.next and not snapshot.tasks):
        return _SKIP  # it reached its pause or its end; only the bookkeeping is missing
    return None  # continue from the last checkpoint


def _command_input(run: Run, graph: Pregel[Any, Any, Any, Any], config: RunnableConfig, command: Command[Any]) -> Any:
    """The signed command, or on recovery the part of it the checkpoints do not hold yet."""
    _command_storable_check(command)
    if run.attempts <= 1 and run.kind != RunKind.RETRY:
        resume_guard(graph, config, command)
        return command
    # A redelivered attempt, or an operator's retry of a failed resume.
    snapshot = graph.get_state(config)
    if _checkpoint_of(snapshot) != (run.command or {}).get("checkpoint_id", ""):
        # The thread moved past the checkpoint the command was signed at: the step
        # that applied it completed, and its checkpoint holds the update and the answers.
        return _past_input(snapshot)
    return _recovery(graph, config, command)


def _command_storable_check(command: Command[Any]) -> None:
    try:
        if command.resume is not None:
            value_storable_check(command.resume, field="resume")
        if command.update is not None:
            value_storable_check(command.update, field="update")
    except NotStorable as exc:
        raise SignedCommandRefused(
            f"the signed command cannot be stored by the checkpointer ({exc.field}: {exc.message}); nothing was applied"
        ) from None


def _recovery(graph: Pregel[Any, Any, Any, Any], config: RunnableConfig, command: Command[Any]) -> _Recovery:
    """Still at the signed checkpoint: compare what a failed attempt stored with what was signed.

    LangGraph stores a command in pieces (the update as writes of the input
    step, each answer as a write of the gate task that consumed it), so an
    attempt that failed part-way may have stored the answers without the
    update: continuing from the checkpoints alone would then run the gate's
    stored answer on the state as it was before the edit. Re-apply the missing
    update; refuse when a stored piece differs from the signed one.

    A signed interrupt that is no longer pending is left out only when the
    checkpoints show its signed answer applied (``_Stored.applied``, or in a
    subgraph's checkpoints ``_answers_stored_below``); it may also have
    stopped being pending because the graph changed between attempts (its
    triggers no longer lead to the gate's task), and going on would drop the
    human's answer: the run fails instead.
    """
    saved = graph.checkpointer.get_tuple(config) if graph.checkpointer else None  # type: ignore[union-attr]
    writes = list(saved.pending_writes or []) if saved else []
    signed_update = list((command.update or {}).items())
    stored_update = [(c, v) for t, c, v in writes if t == NULL_TASK_ID and c != RESUME_CHANNEL]
    if stored_update and canonical_json(stored_update) != canonical_json(signed_update):
        raise SignedCommandRefused(
            f"the stored state update {canonical_json(dict(stored_update))} is not the signed one "
            f"{canonical_json(command.update)}; the thread cannot continue without the signed command"
        )
    update = None if stored_update else command.update
    signed: dict[str, Any] = dict(command.resume) if isinstance(command.resume, dict) else {}
    stored = _answers_stored(graph, writes, signed)
    for interrupt_id, answer in stored.by_id.items():
        if interrupt_id in signed and canonical_json(answer) != canonical_json(signed[interrupt_id]):
            raise SignedCommandRefused(
                f"the stored answer {canonical_json(answer)} to interrupt {interrupt_id} is not the signed one; "
                "the thread cannot continue without the signed command"
            )
    signed_answers = {canonical_json(v) for v in signed.values()}
    for answer in stored.unattributed:
        if canonical_json(answer) not in signed_answers:
            raise SignedCommandRefused(
                f"a stored answer {canonical_json(answer)} is not one of the signed answers; "
                "the thread cannot continue without the signed command"
            )
    if not signed:
        return _Recovery(resume=None, update=update, answered=frozenset())
    # A stored answer is applied when its task finished (its output is stored with it), or will be when the
    # graph runs its task again at this checkpoint (LangGraph hands the task its stored answers). A task that
    # failed after interrupt() returned stored its answer too, but nothing it did with it.
    rerun = {task.id for task in graph.get_state(config).tasks}
    answered = frozenset(i for i in signed if stored.applied(i, rerun))
    try:
        resume_guard(graph, config, command)
    except UnknownInterruptError as exc:
        gone = set(exc.interrupt_ids)
        dropped = sorted(gone - answered - _answers_stored_below(graph, config, writes, signed, gone - answered))
        if dropped:
            raise SignedCommandRefused(
                f"the signed answer(s) to interrupt(s) {', '.join(dropped)} were never applied and the interrupt "
                "is no longer pending (the graph changed since it was signed?); the thread cannot continue without "
                "the signed command: restore the graph as it was, or cancel the thread"
            ) from None
        return _Recovery(resume={k: v for k, v in signed.items() if k not in gone}, update=update, answered=answered)
    return _Recovery(resume=signed, update=update, answered=answered)


@dataclass
class _Stored:
    """The answers the gate tasks of one checkpoint consumed (their ``__resume__`` writes)."""

    by_id: dict[str, Any]  # interrupt id -> the answer stored for it
    unattributed: list[Any]  # answers of a task whose interrupts' ids could not be worked out
    asked: dict[str, list[str]]  # task id -> the ids of the interrupts it asked last (its ``__interrupt__`` write)
    finished: set[str]  # tasks with output writes: they ran to their end
    task_of: dict[str, str]  # interrupt id -> the task that stored its answer

    def applied(self, interrupt_id: str, rerun: set[str]) -> bool:
        task = self.task_of.get(interrupt_id)
        return task is not None and (task in self.finished or task in rerun)


def _answers_stored(
    graph: Pregel[Any, Any, Any, Any], writes: list[Any], signed: dict[str, Any], prefix: str = ""
) -> _Stored:
    """Which interrupt each stored answer answered.

    A task's ``__resume__`` write lists its answers in the order it asked; the
    id of the interrupt the k-th answers is a hash of the task's namespace
    (``<node>:<task id>``, below ``prefix`` in a subgraph) and k
    (``langgraph.types._interrupt_id``). The node is not stored with the
    write: it is one of the graph's, the one whose ids include what the task
    asked (its ``__interrupt__`` write) or a signed id. A task renamed away
    still tells its last answer when it finished: the answer to what it asked last.
    """
    answers: dict[str, list[Any]] = {}
    asked: dict[str, list[str]] = {}
    finished: set[str] = set()
    for t, c, v in writes:
        if t == NULL_TASK_ID:
            continue
        if c == RESUME_CHANNEL:
            answers[t] = list(v) if isinstance(v, list) else [v]
        elif c == INTERRUPT_CHANNEL:
            asked[t] = [str(i.id) for i in (v if isinstance(v, list | tuple) else [v]) if getattr(i, "id", None)]
        elif c not in _CONTROL_CHANNELS:
            finished.add(t)
    stored = _Stored(by_id={}, unattributed=[], asked=asked, finished=finished, task_of={})
    names = _node_names(graph)
    for task_id, values in answers.items():
        known = set(asked.get(task_id, ())) | set(signed)
        for name in names:
            ids = [_interrupt_id(f"{prefix}{name}{NS_END}{task_id}", k) for k in range(len(values) + 1)]
            if known.intersection(ids):
                stored.by_id.update(zip(ids, values, strict=False))
                stored.task_of.update(dict.fromkeys(ids[: len(values)], task_id))
                break
        else:
            last = asked.get(task_id, [])
            if task_id in finished and len(last) == 1:
                stored.by_id[last[0]] = values[-1]
                stored.task_of[last[0]] = task_id
                stored.unattributed.extend(values[:-1])
            else:
                stored.unattributed.extend(values)
    return stored


def _answers_stored_below(
    graph: Pregel[Any, Any, Any, Any],
    config: RunnableConfig,
    writes: list[Any],
    signed: dict[str, Any],
    wanted: set[str],
    prefix: str = "",
    depth: int = 0,
) -> set[str]:
    """Of ``wanted``, the interrupts raised in a subgraph whose signed answer a checkpoint of that subgraph stores.

    The parent task's ``__interrupt__`` write carries its subgraph's interrupts;
    the answer is written in the subgraph's own checkpoints (namespace
    ``<node>:<parent task id>``), which may have moved on past it.
    """
    found: set[str] = set()
    if not wanted or depth > 8 or graph.checkpointer is None:
        return found
    saver = cast(BaseCheckpointSaver[str], graph.checkpointer)
    thread_id = config.get("configurable", {}).get("thread_id")
    asked = _answers_stored(graph, writes, signed, prefix).asked
    for task_id, ids in asked.items():
        below = wanted.intersection(ids)
        if not below:
            continue
        for name in _node_names(graph):
            namespace = f"{prefix}{name}{NS_END}{task_id}"
            for saved in saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace}}):
                inner = list(saved.pending_writes or [])
                stored = _answers_stored(graph, inner, signed, f"{namespace}{NS_SEP}")
                # the subgraph's gate task ran to its end with the signed answer (checked equal to it)
                found |= {
                    i
                    for i in below
                    if i in stored.by_id
                    and i in stored.task_of
                    and stored.task_of[i] in stored.finished
                    and canonical_json(stored.by_id[i]) == canonical_json(signed[i])
                }
                found |= _answers_stored_below(
                    graph, config, inner, signed, below - found, f"{namespace}{NS_SEP}", depth + 1
                )
    return found


def _node_names(graph: Pregel[Any, Any, Any, Any]) -> list[str]:
    """The graph's node names and its subgraphs' (as declared now: a node renamed away is not among them)."""
    names = dict.fromkeys(graph.nodes)
    for _, sub in graph.get_subgraphs(recurse=True):
        if isinstance(sub, Pregel):  # a remote graph has no nodes to list
            names.update(dict.fromkeys(sub.nodes))
    return list(names)


def resume_guard(graph: Pregel[Any, Any, Any, Any], config: RunnableConfig, command: Command[Any]) -> None:
    """Refuse a resume map naming an interrupt that is not pending.

    LangGraph's strict resume checks ids only for interrupts of the root graph
    (checked with langgraph 1.2.24): a wrong id aimed at a subgraph interrupt is
    silently dropped and the subgraph's ``interrupt()`` returns None. So check
    every id against the pending interrupts, subgraphs included, first.
    """
    if not isinstance(command.resume, dict) or not command.resume:
        return
    pending = {i.id for i in graph.get_state(config, subgraphs=True).interrupts}
    unknown = sorted(set(command.resume) - pending)
    if unknown:
        raise UnknownInterruptError(
            f"interrupt(s) {', '.join(unknown)} are not pending on this thread",
            reason="not_pending",
            interrupt_ids=unknown,
            pending_ids=sorted(pending),
        )


def _first_input(run: Run) -> Any:
    if run.kind == RunKind.START or (run.kind == RunKind.RETRY and run.input is not None):
        return run.input or {}  # a retry of a start that failed before its first checkpoint: its input again
    command = run.command or {}
    resume, update = command.get("resume"), command.get("update") or None
    if resume is None and update is None:
        return None  # continue past a static breakpoint
    return Command(resume=resume, update=update)


def outcome_read(snapshot: StateSnapshot) -> RunOutcome:
    checkpoint_id = snapshot.config.get("configurable", {}).get("checkpoint_id", "")
    values = to_jsonable(snapshot.values or {})
    pending: dict[str, PendingInterrupt] = {}
    for task in snapshot.tasks:
        for item in _task_interrupts(task, checkpoint_id, ""):
            pending.setdefault(item.interrupt_id, item)
    if pending:
        return RunOutcome(RunStatus.INTERRUPTED, checkpoint_id, values, list(pending.values()))
    if snapshot.next:
        # A static breakpoint (interrupt_before/after): no Interrupt object,
        # so the pause is keyed by the checkpoint it happened at.
        node = ",".join(snapshot.next)
        breakpoint_ = PendingInterrupt(
            interrupt_id=f"breakpoint:{checkpoint_id}",
            value={"breakpoint": True, "next": list(snapshot.next)},
            node=node,
            checkpoint_id=checkpoint_id,
            kind="breakpoint",
        )
        return RunOutcome(RunStatus.INTERRUPTED, checkpoint_id, values, [breakpoint_])
    return RunOutcome(RunStatus.SUCCEEDED, checkpoint_id, values)


def _task_interrupts(task: Any, checkpoint_id: str, namespace: str) -> list[PendingInterrupt]:
    # checkpoint_id is always the root checkpoint (the thread's version a
    # reviewer sees); namespace locates an interrupt raised in a subgraph.
    child = task.state if isinstance(task.state, StateSnapshot) else None
    if child is not None and any(t.interrupts for t in child.tasks):
        child_ns = child.config.get("configurable", {}).get("checkpoint_ns", "")
        found: list[PendingInterrupt] = []
        for sub in child.tasks:
            found.extend(_task_interrupts(sub, checkpoint_id, child_ns))
        return found
    return [
        PendingInterrupt(
            interrupt_id=i.id,
            value=to_jsonable(i.value),
            node=task.name,
            checkpoint_id=checkpoint_id,
            checkpoint_ns=namespace,
            response_schema=to_jsonable(getattr(i, "response_schema", None)),
        )
        for i in task.interrupts
    ]


def _checkpoint_id_safe(graph: Pregel[Any, Any, Any, Any], config: RunnableConfig) -> str:
    """The thread's latest root checkpoint, for the failed thread's row: read from the saver, not through
    ``get_state``, which builds the state and raised again for the very state that failed the run (a
    dataclass missing a required field): the row named no checkpoint and time travel refused to repair it."""
    saver = graph.checkpointer if isinstance(graph.checkpointer, BaseCheckpointSaver) else checkpointer_get()
    latest: RunnableConfig = {"configurable": {"thread_id": config["configurable"]["thread_id"], "checkpoint_ns": ""}}
    try:
        with blobs_lazy():
            saved = saver.get_tuple(latest)
    except Exception:  # noqa: BLE001 - only a hint for the failed thread's row
        return ""
    return str(saved.config["configurable"].get("checkpoint_id", "")) if saved is not None else ""


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, UnknownInterruptError):
        return f"resume refused by LangGraph: {exc}"
    if isinstance(exc, SignedCommandRefused):
        return f"signed command refused: {exc}"[:4000]
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[:4000]
