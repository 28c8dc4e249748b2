"""API request (``*In``) and response (``*Out``) schemas, with explicit fields."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, TypeVar
from uuid import UUID

from ninja import Schema
from pydantic import BaseModel, ConfigDict, Field

from approvals.deadlines import DueState, due_state
from approvals.inputs import TaskCheckpointId, ThreadMetadata
from approvals.payloads import REASON_MAX_CHARS


class BodyIn(Schema):
    """A native API request body: a key it does not declare is a 422 naming it. Ignored, a misspelt
    ``action_arg`` approved the amount as proposed, a misspelt ``metdata`` started a thread no search finds,
    and a misspelt ``assignment`` made a user with no access (an outside tester's finds)."""

    model_config = ConfigDict(extra="forbid")


class ThreadIn(BodyIn):
    graph: str = Field(min_length=1, max_length=100)
    input: dict[str, Any] = Field(default_factory=dict)
    metadata: ThreadMetadata = Field(default_factory=dict)


class TaskSummaryOut(Schema):
    id: UUID
    thread_id: UUID
    graph: str
    node: str
    kind: str
    title: str
    status: str
    interrupt_id: str
    checkpoint_id: str
    checkpoint_ns: str
    created_at: datetime
    decided_at: datetime | None
    due_at: datetime | None
    # deadlines (approvals.deadlines.due_state): null when the task has no due time or is closed
    due_in_seconds: int | None = Field(default=None, description="Seconds until due; negative once overdue.")
    overdue: bool = False
    due_text: str | None = Field(default=None, description='"due in 3 h", "overdue 20 min"')
    escalated_at: datetime | None = None
    escalation_reason: str = ""
    escalated_to: str | None = Field(
        default=None, description="The group the escalation moved the task to; null when it moved nothing."
    )
    assigned_group: str | None = Field(default=None, description="The group the task is assigned (escalated) to.")

    @staticmethod
    def resolve_due_in_seconds(obj: Any) -> int | None:
        return _due(obj, "due_in_seconds", lambda state: state.seconds, None)

    @staticmethod
    def resolve_overdue(obj: Any) -> bool:
        return bool(_due(obj, "overdue", lambda state: state.overdue, False))

    @staticmethod
    def resolve_due_text(obj: Any) -> str | None:
        return _due(obj, "due_text", lambda state: state.text, None)

    @staticmethod
    def resolve_assigned_group(obj: Any) -> str | None:
        if isinstance(obj, dict | BaseModel):
            group: str | None = _built(obj, "assigned_group", None)
            return group
        return obj.assigned_group.name if obj.assigned_group_id is not None else None

    @staticmethod
    def resolve_escalated_to(obj: Any) -> str | None:
        if isinstance(obj, dict | BaseModel):
            group: str | None = _built(obj, "escalated_to", None)
            return group or None
        return obj.escalated_to or None


_T = TypeVar("_T")


def _built(summary: Any, name: str, default: Any) -> Any:
    """A field of a summary already built: a dict, or the schema itself. Django Ninja validates a returned
    schema once more against its response type, from its attributes: reading those as a task's left every
    item of ``GET /api/tasks`` not overdue, with no due text and no assigned group."""
    return summary.get(name, default) if isinstance(summary, dict) else getattr(summary, name, default)


def _due(task: Any, name: str, pick: Callable[[DueState], _T], default: _T) -> _T:
    """A deadline field of a task (computed now), or of a summary already built (kept as is)."""
    if isinstance(task, dict | BaseModel):
        built: _T = _built(task, name, default)
        return built
    state = due_state(task.due_at, remind_at=task.remind_at) if task.is_open else None
    return pick(state) if state is not None else default


class ThreadSummaryOut(Schema):
    """A thread in a list: no values and no tasks (``GET /api/threads/{id}`` has them)."""

    id: UUID
    graph: str
    status: str
    metadata: dict[str, Any]
    checkpoint_id: str
    error: str
    created_at: datetime
    updated_at: datetime


class ThreadPageOut(Schema):
    items: list[ThreadSummaryOut]
    next_cursor: str | None


class ThreadOut(Schema):
    id: UUID
    graph: str
    status: str
    metadata: dict[str, Any]
    values: dict[str, Any]
    checkpoint_id: str
    error: str
    created_at: datetime
    updated_at: datetime
    pending_tasks: list[TaskSummaryOut]
    run_id: UUID | None = Field(
        default=None,
        description="The run to watch: the run a start queued (POST), or the thread's queued or running run "
        "while it is busy (GET: a start, a resume after a decision, a retry); null when no run is active.",
    )
    state_unreadable: str = Field(
        default="",
        description="Why the graph cannot load this state (a stored value its state model refuses, a graph that "
        "fails to build); empty when it can. When set, values are as stored and next/tasks are unknown.",
    )


class CheckpointOut(Schema):
    checkpoint_id: str
    parent_id: str
    step: int
    source: str
    created_at: str
    next: list[str]
    values: dict[str, Any]
    state_unreadable: str = Field(
        default="",
        description="Why the graph cannot load this state (a stored value its state model refuses, a graph that "
        "fails to build); empty when it can. When set, values are as stored and next/tasks are unknown.",
    )


class DecisionOut(Schema):
    id: UUID
    task_id: UUID
    outcome: str
    reason: str
    actor: str
    state_patch: dict[str, Any] | None
    resume_value: Any
    checkpoint_id: str
    run_id: UUID | None
    created_at: datetime
    meaning: str
    signer_name: str
    evidence_digest: str
    superseded: bool = Field(
        default=False,
        description="An approval a later proposal superseded: it approved something else and no longer counts.",
    )
    run_status: str | None = Field(
        default=None, description="With ?wait=: the resumed run's status when the response was sent."
    )


class RefusalOut(Schema):
    rule: str = Field(description="The policy rule, as the refusal's 403 and the audit trail name it.")
    message: str


class TaskOut(TaskSummaryOut):
    payload: Any
    payload_digest: str
    evidence_digest: str = Field(description="Send it back with the decision to bind it to what you saw.")
    required_approvals: int
    approvals: list[DecisionOut]
    response_schema: Any | None
    payload_kind: str
    allowed_decisions: list[str]
    can_decide: bool = Field(
        description="The task is open, you may decide it, you have not signed it yet, nobody else holds its claim, "
        "its graph still has the node it waits in and can load the state it paused at (else decide_refused says "
        "so)."
    )
    decide_refused: RefusalOut | None = Field(
        default=None,
        description="Why you may not decide this task your role and assignments let you decide (rule "
        "separation_of_duties.signed_once: your signature stands and the task waits for others; rule "
        "graph.node_gone: the registered graph no longer has the node it waits in; rule graph.state_unreadable: "
        "the graph cannot load the state it paused at, see state_unreadable; a decision is refused with a 409 in "
        "these words); null otherwise.",
    )
    claimed_by: str | None = Field(
        description="Who else holds the task's active claim (null: nobody, or you): a decision waits for its release."
    )
    approvals_remaining: int = Field(description="Approvals the task still waits for.")
    approve_refused: RefusalOut | None = Field(
        description="Why an approval from you would be refused now (it would complete the task and a rule keeps "
        "it from you: the approver role, separation of duties); null when you may approve."
    )
    state: dict[str, Any] | None
    state_unreadable: str = Field(
        default="",
        description="Why the graph cannot load this state (a stored value its state model refuses, a graph that "
        "fails to build); empty when it can. When set, values are as stored and next/tasks are unknown.",
    )


class TaskPageOut(Schema):
    items: list[TaskSummaryOut]
    next_cursor: str | None


class DecisionIn(BodyIn):
    decision: Literal["approve", "reject", "edit", "respond"]
    reason: str = Field(default="", max_length=REASON_MAX_CHARS)
    checkpoint_id: TaskCheckpointId | None = Field(
        default=None,
        description="The checkpoint the reviewer saw (the task's checkpoint_id); a stale one is refused with 409.",
    )
    edits: dict[str, Any] | None = Field(default=None, description="State values to change (validated).")
    action_args: dict[str, Any] | None = Field(default=None, description="Edited arguments of the proposed action.")
    message: str | None = Field(default=None, max_length=20000, description="Free-text response.")
    decisions: list[dict[str, Any]] | None = Field(
        default=None, description="One decision per tool call, for LangChain HITL requests."
    )
    resume: Any = Field(default=None, description="The exact resume value, for callers that know the graph's contract.")
    evidence_digest: str | None = Field(
        default=None,
        max_length=64,
        description="The task's evidence_digest as you saw it; refused with 409 if it changed.",
    )
    password: str | None = Field(
        default=None, max_length=512, description="Re-entered to sign when your sign-in is older than the window."
    )
    otp: str | None = Field(default=None, max_length=16, description="Or a one-time code from your OTP device.")


class AuditEventOut(Schema):
    id: int
    chain: int  # the hash chain it links in (approvals/audit.py)
    at: datetime
    actor: str
    action: str
    subject_type: str
    subject_id: str
    thread_id: UUID | None
    graph: str
    details: dict[str, Any]
    prev_hash: str
    hash: str


class RunOut(Schema):
    id: UUID
    thread_id: UUID
    kind: str
    status: str
    attempts: int
    error: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    # Set when an operator cancelled the run (approvals.run_cancel).
    cancel_action: str = ""
    cancelled_by: str = ""
    cancel_reason: str = ""


class EffectOut(Schema):
    key: str = Field(description="The idempotency key the provider was called with.")
    name: str
    status: str = Field(
        description="started (called, no result recorded yet), done, failed (the provider did not act) or "
        "unknown (it may have: a timeout, a connection cut mid-request; a retry asks it again under the same key)"
    )
    uncertain: bool = Field(
        description="Whether the provider may have acted with no outcome recorded: the status is unknown, "
        "or started by a run that has ended (its process stopped mid-call). Retrying or continuing the "
        "thread asks the provider again under the same key."
    )
    calls: int
    result: Any = Field(description="The recorded result, masked as you may see the thread's state.")
    error: str
    run_id: UUID | None
    created_at: datetime
    completed_at: datetime | None

    @staticmethod
    def resolve_uncertain(obj: Any) -> bool:
        return bool(obj.outcome == "unknown")


class GraphOut(Schema):
    name: str
    description: str
    state_schema: dict[str, Any]
