"""What a principal may do with an approval task now, by the rules ``services.task_decide`` enforces.

The service refuses by these rules; the console asks them before it offers a control, and the API's task
view returns them, so no surface offers a signature the service then refuses. One count of approvals
(a decision whose meaning is "approved") serves all three, and the bulk results. A task waiting in a node
its graph no longer has (``node_gone_refusal``), or paused at a checkpoint the graph cannot load
(``state_unreadable_refusal``), is refused to everyone, and said so on each surface (``decide_refusal``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count, Q

from approvals import permissions
from approvals.claims import claim_for
from approvals.gate_policy import gate_policy
from approvals.models import (
    ApprovalTask,
    AuditAction,
    AuditEvent,
    Decision,
    Outcome,
    SignatureMeaning,
    TaskClaim,
    TaskStatus,
)
from runtime.models import Branch, Run, RunKind, Thread
from runtime.registry import GraphEntry, UnknownGraph, graph_get, graph_is_external, graph_is_registered
from runtime.state import thread_state_read
from runtime.state_schema import pydantic_fields

FINAL_APPROVER_RULE = "quorum.final_approver"
NODE_GONE_RULE = "graph.node_gone"
STATE_UNREADABLE_RULE = "graph.state_unreadable"


@dataclass(frozen=True)
class Refusal:
    """Why the service would refuse a decision: the policy rule it names and the words it answers with."""

    rule: str
    message: str


@dataclass(frozen=True)
class TaskAbilities:
    decide: bool  # the task is open, the policy lets them decide it, and they have not signed it yet
    approvals: int  # approvals given so far
    remaining: int  # approvals the task still waits for
    approve_refused: Refusal | None  # their approval would complete the quorum, and a rule keeps it from them
    claim_holder: str  # who else holds the task's active claim ("" if nobody, or they do): a decision waits for it
    # Why they may not decide a task they otherwise could (``decide`` is False): its node is gone from the graph,
    # or the graph cannot load the state it paused at (``decide_refusal``).
    decide_refused: Refusal | None = None

    @property
    def decide_now(self) -> bool:
        """They may decide, and no one else's claim stands in the way (the service refuses while one does)."""
        return self.decide and not self.claim_holder


_UNREAD: Any = object()
# Said to whoever signed a task that waits for others (their signature stands): the service's 409, in its words.
SIGNED_ONCE = Refusal(
    "separation_of_duties.signed_once", "you have already signed this task; another approver must decide"
)


def proposes(decision: Decision) -> bool:
    """Whether ``decision`` changed what the task approves: an edit of the state or of the action's arguments
    (every surface records an approval with changed values as an edit: ``services._approval_with_edits``)."""
    return decision.outcome == Outcome.EDIT or bool(decision.state_patch)


def in_order(decisions: Iterable[Decision]) -> list[Decision]:
    """``decisions`` in the order they were made (one task's are serialised by its lock)."""
    return sorted(decisions, key=lambda d: (d.created_at is None, d.created_at or 0, str(d.pk)))


def proposal_current(decisions: Iterable[Decision]) -> Decision | None:
    """The last decision that proposed an edit: what an approval given now approves (with the edits before it)."""
    return next((d for d in reversed(in_order(decisions)) if proposes(d)), None)


def superseded(decisions: Iterable[Decision]) -> list[Decision]:
    """The approvals a later proposal superseded: they approved something else, so they no longer count,
    and their signers may sign the new proposal. They stay on record."""
    made = in_order(decisions)
    current = proposal_current(made)
    if current is None:
        return []
    before = made[: made.index(current)]
    return [d for d in before if d.meaning == SignatureMeaning.APPROVED and not proposes(d)]


def approvals_given(decisions: Iterable[Decision]) -> int:
    """Approvals of the current proposal: those given since the last edit proposed (or all, without one)."""
    made = in_order(decisions)
    current = proposal_current(made)
    standing = made if current is None else made[made.index(current) :]
    return sum(1 for d in standing if d.meaning == SignatureMeaning.APPROVED)


