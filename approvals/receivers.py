"""Subscribe the domain to runtime events: open tasks, and audit what workers did."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import transaction
from django.dispatch import receiver

from approvals.audit import AuditEntry, audit_record, audit_record_all
from approvals.intent import decision_followed
from approvals.models import AuditAction, AuditEvent
from approvals.services import tasks_open
from runtime import signals
from runtime.models import Effect, Run, Thread
from runtime.retention import PruneReport, checkpoints_pruned

# A thread's graph, by thread id: set when the thread starts running and never changed after, so
# audit rows of effects (several per run) need not read the thread again. Bounded; empty ones not kept.
_graphs: dict[Any, str] = {}
GRAPHS_KEPT = 10_000


def _thread_graph(thread_id: Any) -> str:
    graph = _graphs.get(thread_id)
    if graph is None:
        graph = Thread.objects.filter(pk=thread_id).values_list("graph", flat=True).first() or ""
        if graph:
            if len(_graphs) >= GRAPHS_KEPT:
                _graphs.clear()
            _graphs[thread_id] = graph
    return graph


RUNTIME_LABEL = "runtime"  # the audit actor of what the runtime decides itself (no worker, no principal)


def _run_entry(run: Run, action: AuditAction, details: dict[str, Any], *, by_runtime: bool = False) -> AuditEntry:
    return AuditEntry(
        actor_label=f"worker:{run.lease_owner}" if run.lease_owner and not by_runtime else RUNTIME_LABEL,
        action=action,
        subject_type="run",
        subject_id=run.id,
        thread_id=run.thread_id,
        graph=run.thread.graph,
        details={"kind": run.kind, **details},
    )


def _audit_run(run: Run, action: AuditAction, details: dict[str, Any], *, by_runtime: bool = False) -> None:
    _run_entry(run, action, details, by_runtime=by_runtime).recorded()


@receiver(signals.run_claimed)
def on_run_claimed(sender: Any, run: Run, **kwargs: Any) -> None:
    if run.thread.graph:
        _graphs.setdefault(run.thread_id, run.thread.graph)
    _audit_run(run, AuditAction.RUN_CLAIMED, {"attempt": run.attempts, "fence": run.fence})


@receiver(signals.run_lease_lapsed)
def on_run_lease_lapsed(sender: Any, run: Run, **kwargs: Any) -> None:
    # In the sweeper's transaction (the run as it read it: only its columns, not its thread).
    lapsed_at = run.lease_expires_at.isoformat() if run.lease_expires_at else None
    audit_record(
        actor=None,
        actor_label=RUNTIME_LABEL,
        action=AuditAction.RUN_LEASE_LAPSED,
        subject_type="run",
        subject_id=run.id,
        thread_id=run.thread_id,
        graph=_thread_graph(run.thread_id),
        details={"fence": run.fence, "owner": run.lease_owner, "attempt": run.attempts, "lease_expired_at": lapsed_at},
    )


@receiver(signals.run_lease_lost)
def on_run_lease_lost(sender: Any, run: Run, holder: dict[str, Any], error: str, **kwargs: Any) -> None:
    # By the overtaken worker, in a transaction of its own: its fence, refused, and who holds the run now.
    _audit_run(
        run,
        AuditAction.RUN_LEASE_LOST,
        {"fence": run.fence, "attempt": run.attempts, "now_held_by": holder, "error": error[:500]},
    )


@receiver(signals.run_interrupted)
def on_run_interrupted(sender: Any, run: Run, interrupts: list[Any], **kwargs: Any) -> None:
    # The run's pause and the tasks it opens: audited together, in this order (one statement).
    paused = _run_entry(run, AuditAction.RUN_INTERRUPTED, {"interrupts": [i.interrupt_id for i in interrupts]})
    tasks_open(run=run, interrupts=interrupts, audited_first=paused)


@receiver(signals.run_completed)
def on_run_completed(sender: Any, run: Run, values: dict[str, Any], **kwargs: Any) -> None:
    thread = run.thread
    completed = AuditEntry.about_thread(
        thread,
        AuditAction.THREAD_COMPLETED,
        {"checkpoint_id": thread.checkpoint_id, "keys": sorted(values), "run": str(run.id)},
        actor_label=RUNTIME_LABEL,
    )
    audit_record_all([_run_entry(run, AuditAction.RUN_SUCCEEDED, {}), completed])


@receiver(signals.run_failed)
def on_run_failed(sender: Any, run: Run, error: str, dead_letter: bool = False, **kwargs: Any) -> None:
    # A dead letter (a sweep, or a claim past the last attempt) is the runtime giving up on the run: its
    # lease still names the last worker, lost or not, which decided nothing.
    _audit_run(run, AuditAction.RUN_FAILED, {"error": error, "attempt": run.attempts}, by_runtime=dead_letter)


SUBJECT_ID_MAX = AuditEvent._meta.get_field("subject_id").max_length or 64


@receiver(signals.effect_executed)
def on_effect_executed(sender: Any, effect: Effect, **kwargs: Any) -> None:
    audit_record(
        actor=None,
        actor_label=RUNTIME_LABEL,
        action=AuditAction.EFFECT_EXECUTED,
        subject_type="effect",
        # A key longer than the subject column (a custom key, a branch-scoped one) is named by its row id.
        subject_id=effect.key if len(effect.key) <= SUBJECT_ID_MAX else f"#{effect.pk}",
        thread_id=effect.thread_id,
        graph=_thread_graph(effect.thread_id) if effect.thread_id else "",
        details={
            "key": effect.key,
            "name": effect.name,
            "result": effect.result,
            "calls": effect.calls,
            "args": effect.args,
            "args_digest": effect.args_digest,
            "run": str(effect.run_id) if effect.run_id else None,
            # The signed intent it followed, bound in the tamper-evident trail (decisions_verify).
            "follows_decision": decision_followed(effect=effect),
        },
    )


# Long-term memory: a graph run's store write is audited in the transaction that records it (runtime.store).
@receiver(signals.store_written)
def on_store_written(
    sender: Any, operation: Any, namespace: tuple[str, ...], key: str, value: dict[str, Any] | None, **kwargs: Any
) -> None:
    from approvals.store import store_write_audit

    # The worker's claim, as the recording store knows it (else read from the run).
    lease_owner = kwargs.get("lease_owner")
    if lease_owner is None:
        lease_owner = Run.objects.only("lease_owner").get(pk=operation.run_id).lease_owner
    store_write_audit(
        actor=None,
        actor_label=f"worker:{lease_owner}" if lease_owner else RUNTIME_LABEL,
        namespace=namespace,
        key=key,
        value=value,
        thread_id=operation.thread_id,
        run_id=operation.run_id,
    )


# Retention: a prune that deleted checkpoints or blobs is on the record, as any other deletion (docs/retention.md).
PRUNED_IDS_LISTED = 100  # the rest are covered by the digest of them all


@receiver(checkpoints_pruned)
def on_checkpoints_pruned(sender: Any, report: PruneReport, graph: str | None, **kwargs: Any) -> None:
    threads = sorted(report.pruned_threads)
    digest = hashlib.sha256("\n".join(threads).encode()).hexdigest()
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label=RUNTIME_LABEL,
            action=AuditAction.CHECKPOINTS_PRUNED,
            subject_type="retention",
            subject_id=digest[:16],
            graph=graph or "",
            details={
                "threads": len(threads),
                "thread_ids": threads[:PRUNED_IDS_LISTED],
                "thread_ids_sha256": digest,  # of the sorted ids, one per line
                "checkpoints_deleted": report.checkpoints_deleted,
                "checkpoints_kept": report.checkpoints_kept,
                "blobs_deleted": report.blobs_deleted,
                "completed_before": report.completed_before,
                "errors": len(report.errors),
            },
        )
