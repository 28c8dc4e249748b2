"""Threads, runs and the effect ledger: what the runtime must remember."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q


class ThreadStatus(models.TextChoices):
    IDLE = "idle", "Idle"
    BUSY = "busy", "Busy"
    INTERRUPTED = "interrupted", "Waiting for a decision"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class UpdatedAtField(models.DateTimeField):  # type: ignore[type-arg]
    """``auto_now``, but an inserted row takes its ``created_at`` (set just before it, by ``auto_now_add``):
    two clock reads differed by microseconds, so a row nothing had changed could read as changed a
    millisecond after it was made (the ``/lg/`` API's ``state_updated_at`` of a new thread is its
    ``created_at``, as LangGraph Server answers)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["auto_now"] = True
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        del kwargs["auto_now"]  # always set by __init__
        return name, path, args, kwargs

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        created = getattr(model_instance, "created_at", None) if add else None
        if created is None:
            return super().pre_save(model_instance, add)
        setattr(model_instance, self.attname, created)
        return created


class Thread(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    graph = models.CharField(max_length=100, db_index=True)
    status = models.CharField(max_length=16, choices=ThreadStatus.choices, default=ThreadStatus.IDLE)
    metadata = models.JSONField(default=dict, blank=True)
    # A JSON snapshot of the latest values, for listings; the checkpointer
    # stays the source of truth for state.
    values = models.JSONField(default=dict, blank=True)
    checkpoint_id = models.CharField(max_length=64, blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)  # before updated_at: its insert takes this instant
    updated_at = UpdatedAtField()
    # Incremented on every claim; a worker whose token is stale must stop.
    fence = models.BigIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["graph", "status", "-created_at"], name="thread_graph_status"),
            models.Index(fields=["-created_at", "-id"], name="thread_newest"),  # the thread list's pages
        ]
        permissions = [
            ("start_thread", "Can start threads"),
            ("retry_thread", "Can retry failed threads"),
        ]

    def __str__(self) -> str:
        return f"{self.graph}/{self.id}"

    @property
    def is_finished(self) -> bool:
        return self.status in (ThreadStatus.COMPLETED, ThreadStatus.CANCELLED)


class RunKind(models.TextChoices):
    START = "start", "Start"
    RESUME = "resume", "Resume"
    RETRY = "retry", "Retry"
    # time travel (runtime.branches): a run on a branch, from its fork point or a replayed checkpoint
    REPLAY = "replay", "Replay"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    INTERRUPTED = "interrupted", "Interrupted"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"  # by an operator (runtime.cancel); who and why are on the run