def signature_standing(user: permissions.Principal, decisions: Iterable[Decision]) -> Decision | None:
    """``user``'s decision that still stands on the task (they may not sign again), or None.

    One signature per person and proposal: a signer whose approval a later proposal superseded may approve
    the new one. A proposer or a rejecter has signed for good (the proposal carries their edit).
    """
    made = list(decisions)
    gone = {d.pk for d in superseded(made)}
    return next((d for d in reversed(in_order(made)) if d.actor_id == user.pk and d.pk not in gone), None)


def approvals_remaining(task: ApprovalTask, decisions: Iterable[Decision]) -> int:
    """Approvals ``task`` still waits for after its ``decisions``: none once it is closed (a rejection or a
    response decided it; it said 1 on a decided task)."""
    if not task.is_open:
        return 0
    return max(task.required_approvals - approvals_given(decisions), 0)


def separation_required(task: ApprovalTask) -> bool:
    return bool(
        task.required_approvals > 1
        or gate_policy(task.payload, task.kind).separation_of_duties
        or settings.GATEHOUSE_SEPARATION_OF_DUTIES
    )


def thread_started_by(thread: Thread, user: permissions.Principal) -> bool:
    """Whether ``user`` authored what ``thread``'s gate now asks about, outside a decision: created the thread,
    gave it input (a start run), sent it back to a checkpoint (a replay), wrote its state (a fork, an
    ``update_state``) or ran it on from a state they chose (a continue: a resume run no decision queued).
    Separation of duties keeps the final approval from them. Each was a way past it: creating the thread
    as one person and starting its run as another; forking the state with new values, continuing the run
    and approving the task it opened."""
    if thread.created_by_id == user.pk:
        return True
    runs = Run.objects.filter(thread_id=thread.pk, created_by_id=user.pk)
    started = Q(kind__in=_STARTING_KINDS) | Q(kind=RunKind.RESUME, decisions__isnull=True)
    return (
        runs.filter(started).exists()
        or Branch.objects.filter(thread_id=thread.pk, created_by_id=user.pk).exists()
        or AuditEvent.objects.filter(
            thread_id=thread.pk, actor_id=user.pk, action=AuditAction.THREAD_STATE_UPDATED
        ).exists()
    )


_STARTING_KINDS = (RunKind.START, RunKind.REPLAY)


def final_approval_refusal(
    user: permissions.Principal, task: ApprovalTask, earlier: list[Decision], thread: Thread | None = None
) -> Refusal | None:
    """Why ``user`` may not give the approval that completes ``task`` after the ``earlier`` decisions; ``thread``:
    the task's, when the caller has it locked (else read only where separation of duties needs it)."""
    if separation_required(task):
        if thread_started_by(thread or task.thread, user):
            return Refusal(
                "separation_of_duties.starter",
                "you started this thread, so you cannot give its final approval (separation of duties)",
            )
        if any(d.actor_id == user.pk and proposes(d) for d in earlier):
            return Refusal(
                "separation_of_duties.editor",
                "you edited this task's state or action, so you cannot give its final approval (separation of duties)",
            )
    if not permissions.final_approval_allowed(user, task, approvals_before=approvals_given(earlier)):
        return Refusal(FINAL_APPROVER_RULE, permissions.FINAL_APPROVER_NEEDED)
    return None


def node_gone_refusal(task: ApprovalTask) -> Refusal | None:
    """Why no decision may be signed for ``task``: the registered graph no longer has the node it waits in
    (renamed or removed by a deploy). Its thread cannot resume there: a decision was signed, queued and
    then refused by LangGraph, and a retry of that resume ended the thread without it."""
    if graph_is_external(task.graph):
        return None
    try:
        entry = graph_get(task.graph)
    except UnknownGraph:
        return None  # a graph no longer registered at all: its own rule (services.graph_runnable_check)
    missing = entry.node_missing(task.node, task.checkpoint_ns)
    if missing is None:
        return None
    return Refusal(
        NODE_GONE_RULE,
        f"the graph no longer has node {missing!r}; graph {task.graph!r} must have it again (its old name back) "
        "before this task can be decided, or the thread is cancelled (docs/schema-evolution.md, rule 5)",
    )