class RunCancelAction(models.TextChoices):
    """What cancelling a run does to its thread (LangGraph Server's cancel ``action``)."""

    INTERRUPT = "interrupt", "Interrupt"  # keep the checkpoints written so far; stop at the last one
    ROLLBACK = "rollback", "Roll back"  # remove the run's checkpoints; back to where it started


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
ERROR_TYPE_MAX_LENGTH = 200  # Run.error_type: an exception's class name


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="runs")
    kind = models.CharField(max_length=8, choices=RunKind.choices)
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.QUEUED)
    input = models.JSONField(null=True, blank=True)
    # {"resume": {interrupt_id: value} | None, "update": {...} | None, "as_node": str | None}
    command = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    fence = models.BigIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # When the run was (last) sent to Celery: set at its insert, for it is sent when that commits, and moved
    # by each re-send of the sweeper. NULL only on runs queued before this was so (the sweeper reads it as
    # "sent at creation").
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Run cancellation (runtime.cancel): what was asked, by whom, why.
    cancel_action = models.CharField(max_length=9, choices=RunCancelAction.choices, blank=True, default="")
    cancelled_by = models.CharField(max_length=150, blank=True, default="")
    cancel_reason = models.TextField(blank=True, default="")
    # What a /lg/ client streams from this run, {"modes": [...], "subgraphs": bool}, set in the
    # transaction that enqueues it; the worker publishes those chunks (runtime.stream). Null: nothing is.
    stream = models.JSONField(null=True, blank=True)
    # As a /lg/ client created it (LangGraph Server's run options): the strategy it named, which a run
    # object reports back, and its own config.recursion_limit, which lowers the graph's for this run only.
    multitask_strategy = models.CharField(max_length=9, blank=True, default="reject")
    recursion_limit = models.PositiveIntegerField(null=True, blank=True)
    # The RunnableConfig keys a /lg/ client sent that the graph runs with, as LangGraph Server passes them
    # (``{"tags": [...], "run_name": "..."}``: a node's get_config(), callbacks and traces see them) and as
    # the run object reports them back (``kwargs.config``). Null: none were sent.
    config = models.JSONField(null=True, blank=True)
    # A /lg/ run's metadata as LangGraph Server keeps it: the client's ``config.metadata`` and ``metadata``
    # merged over its thread's (the run object reports it; the graph runs with it as its RunnableConfig's
    # ``metadata``). Null: a run made elsewhere (the console, the native API), which runs with none.
    metadata = models.JSONField(null=True, blank=True)
    # A failed run's exception class name (``type(exc).__name__``), recorded with ``error`` (its text):
    # what the /lg/ API names the failure by. "" when no exception failed it (the runtime gave up on it);
    # NULL on runs that have not failed, and on rows failed before this was recorded: "not recorded" must
    # differ from "no exception", for only those rows have their type read back out of the text.
    error_type = models.CharField(max_length=ERROR_TYPE_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001

    class Meta:
        constraints = [
            # The database, not the application, guarantees one active run
            # per thread: a concurrent start/resume fails on insert.
            models.UniqueConstraint(
                fields=["thread"],
                condition=Q(status__in=["queued", "running"]),
                name="one_active_run_per_thread",
            )
        ]
        indexes = [
            models.Index(fields=["status", "lease_expires_at"], name="run_status_lease"),
            models.Index(fields=["thread", "-created_at"], name="run_thread_created"),
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.kind}, {self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_RUN_STATUSES


class EffectStatus(models.TextChoices):
    STARTED = "started", "Started"
    DONE = "done", "Done"
    # The call raised and the provider certainly did not act (it refused, or the request never left).
    FAILED = "failed", "Failed"
    # The call raised after the request may have reached the provider (a timeout, a cut connection):
    # it may have acted. A retry asks again under the same key and records its answer.
    UNKNOWN = "unknown", "Outcome unknown"


class Effect(models.Model):
    """One side effect, keyed by its idempotency key: intent, then result."""

    key = models.CharField(max_length=255, unique=True)
    name = models.CharField(max_length=100)
    thread = models.ForeignKey(Thread, null=True, blank=True, on_delete=models.SET_NULL, related_name="effects")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="effects")
    status = models.CharField(max_length=8, choices=EffectStatus.choices, default=EffectStatus.STARTED)
    result = models.JSONField(null=True, blank=True)
    # What the effect was executed with (canonical JSON and its SHA-256), so an
    # auditor can prove it is what the decision before it signed.
    args = models.JSONField(null=True, blank=True)
    args_digest = models.CharField(max_length=64, blank=True, default="")
    error = models.TextField(blank=True, default="")
    calls = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"effect {self.key} ({self.status})"

    @property
    def abandoned(self) -> bool:
        """Started by a run that has ended with no outcome recorded: its process stopped mid-call (killed
        for good, cancelled, out of attempts). As uncertain as ``unknown``: the provider may have acted.
        A run still active may yet record it (a worker that took over calls again under the same key);
        an effect called outside a run has no run to tell."""
        if self.status != EffectStatus.STARTED or self.run_id is None:
            return False
        run = self.run
        return run is not None and not run.is_active

    @property
    def outcome(self) -> str:
        """The status an operator must read: ``unknown`` for an abandoned call, else the recorded one."""
        return EffectStatus.UNKNOWN.value if self.abandoned else str(self.status)


class Blob(models.Model):
    """A large checkpoint value, stored once under its SHA-256 (see runtime.blobs).

    ``data`` holds the bytes when blobs live in the database; with object
    storage it stays NULL and the row is the index the garbage collector reads.
    """

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    # Refreshed whenever a writer finds the blob already stored; the collector
    # leaves recently touched blobs alone (a checkpoint may be about to reference one).
    touched_at = models.DateTimeField(auto_now_add=True, db_index=True)
    data = models.BinaryField(null=True, blank=True)

    def __str__(self) -> str:
        return f"blob {self.sha256[:12]} ({self.size} bytes)"


class BlobRef(models.Model):
    """Which thread's checkpoints reference which blob: what keeps a blob alive."""

    thread_id = models.CharField(max_length=255)
    blob = models.ForeignKey(Blob, on_delete=models.CASCADE, related_name="refs", db_column="sha256")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["thread_id", "blob"], name="blobref_thread_blob")]

    def __str__(self) -> str:
        return f"{self.thread_id} → {self.blob_id}"


# --- time travel (runtime.branches) ---------------------------------------------------------


class BranchKind(models.TextChoices):
    FORK = "fork", "Fork (state updated at a past checkpoint)"
    REPLAY = "replay", "Replay (re-run from a past checkpoint)"


class Branch(models.Model):
    """A line of a thread's history that an operator started from a past checkpoint.

    The thread's first line has no row. Checkpoints written on a branch carry its
    id in their metadata (``gatehouse_branch_id``), and effects performed on it get
    idempotency keys scoped to it, so a forked payment is a new payment while a
    retry within one branch still pays once.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="branches")
    # The branch the source checkpoint was on (None: the thread's first line).
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    kind = models.CharField(max_length=8, choices=BranchKind.choices)
    from_checkpoint_id = models.CharField(max_length=64)
    # A fork: the checkpoint its update_state wrote. A replay: where its run first settled ("" until then).
    head_checkpoint_id = models.CharField(max_length=64, blank=True, default="")
    update_keys = models.JSONField(default=list, blank=True)  # the state keys a fork changed (never their values)
    as_node = models.CharField(max_length=100, blank=True, default="")
    reason = models.TextField()
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["thread", "-created_at"], name="branch_thread_created")]
        permissions = [("time_travel", "Can replay and fork threads from a past checkpoint")]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} of {self.thread_id} at {self.from_checkpoint_id}"


# --- long-term memory store (runtime/store.py; docs/memory-store.md) ------------------------------


class StoreOperation(models.Model):
    """One store operation a run made: what the thread page lists as its memory reads and writes.

    The item itself lives in LangGraph's store tables; this row only says who touched
    which namespace/key (``namespace`` is the dotted label path; labels cannot hold dots).
    """

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(auto_now_add=True)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="store_operations")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="store_operations")
    op = models.CharField(max_length=16)  # get | put | delete | search | list_namespaces
    namespace = models.CharField(max_length=512)
    key = models.CharField(max_length=512, blank=True, default="")
    hits = models.IntegerField(default=0)  # get: found (0/1); search/list: results; writes: 1

    class Meta:
        indexes = [models.Index(fields=["thread", "-id"], name="storeop_thread_newest")]
        permissions = [
            ("view_store", "Can read long-term memory (store namespaces and items)"),
            ("write_store", "Can put and delete long-term memory items"),
        ]

    def __str__(self) -> str:
        return f"{self.op} {self.namespace}/{self.key} by run {self.run_id}"