def state_unreadable_refusal(task: ApprovalTask, unreadable: str | None = None) -> Refusal | None:
    """Why no decision may be signed for ``task``: the graph cannot load the checkpoint its thread paused at
    (a stored value its state model now refuses, a graph that fails to build: ``CheckpointView.unreadable``).
    A resume loads that state first: a decision was signed and queued, and its run then failed. ``unreadable``:
    what the caller has read of that checkpoint already (else it is read here)."""
    if unreadable is None:
        if graph_is_external(task.graph) or not graph_is_registered(task.graph):
            return None  # no LangGraph state (an external task), or a graph no longer registered: its own rule
        if not _state_load_can_fail(graph_get(task.graph)):
            return None  # nothing to read for: the decision path reads no checkpoint it does not need
        view = thread_state_read(task.thread, task.checkpoint_id, resolve_blobs=False)
        unreadable = view.unreadable if view is not None else ""
    if not unreadable:
        return None
    return Refusal(
        STATE_UNREADABLE_RULE,
        f"{unreadable}; the thread cannot resume from it, so no decision can be signed: an operator forks the "
        "thread from an earlier checkpoint with corrected values, or cancels it",
    )


def _state_load_can_fail(entry: GraphEntry) -> bool:
    """Whether the graph may fail to load a state it stored: LangGraph validates a Pydantic state as it loads a
    checkpoint, upcasters run on an older one, and a factory builds the graph for each run. A TypedDict or
    dataclass state of a compiled graph loads as stored."""
    if entry.factory is not None or entry.upcasters:
        return True
    try:
        return pydantic_fields(entry.state_schema) is not None
    except Exception:  # noqa: BLE001 - a source whose schema cannot be told: read, as before
        return True


def decide_refusal(task: ApprovalTask, *, unreadable: str | None = None) -> Refusal | None:
    """Why nobody may decide ``task`` now, whatever their role: a decision signed would be one the thread cannot
    resume with (its node is gone from the graph, or the graph cannot load its state)."""
    return node_gone_refusal(task) or state_unreadable_refusal(task, unreadable)


def node_gone_warnings(entries: dict[str, GraphEntry]) -> list[str]:
    """One line per graph and node it no longer has that open tasks wait in, with how many: said as the
    registry loads (``graphs_check``, a worker's start), since nobody can decide them (``node_gone_refusal``)."""
    waiting = (
        ApprovalTask.objects.filter(status=TaskStatus.PENDING, graph__in=list(entries))
        .values_list("graph", "node", "checkpoint_ns")
        .annotate(count=Count("id"))
        .order_by()
    )
    gone: Counter[tuple[str, str]] = Counter()
    for graph, node, namespace, count in waiting:
        missing = entries[graph].node_missing(node, namespace)
        if missing is not None:
            gone[graph, missing] += count
    return [
        f"graph {graph!r} no longer has node {node!r}: {count} open task{'s' if count > 1 else ''} "
        f"{'wait' if count > 1 else 'waits'} there and cannot be decided until it has it again "
        "(docs/schema-evolution.md, rule 5)"
        for (graph, node), count in sorted(gone.items())
    ]


def task_abilities(
    user: permissions.Principal,
    task: ApprovalTask,
    decisions: Iterable[Decision] | None = None,
    *,
    claim: TaskClaim | None = _UNREAD,
    unreadable: str | None = None,
) -> TaskAbilities:
    """What ``user`` may do with ``task``; ``decisions``, ``claim`` (its active claim, or None) and ``unreadable``
    (``CheckpointView.unreadable`` of the state it paused at): what the caller has read of the task already."""
    made = list(task.decisions.all() if decisions is None else decisions)
    if claim is _UNREAD:
        claim = claim_for(task) if task.is_open else None
    holder = claim.user.get_username() if claim is not None and claim.user_id != user.pk else ""
    approvals = approvals_given(made)
    allowed = task.is_open and permissions.can_decide(user, task)
    signed = allowed and signature_standing(user, made) is not None
    decide = allowed and not signed
    gone = decide_refusal(task, unreadable=unreadable) if decide else (SIGNED_ONCE if signed else None)
    decide = decide and gone is None
    refused = None
    if decide and approvals + 1 >= task.required_approvals:
        refused = final_approval_refusal(user, task, made)
    return TaskAbilities(
        decide=decide,
        approvals=approvals,
        remaining=approvals_remaining(task, made),
        approve_refused=refused,
        claim_holder=holder,
        decide_refused=gone,
    )
