"""Writes of the approvals domain: start threads, open tasks, decide, retry.

Each service runs in one transaction with its audit event; Celery dispatch
happens after commit (``runtime.runs.run_enqueue``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps as django_apps
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from approvals import gateway, permissions
from approvals.abilities import (
    SIGNED_ONCE,
    approvals_given,
    final_approval_refusal,
    in_order,
    node_gone_refusal,
    proposal_current,
    proposes,
    separation_required,
    signature_standing,
    state_unreadable_refusal,
    superseded,
)
from approvals.audit import AuditEntry, audit_record, audit_record_all, audit_task, audit_thread, canonical
from approvals.claims import claim_check, claim_drop
from approvals.errors import Conflict, Forbidden, InvalidInput
from approvals.gate_policy import gate_deadline, gate_policy
from approvals.inputs import metadata_check
from approvals.intent import args_signed, edited_args, proposed_action, signed_command, signed_digest
from approvals.models import ApprovalTask, AuditAction, AuditEvent, Decision, TaskKind, TaskStatus
from approvals.outbound.outbox import task_opening
from approvals.payloads import (
    NOT_GIVEN,
    REASON_MAX_CHARS,
    DecisionRequest,
    action_args_check,
    decisions_allowed,
    edits_proposed,
    payload_title,
    resume_value_build,
)
from approvals.redaction import (
    MASK,
    TEXT_MASK,
    HiddenEdited,
    hidden_kept,
    holds_message,
    is_message,
    redact,
    redacted_values,
    strings_masked,
)
from approvals.task_rows import DecisionGrounds, decision_grounds, task_closing, tasks_pending
from runtime import rows
from runtime.deadlines import duration_human
from runtime.models import Run, RunKind, Thread, ThreadStatus
from runtime.registry import UnknownGraph, graph_get, graph_is_external, graph_is_registered, graph_names
from runtime.runs import PendingInterrupt, ThreadBusy, retry_command, retry_input, run_enqueue, thread_start_enqueue
from runtime.state import CheckpointView, thread_state_read
from runtime.state_schema import FieldError, has_validators, values_validate
from runtime.storable import NotStorable, value_storable_check
from runtime.threads import thread_cancel, thread_stopped_midway

log = logging.getLogger(__name__)

# How a decided task of a kind with no graph to resume completes, by task kind
# (approvals.external registers the external kind). Runs in the decision's transaction.
TaskCompleter = Callable[[ApprovalTask, Decision, User], None]
task_completers: dict[str, TaskCompleter] = {}


def payload_digest(payload: Any) -> str:
    return hashlib.sha256(canonical(payload).encode()).hexdigest()


def graph_entry(graph: str) -> Any:
    """The registered graph named ``graph``, or a 422 naming ``graph`` that lists those there are."""
    try:
        return graph_get(graph)
    except UnknownGraph:
        raise InvalidInput(f"unknown graph {graph!r} (registered: {', '.join(graph_names())})", field="graph") from None


@transaction.atomic
def thread_start(*, actor: User, graph: str, input: dict[str, Any], metadata: dict[str, Any]) -> tuple[Thread, Run]:
    permissions.require(actor, "runtime.start_thread", "start threads")
    entry = graph_entry(graph)
    permissions.require_start(actor, graph)
    try:
        values_validate(entry.input_schema, input, prefix="input", complete=entry.input_declared)
    except FieldError as exc:
        raise InvalidInput(exc.message, field=exc.field) from None
    metadata_check(metadata)  # the API's schema checks it too; the console's form has no schema
    thread, run = thread_start_enqueue(graph=graph, metadata=metadata, input=input, created_by=actor)
    details = {"run": str(run.id), "input": input, "metadata": metadata}
    audit_thread(thread=thread, actor=actor, action=AuditAction.THREAD_STARTED, details=details)
    return thread, run


def graph_runnable_check(graph: str, *, field: str = "thread_id") -> None:
    """Refuse to queue a run of a graph this instance no longer registers (a thread outlives its graph's
    registration): the worker could not run it, and whatever was recorded before would be left half-done."""
    if graph and not graph_is_external(graph) and not graph_is_registered(graph):
        raise Conflict(
            f"graph {graph!r} is not registered in this instance (GATEHOUSE_GRAPHS): its threads can be read, not run",
            field=field,
        )


@transaction.atomic
def thread_retry(*, actor: User, thread_id: Any) -> Run:
    thread = permissions.thread_get_for(actor, thread_id)
    permissions.require_retry(actor, thread)
    graph_runnable_check(thread.graph)
    thread = Thread.objects.select_for_update().get(pk=thread.pk)
    if thread.status != ThreadStatus.FAILED and not thread_stopped_midway(thread):
        raise Conflict(
            "only a failed thread, or one whose run an operator cancelled with steps left, can be retried;"
            f" this one is {thread.status}" + (" with no step left" if thread.status == ThreadStatus.IDLE else ""),
            field="thread_id",
        )
    command = retry_command(thread=thread)
    _retried_resume_check(command)
    try:
        run = run_enqueue(
            thread=thread, kind=RunKind.RETRY, input=retry_input(thread=thread), command=command, created_by=actor
        )
    except ThreadBusy as exc:
        raise Conflict(str(exc), field="thread_id") from None
    details = {"run": str(run.id), "reapplies": (run.command or {}).get("retry_of")}
    audit_thread(thread=thread, actor=actor, action=AuditAction.THREAD_RETRIED, details=details)
    return run


def _retried_resume_check(command: dict[str, Any] | None) -> None:
    """A retry re-applies the signed decisions of the resume it retries: refused while a task they decide
    waits in a node the graph no longer has. The retry found the answer pending nowhere, took it for one
    already stored, and ended the thread without it (``runtime.executor._recovery``)."""
    if not command or command.get("resume") is None:
        return
    for task in ApprovalTask.objects.filter(decisions__run_id=command["retry_of"]).distinct():
        gone = node_gone_refusal(task)
        if gone is not None:
            raise Conflict(f"the retry would drop a signed decision: {gone.message}", field="thread_id")


def tasks_open(
    *, run: Run, interrupts: list[PendingInterrupt], audited_first: AuditEntry | None = None
) -> list[ApprovalTask]:
    """Turn a run's pending interrupts into approval tasks, idempotently.

    Called inside the transaction that records the run's outcome. A pending
    task for the same interrupt id and payload is kept (a redelivered run
    changes nothing); one whose payload changed, or whose interrupt is no
    longer pending, is superseded. ``audited_first``: an event (the run's pause) appended to the
    trail just before the opened tasks' ``task.opened`` events, in the same statement.
    """
    thread = run.thread
    opened: list[ApprovalTask] = []
    audited = [] if audited_first is None else [audited_first]

    def audit_flush() -> None:
        # What is collected goes to the trail before anything else is audited, so events keep their order.
        with task_opening(*opened):  # the outbox's task.opened is described from these rows, not read back
            audit_record_all(audited)
        audited.clear()

    current_ids = {i.interrupt_id for i in interrupts}
    # One read of the thread's pending tasks serves the stale check and every interrupt below.
    pending: dict[str, ApprovalTask] = {}
    for task in tasks_pending(thread):
        if task.interrupt_id in current_ids and task.interrupt_id not in pending:
            pending[task.interrupt_id] = task
        else:
            audit_flush()
            task_supersede(task, reason="the thread moved on without this interrupt")
    for item in interrupts:
        digest = payload_digest(item.value)
        existing = pending.pop(item.interrupt_id, None)
        if existing is not None and existing.payload_digest == digest:
            if existing.checkpoint_id != item.checkpoint_id:
                existing.checkpoint_id = item.checkpoint_id
                existing.save(update_fields=["checkpoint_id"])
            continue
        if existing is not None:
            audit_flush()
            task_supersede(existing, reason="the interrupt was raised again with a different payload")
        _gate_undeclared_warn(thread.graph, item.node)
        due_at, remind_at = _deadline_times(thread.graph, item.node, item.value)
        policy = gate_policy(item.value)
        task = rows.row_insert(
            ApprovalTask(
                thread=thread,
                run=run,
                graph=thread.graph,
                node=item.node,
                kind=TaskKind.BREAKPOINT if item.kind == "breakpoint" else TaskKind.INTERRUPT,
                interrupt_id=item.interrupt_id,
                checkpoint_id=item.checkpoint_id,
                checkpoint_ns=item.checkpoint_ns,
                payload=item.value,
                payload_digest=digest,
                response_schema=item.response_schema,
                title=payload_title(item.value, item.node),
                due_at=due_at,
                remind_at=remind_at,
                required_approvals=policy.approvals_required,
                correlation_key=policy.correlation_key_indexed,
            )
        )
        audited.append(
            AuditEntry.about_task(
                task,
                AuditAction.TASK_OPENED,
                actor_label="runtime",
                details={
                    "node": task.node,
                    "interrupt_id": task.interrupt_id,
                    "checkpoint_id": task.checkpoint_id,
                    "checkpoint_ns": task.checkpoint_ns,
                    "kind": task.kind,
                    "payload_digest": digest,
                },
            )
        )
        opened.append(task)
    audit_flush()
    return opened


_undeclared_warned: set[tuple[str, str]] = set()
_undeclared_lock = threading.Lock()


def _gate_undeclared_warn(graph: str, node: str) -> None:
    """A pause at a node the graph's ``gatehouse.gates`` does not list still opens its task (a lost pause
    would hang the thread), but the file is wrong: the node is missing from the admin's gate menus and
    webhook endpoints cannot name it. Said once per graph and node, not on every pause."""
    try:
        entry = graph_get(graph)
    except UnknownGraph:
        return
    # A static breakpoint's node is the comma-joined nodes it stopped before.
    if all(entry.gate_is_declared(name) for name in node.split(",")):
        return
    with _undeclared_lock:
        if (graph, node) in _undeclared_warned:
            return
        _undeclared_warned.add((graph, node))
    log.warning(
        "graph %r paused at node %r, which is not among its declared gates (%s): the task is opened; "
        "add %r to gatehouse.gates.%s in langgraph.json",
        graph,
        node,
        ", ".join(entry.declared_gates or ()),
        node,
        graph,
    )


def _deadline_times(graph: str, node: str, payload: Any) -> tuple[datetime | None, datetime | None]:
    """(due, remind) times of a task opening now, by the gate's deadline (approvals.gate_policy.gate_deadline)."""
    deadline = gate_deadline(graph=graph, node=node, payload=payload)
    if deadline is None or deadline.due_seconds is None:
        return None, None
    due_at = timezone.now() + timedelta(seconds=deadline.due_seconds)
    remind = deadline.remind_before_seconds
    return due_at, (due_at - timedelta(seconds=remind) if remind else None)


def task_supersede(task: ApprovalTask, *, reason: str, details: dict[str, Any] | None = None) -> None:
    """A pending task that can no longer be answered (the thread moved on, or to another branch); audited."""
    task.status = TaskStatus.SUPERSEDED
    task.save(update_fields=["status"])
    audit_task(
        task=task,
        actor=None,
        actor_label="runtime",
        action=AuditAction.TASK_SUPERSEDED,
        details={"reason": reason, **(details or {})},
    )


@dataclass(frozen=True)
class Signer:
    """How the deciding principal proved who they are, for electronic-signature rules."""

    authenticated_at: datetime | None = None  # last login (sessions) or now (API tokens)
    password: str | None = None  # re-entered to sign when the login is older than the window
    otp: str | None = None  # or a one-time code from a confirmed django-otp device
    # A re-authentication the caller verified already, once for many decisions (approvals.bulk):
    # it signs while it is inside the window, as a fresh sign-in does.
    reauthenticated_at: datetime | None = None
    # What proved it: "session" (a signed-in browser), "token" (an API token: each request presents the
    # secret, so no sign-in ages), or "" (a machine principal: the deadline sweep, a webhook).
    via: str = ""


def evidence_digest(*, task: ApprovalTask, redaction: list[str], decisions: Iterable[Decision] | None = None) -> str:
    """What a decision is bound to: the payload, the checkpoint, the redaction the signer saw under, and the
    proposal on the task (``decisions``: those made on it so far, which every surface has read already;
    read here if not given).

    A signer who sees masked values is bound to the payload as shown: a digest
    of the unmasked payload would let them hash candidates for a masked value.
    The proposal is named by its decision's id, which says nothing of a value
    masked for the signer; a new proposal changes the digest, so an approval
    sent with the digest of the page before it is refused instead of counting
    for an amount its signer never saw.
    """
    proposal = proposal_current(task.decisions.all() if decisions is None else decisions)
    return _evidence_digest(task, redaction, None if proposal is None else proposal.pk)


def _evidence_digest(task: ApprovalTask, redaction: list[str], proposal: Any) -> str:
    payload = payload_digest(redact(task.payload, redaction)[0]) if redaction else task.payload_digest
    evidence = {"payload": payload, "checkpoint": task.checkpoint_id, "redaction": sorted(redaction)}
    if proposal is not None:  # a task without one keeps the digest it had before proposals were part of it
        evidence["proposal"] = str(proposal)
    return hashlib.sha256(canonical(evidence).encode()).hexdigest()


def _evidence_refusal(task: ApprovalTask, redaction: list[str], decisions: list[Decision], seen: str) -> Conflict:
    """Why a decision sent with the evidence digest ``seen`` is refused: a proposal made since, when ``seen`` is
    the digest of the task before it (saying whose), else the task's evidence changed."""
    proposals = [d for d in in_order(decisions) if proposes(d)]
    before = [None, *(d.pk for d in proposals[:-1])]
    if proposals and any(_evidence_digest(task, redaction, p) == seen for p in before):
        last = proposals[-1]
        return Conflict(
            f"a new proposal was made since you viewed this task (by {last.signer_name or last.actor_id}, decision "
            f"{last.pk}): your approval would count for what it proposes, which you have not seen; reload the task",
            field="evidence_digest",
        )
    return Conflict("the evidence you reviewed no longer matches this task; reload it", field="evidence_digest")


def redaction_policy(actor: User, task: ApprovalTask) -> list[str]:
    if permissions.can(actor, "approvals.view_sensitive"):
        return []
    return gateway.sensitive_paths(task.graph)  # one lookup for graphs and external sources alike


def _reason_required(task: ApprovalTask, outcome: str) -> bool:
    return reason_required(task.graph, task.node, outcome)


def reason_required(graph: str, gate: str, outcome: str) -> bool:
    """The graph's reason policy for this gate (langgraph.json "gatehouse": {"reasons": ...})."""
    try:
        return graph_get(graph).reason_required(gate=gate, outcome=outcome)
    except UnknownGraph:
        return outcome in ("reject", "edit")  # a graph no longer registered: the strict default


def task_decide(*, actor: User, task_id: Any, request: DecisionRequest, signer: Signer | None = None) -> Decision:
    """Record ``actor``'s decision; resume the thread once the task's quorum is met.

    Refusals by policy (separation of duties, final-approval rights, failed
    re-authentication) are audited in their own transaction, since the
    decision's transaction rolls back.
    """
    try:
        return _task_decide(actor=actor, task_id=task_id, request=request, signer=signer or Signer())
    except POLICY_REFUSALS as refusal:
        refusal.actor, refusal.task_id, refusal.outcome = actor, task_id, request.outcome
        refusal_audit(refusal)
        raise


class _Refused:
    """What a refusal by policy carries for its ``decision.refused`` event (``refusal_audit``)."""

    message: str

    def _refused_on(self, rule: str, task: ApprovalTask) -> None:
        self.rule = rule
        self.thread_id = task.thread_id
        self.graph = task.graph
        self.actor: User | None = None  # who was refused, on what and which outcome (set by task_decide)
        self.task_id: Any = task.pk
        self.outcome = ""


class PolicyRefusal(_Refused, Forbidden):
    def __init__(self, message: str, *, rule: str, task: ApprovalTask, field: str | None = None) -> None:
        Forbidden.__init__(self, message, field=field)
        self._refused_on(rule, task)


class PolicyConflict(_Refused, Conflict):
    """A refusal by policy answered 409, audited as ``PolicyRefusal`` is: a person signing a task a second time
    (one signature per person and proposal). It wrote no ``decision.refused``, so an editor trying the final
    approval of their own proposal left no trace, though "refusals are audited"."""

    def __init__(self, message: str, *, rule: str, task: ApprovalTask, field: str | None = None) -> None:
        Conflict.__init__(self, message, field=field)
        self._refused_on(rule, task)


POLICY_REFUSALS = (PolicyRefusal, PolicyConflict)  # audited (``decision.refused``) on every surface


def refusal_audit(refusal: PolicyRefusal | PolicyConflict) -> None:
    """Record ``refusal`` (``decision.refused``) in a transaction of its own, or a savepoint inside the
    caller's. A caller whose transaction rolls back with the refusal (``/lg/`` creates a run and its
    decision in one) records it again after the rollback: refusals are audited on every surface."""
    with transaction.atomic():
        audit_record(
            actor=refusal.actor,
            action=AuditAction.DECISION_REFUSED,
            subject_type="task",
            subject_id=refusal.task_id,
            thread_id=refusal.thread_id,
            graph=refusal.graph,
            details={"rule": refusal.rule, "message": refusal.message, "outcome": refusal.outcome},
        )


APPROVING = ("approve", "edit")
VETOING = ("reject", "respond")  # the action not taken: either closes the task as a rejection


@transaction.atomic
def _task_decide(*, actor: User, task_id: Any, request: DecisionRequest, signer: Signer) -> Decision:
    # One statement finds the task (404 if not visible) and locks it with its thread.
    task = permissions.task_get_for(actor, task_id, lock=True)
    permissions.require_decide(actor, task)
    thread = task.thread
    if task.status != TaskStatus.PENDING:
        raise Conflict(_closed_for(actor, task), field="task_id")
    if request.checkpoint_id is not None and request.checkpoint_id != task.checkpoint_id:
        raise Conflict(
            f"stale view: you saw checkpoint {request.checkpoint_id}, the task is at {task.checkpoint_id}; reload",
            field="checkpoint_id",
        )
    if thread.status != ThreadStatus.INTERRUPTED or thread.checkpoint_id != task.checkpoint_id:
        raise Conflict("the thread has moved on since this task opened; reload it", field="checkpoint_id")
    gone = node_gone_refusal(task)  # nothing signed or queued that the thread could not resume with
    if gone is not None:
        raise Conflict(gone.message, field="task_id")
    # One statement after the lock (a snapshot that sees what other signers committed while we waited):
    # the claim, the earlier decisions and whether sibling tasks wait.
    grounds = decision_grounds(task)
    own_claim = claim_check(actor, grounds.claim)  # someone else's active claim refuses, on every surface
    redaction = redaction_policy(actor, task)
    evidence = evidence_digest(task=task, redaction=redaction, decisions=grounds.decisions)
    if request.evidence_digest is not None and request.evidence_digest != evidence:
        raise _evidence_refusal(task, redaction, grounds.decisions, request.evidence_digest)
    if request.outcome == "approve" and edits_proposed(request):
        request = _approval_with_edits(task, request)
    if len(request.reason) > REASON_MAX_CHARS:
        # Every surface's limit, here where every surface passes (the console's form had none: a 5,000-character
        # reason was kept, and the pages showing it grew tens of thousands of pixels wide).
        raise InvalidInput(
            f"a reason is at most {REASON_MAX_CHARS} characters (got {len(request.reason)})", field="reason"
        )
    if _reason_required(task, request.outcome) and not request.reason.strip():
        raise InvalidInput(f"a reason is required to {request.outcome}", field="reason")
    earlier = in_order(grounds.decisions)
    if signature_standing(actor, earlier) is not None:
        # A signer whose approval a later proposal superseded may approve the new one (abilities.signature_standing).
        raise PolicyConflict(SIGNED_ONCE.message, rule=SIGNED_ONCE.rule, task=task, field="task_id")
    _storable_check(request)
    request = replace(request, state_patch=_hidden_kept(request.state_patch, thread.values, redaction))
    at = _TaskCheckpoint(task)  # read once, and only if a check of the edits needs it
    state_patch = _state_patch_check(task, request, at=at, redaction=redaction)
    if state_patch and grounds.checkpoint_sibling:
        _sibling_edits_refuse(task, state_patch)
    resume_value = resume_value_build(
        payload=task.payload,
        task_kind=task.kind,
        response_schema=task.response_schema,
        request=request,
        reviewer=actor.get_username(),
    )
    _storable_or_refuse(resume_value, "resume")
    # Nor one the thread could not load its state to resume with (a read of the checkpoint: once the
    # decision is otherwise valid, so a refused one does not pay for it).
    unreadable = state_unreadable_refusal(task, at.unreadable)
    if unreadable is not None:
        raise Conflict(unreadable.message, field="task_id")
    signed_action = _signed_action(task, request.outcome, state_patch, resume_value, earlier)
    proposes_edit = bool(state_patch) or request.action_args is not None or request.outcome == "edit"
    counts, final = _quorum_position(task, request, earlier, actor=actor, proposes_edit=proposes_edit, thread=thread)
    # Every outcome that can close the task is signed: a response decides it as a rejection does.
    reauthenticated_at = signature_check(actor, signer, task) if request.outcome in (*APPROVING, *VETOING) else None
    meaning = {"approve": "approved", "edit": "approved", "reject": "rejected"}.get(request.outcome, "reviewed")
    if request.outcome in APPROVING and not counts:
        meaning = "reviewed"
    # A final decision that resumes the graph is inserted already naming the run it queues below
    # (foreign keys are checked at commit), so only earlier decisions need their run set afterwards.
    waiting: list[Decision] | None = None
    if final and _resumes(task, request.outcome):
        waiting = _resume_waiting(thread, task, grounds)
    resume_run_id = uuid.uuid4() if waiting is not None else None
    # A final decision closes its task in the insert's statement (PostgreSQL; by the next one elsewhere).
    decision = rows.row_insert(
        Decision(
            run_id=resume_run_id,
            task=task,
            actor=actor,
            outcome=request.outcome,
            reason=request.reason,
            state_patch=state_patch,
            resume_value=resume_value,
            checkpoint_id=task.checkpoint_id,
            payload_digest=task.payload_digest,
            evidence_digest=evidence,
            redacted_paths=redaction,
            signer_name=actor.get_full_name() or actor.get_username(),
            meaning=meaning,
            reauthenticated_at=reauthenticated_at,
            signed_via=signer.via,
            signed_action=signed_action,
            signed_digest=signed_digest(
                interrupt_id=task.interrupt_id,
                checkpoint_id=task.checkpoint_id,
                resume=resume_value,
                update=state_patch,
                action=signed_action,
            ),
        ),
        along=task_closing(task) if final else None,
    )
    if own_claim is not None:
        claim_drop(task=task)  # the holder has signed: the task is free for the next signer (or done)
    approvals = approvals_given([*earlier, decision])
    quorum = {"approvals": approvals, "required": task.required_approvals, "met": final}
    proposal = _proposal_details(earlier, decision)
    made = AuditEntry(
        actor=actor,
        action=AuditAction.DECISION_MADE if final else AuditAction.DECISION_RECORDED,
        subject_type="task",
        subject_id=task.id,
        thread_id=thread.id,
        graph=thread.graph,
        details={
            "decision": str(decision.id),
            "outcome": request.outcome,
            "meaning": meaning,
            "signer": decision.signer_name,
            "signed_via": signer.via,
            "reason": request.reason,
            "state_patch": state_patch,
            # What the patched keys held before (the thread's values at this task's checkpoint, which it is at):
            # the trail alone shows an edit's before and after, as the decision page does.
            "state_before": _values_before(state_patch, thread.values),
            "resume": resume_value,
            "checkpoint_id": task.checkpoint_id,
            "payload_digest": task.payload_digest,
            "evidence_digest": evidence,
            "redacted_paths": redaction,
            "quorum": quorum,
            "signed_action": signed_action,
            "signed_digest": decision.signed_digest,
            **proposal,
        },
    )
    if resume_run_id is None:
        made.recorded()  # else with the resume run it queues, below: one statement
    if not final:
        return decision
    if task.kind in task_completers:
        task_completers[task.kind](task, decision, actor)
    elif task.kind == TaskKind.BREAKPOINT and request.outcome == "reject":
        _thread_cancel(thread, actor=actor, reason=request.reason)
    elif waiting is not None and resume_run_id is not None:
        signed = sorted([*waiting, decision], key=lambda d: d.created_at)  # in the order they were made
        decision.run = _resume_enqueue(
            thread, task.checkpoint_id, actor, signed, run_id=resume_run_id, audited_first=made
        )
    return decision


def _proposal_details(earlier: list[Decision], decision: Decision) -> dict[str, Any]:
    """What a decision's audit event says of the proposals on its task: the proposal it approves (or amends),
    named by its decision, signer and own edits; and, for a new proposal, the approvals it supersedes."""
    details: dict[str, Any] = {}
    current = proposal_current(earlier)
    if current is not None:
        details["proposal"] = {
            "decision": str(current.pk),
            "signer": current.signer_name,
            "state_patch": current.state_patch,
            "action_args": edited_args(current) or None,
        }
    if proposes(decision):
        gone = superseded([*earlier, decision])
        if gone:
            details["supersedes"] = [str(d.pk) for d in gone if current is None or d.created_at > current.created_at]
    return details


def _values_before(patch: dict[str, Any] | None, values: Any) -> dict[str, Any] | None:
    """The values the keys of ``patch`` held in ``values`` (a key it adds: null); None without a patch."""
    if not patch:
        return None
    held = values if isinstance(values, dict) else {}
    return {key: held.get(key) for key in patch}


def _approval_with_edits(task: ApprovalTask, request: DecisionRequest) -> DecisionRequest:
    """Approving with changed values is an edit, on every surface (the console's form already sent it so):
    the gate's reason policy for edits applies, and the history lists it under edits, not approvals."""
    if "edit" not in decisions_allowed(task.payload, task.kind, task.response_schema):
        raise InvalidInput(
            "this gate does not allow edits: approve without changing values",
            field="edits" if request.state_patch else "action_args",
        )
    return replace(request, outcome="edit")


def _quorum_position(
    task: ApprovalTask,
    request: DecisionRequest,
    earlier: list[Decision],
    *,
    actor: User,
    proposes_edit: bool,
    thread: Thread,
) -> tuple[bool, bool]:
    """(does this decision count as an approval, does it complete the task)."""
    if request.outcome in VETOING:
        # One rejection rejects, unless the gate asks for more ("rejections_required": N). A response (the
        # action not taken, the agent answered instead) vetoes as a rejection does: it closed a four-eyes
        # task at once, past a gate that asked for two rejections.
        needed = gate_policy(task.payload, task.kind).rejections_required
        return False, sum(1 for d in earlier if d.outcome in VETOING) + 1 >= needed
    if proposes_edit and separation_required(task):
        # Under separation of duties an edit is a proposal: someone else must approve it.
        return False, False
    if approvals_given(earlier) + 1 < task.required_approvals:
        return True, False
    refused = final_approval_refusal(actor, task, earlier, thread)
    if refused is not None:
        raise PolicyRefusal(refused.message, rule=refused.rule, task=task)
    return True, True


class SignatureRefused(Forbidden):
    def __init__(self, message: str, *, rule: str, field: str) -> None:
        super().__init__(message, field=field)
        self.rule = rule


def signature_proof(actor: User, signer: Signer) -> datetime | None:
    """When ``signer`` re-authenticated (None: the sign-in is fresh enough); ``SignatureRefused`` if due and not done.

    Requires the password (or a one-time code) again when the sign-in is older than the window.
    """
    window = timedelta(seconds=settings.GATEHOUSE_REAUTH_SECONDS)
    if signer.authenticated_at is not None and timezone.now() - signer.authenticated_at <= window:
        return None
    if signer.reauthenticated_at is not None and timezone.now() - signer.reauthenticated_at <= window:
        return signer.reauthenticated_at
    if signer.otp or signer.password:
        _guesses_throttle(actor)
    if signer.otp:
        if _otp_verify(actor, signer.otp):
            return timezone.now()
        raise SignatureRefused("the one-time code is not valid", rule="signature.otp_failed", field="otp")
    if not signer.password:
        raise SignatureRefused(
            f"your sign-in is older than {duration_human(settings.GATEHOUSE_REAUTH_SECONDS)}: "
            "re-enter your password (or a one-time code) to sign this decision",
            rule="signature.reauthentication_required",
            field="password",
        )
    if not actor.check_password(signer.password):
        raise SignatureRefused(
            "the password is not correct", rule="signature.reauthentication_failed", field="password"
        )
    return timezone.now()


# A wrong password or code at the signature prompt: audited (decision.refused) by every caller.
_GUESSES = ("signature.reauthentication_failed", "signature.otp_failed")


def _guesses_throttle(actor: User) -> None:
    """Refuse a password or code after as many wrong ones in a row as sign-in allows (django-axes'
    ``AXES_FAILURE_LIMIT``), until its cool-off has passed since the last.

    The prompt checks the password itself, so axes never counted these: an unattended signed-in browser
    (the threat the prompt exists for) could guess without limit. The refusals are already in the audit
    trail; a re-authentication that succeeded since starts the count again."""
    cooloff = timedelta(hours=settings.AXES_COOLOFF_TIME)
    since = timezone.now() - cooloff
    succeeded = Decision.objects.filter(actor=actor, reauthenticated_at__gt=since).aggregate(
        at=Max("reauthenticated_at")
    )["at"]
    limit = settings.AXES_FAILURE_LIMIT
    guesses = list(
        AuditEvent.objects.filter(
            actor=actor, action=AuditAction.DECISION_REFUSED, at__gt=max(since, succeeded or since)
        )
        .filter(details__rule__in=_GUESSES)
        .order_by("-at")
        .values_list("at", flat=True)[:limit]
    )
    if len(guesses) >= limit:
        minutes = max(1, math.ceil((guesses[0] + cooloff - timezone.now()).total_seconds() / 60))
        raise SignatureRefused(
            f"{limit} wrong passwords or codes in a row: signing is locked for {minutes} more minute"
            f"{'s' if minutes != 1 else ''}",
            rule="signature.locked",
            field="password",
        )


def signature_check(actor: User, signer: Signer, task: ApprovalTask) -> datetime | None:
    try:
        return signature_proof(actor, signer)
    except SignatureRefused as exc:
        raise PolicyRefusal(exc.message, rule=exc.rule, task=task, field=exc.field) from None


def _otp_verify(actor: User, code: str) -> bool:
    if not django_apps.is_installed("django_otp"):
        return False
    from django_otp import devices_for_user

    return any(device.verify_token(code) for device in devices_for_user(actor, confirmed=True))


def _mask_refuse(value: Any, field: str) -> None:
    """A redacted value sent back must never overwrite the real one it hides."""
    if isinstance(value, str) and value == MASK:
        raise InvalidInput("this value is redacted for you and cannot be submitted as an edit", field=field)
    if isinstance(value, dict):
        for key, item in value.items():
            _mask_refuse(item, f"{field}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _mask_refuse(item, f"{field}[{index}]")


def _storable_or_refuse(value: Any, field: str) -> None:
    try:
        value_storable_check(value, field=field)
    except NotStorable as exc:
        raise InvalidInput(exc.message, field=exc.field) from None


def _storable_check(request: DecisionRequest) -> None:
    """Every value of a decision must be one the checkpointer stores exactly (see ``runtime.storable``).

    Checked before anything else about the values, so a number too large, a
    non-finite float or a NUL character gets a 422 naming its field instead of
    a resume run that fails half-applied.
    """
    _storable_or_refuse(request.reason, "reason")
    if request.message is not None:
        _storable_or_refuse(request.message, "message")
    if request.state_patch is not None:
        _storable_or_refuse(request.state_patch, "edits")
    if request.action_args is not None:
        _storable_or_refuse(request.action_args, "action_args")
    if request.decisions is not None:
        _storable_or_refuse(request.decisions, "decisions")
    if request.resume is not NOT_GIVEN:
        _storable_or_refuse(request.resume, "resume")


def _signed_action(
    task: ApprovalTask, outcome: str, state_patch: dict[str, Any] | None, resume_value: Any, earlier: list[Decision]
) -> Any:
    """The action an approving signer of a gate signed: the proposed action with the edits proposed before
    (``earlier``: the task's decisions so far, in order) and their own applied, as the resume applies them
    (``intent.task_signed_action``). An approval after an edit signs the edited action, not the graph's.

    Gatekeeper convention: a proposed action's argument is read from the state
    field of the same name, so a state edit of that field edits the argument
    too; an edited action argument (``action_args`` in the resume value, which
    the gate reads) overrides it. Editing one argument both ways with different
    values is refused: the signer must say one thing.
    """
    action = proposed_action(task)
    if action is None:
        return None
    proposed = action["args"] if isinstance(action.get("args"), dict) else {}
    patch = state_patch or {}
    edited = resume_value.get("action_args") if isinstance(resume_value, dict) else None
    edited = edited if isinstance(edited, dict) else {}
    for key in sorted(set(patch) & set(edited) & set(proposed)):
        if canonical(patch[key]) != canonical(edited[key]):
            raise InvalidInput(
                f"{key!r} is edited both as a state field and as an argument of {action['name']}, with different "
                "values; edit it once",
                field=f"action_args.{key}",
            )
    if outcome not in APPROVING:
        return None
    args = args_signed(action, [*(d.state_patch for d in earlier), patch], [*(edited_args(d) for d in earlier), edited])
    if action.get("args_schema") and (edited or set(patch) & set(proposed)):
        # A state edit feeds the argument of the same name: it must fit the action as an argument edit
        # must (an amount of -5 typed into the state was paid). What the graph proposed is its own.
        try:
            action_args_check(task.payload if isinstance(task.payload, dict) else {}, args)
        except InvalidInput as exc:
            key = (exc.field or "").removeprefix("action_args.").split(".")[0].split("[")[0]
            if key in patch and key not in edited:
                raise InvalidInput(exc.message, field=f"edits{(exc.field or '').removeprefix('action_args')}") from None
            raise
    return {"name": action["name"], "args": args}


def _hidden_kept(
    patch: dict[str, Any] | None, values: Any, redaction: list[str], *, field: str = "edits"
) -> dict[str, Any] | None:
    """``patch`` by an editor who sees ``redaction`` masked, with the hidden values they left alone kept
    (``approvals.redaction.hidden_kept``); a changed hidden value is a 422 naming it under ``field``."""
    if not patch or not redaction:
        return patch
    try:
        return hidden_kept(patch, values if isinstance(values, dict) else {}, redaction)
    except HiddenEdited as exc:
        raise InvalidInput(
            "this field is redacted for you, so you cannot change it: leave it as shown",
            field=f"{field}.{exc.location}",
        ) from None


def state_write_guard(
    *, actor: User, thread: Thread, values: dict[str, Any], field: str, checkpoint_id: str | None = None
) -> dict[str, Any]:
    """``values`` an ``actor`` writes into ``thread``'s state at ``checkpoint_id`` (its latest if None): an
    ``update_state``, a fork, a new run's input on a thread that has state. Held to what a decision's
    edits are held to.

    A write replaces each key's whole value, so leaving out a field one sees masked erased it, and sending
    the mask back stored the mask. Hidden values left alone (left out, or sent back as the mask) keep
    their stored value (read only for a writer who sees some masked); a different value where ``actor``
    sees a mask is a 422 naming it; and the mask itself is never stored, whoever sends it. Messages sent
    back as shown (their text masked by value: ``_messages_kept``) keep their stored text.
    """
    redaction = gateway.paths_masked_for(actor, thread.graph)
    if redaction and values:
        stored = thread_state_read(thread, checkpoint_id)
        values = _hidden_kept(values, stored.values if stored else {}, redaction, field=field) or values
        if stored is not None:
            values = _messages_kept(values, stored, thread=thread, redaction=redaction, field=field)
    _mask_refuse(values, field)
    return values


def _spoken_values(thread: Thread, redaction: list[str], view: CheckpointView) -> set[str]:
    """The values a reader who sees ``redaction`` masked was shown as ``TEXT_MASK`` in the message text of
    ``view``: as ``gateway.thread_state_for`` finds them (the view's values, writes and tasks' results, and
    what the thread carried elsewhere)."""
    seen = [view.values, view.writes, [t.result for t in view.tasks]]
    return redacted_values(seen, redaction) | gateway.thread_redacted_values(thread)


def _messages_kept(
    values: dict[str, Any], stored: CheckpointView, *, thread: Thread, redaction: list[str], field: str
) -> dict[str, Any]:
    """``values`` by a writer who sees ``redaction`` masked, with each message that quoted a masked value
    in its stored text and was sent back as shown (``I know ••• well``) holding its stored text again.

    Message text is masked by value (``approvals.redaction.state_redact``), so a reader who sent back the
    messages they read (``update_state`` with the same ids, a decision's edits) replaced the stored text
    with the masked text: the value was lost. A sent message is matched to the stored one with the same
    id (as ``add_messages`` matches it), or with no id, the one at the same location; each string in it
    that equals the stored message's string as shown is the stored string; any other string holding
    ``TEXT_MASK`` is a 422 naming it (the writer changed text around a value they cannot see). A message
    whose stored text quoted nothing masked, or with no stored match, is the writer's own text.
    """
    if not holds_message(values):
        return values  # no message written: nothing to read
    spoken = _spoken_values(thread, redaction, stored)
    if not spoken:
        return values
    by_id: dict[str, Any] = {}
    for message in _messages_in(stored.values):
        ident = message.get("id")
        if isinstance(ident, str) and ident:
            by_id.setdefault(strings_masked(ident, spoken), message)  # the id as the writer was shown it

    def walk(sent: Any, here: Any, location: str) -> Any:
        if is_message(sent):
            ident = sent.get("id")
            match = by_id.get(ident) if isinstance(ident, str) and ident else None
            if match is None and not ident and is_message(here) and not here.get("id"):
                match = here
            if match is None:
                return sent
            shown = strings_masked(match, spoken)
            return sent if shown == match else _text_kept(sent, shown, match, location)
        if isinstance(sent, dict):
            before = here if isinstance(here, dict) else {}
            return {k: walk(v, before.get(k), f"{location}.{k}") for k, v in sent.items()}
        if isinstance(sent, list):
            items = here if isinstance(here, list) else []
            return [walk(v, items[i] if i < len(items) else None, f"{location}[{i}]") for i, v in enumerate(sent)]
        return sent

    kept: dict[str, Any] = walk(values, stored.values, field)
    return kept


def _messages_in(value: Any) -> list[dict[str, Any]]:
    if is_message(value):
        return [value]
    if isinstance(value, dict):
        return [m for v in value.values() for m in _messages_in(v)]
    if isinstance(value, list):
        return [m for v in value for m in _messages_in(v)]
    return []


_NOTHING: Any = object()


def _text_kept(sent: Any, shown: Any, stored: Any, location: str) -> Any:
    """``sent`` (a message, or a part of one) with each string that equals ``shown`` (the stored part as the
    writer was shown it) being the ``stored`` one; a string that differs and holds ``TEXT_MASK`` is refused."""
    if isinstance(sent, str):
        if isinstance(shown, str) and sent == shown:
            return stored
        if TEXT_MASK in sent:
            raise InvalidInput(
                f"this message's text shows values redacted for you as {TEXT_MASK}: send the message back as "
                f"shown to keep it, or write text without {TEXT_MASK}",
                field=location,
            )
        return sent
    if isinstance(sent, dict):
        shown_d = shown if isinstance(shown, dict) else {}
        stored_d = stored if isinstance(stored, dict) else {}
        return {
            k: _text_kept(v, shown_d.get(k, _NOTHING), stored_d.get(k, _NOTHING), f"{location}.{k}")
            for k, v in sent.items()
        }
    if isinstance(sent, list):
        shown_l = shown if isinstance(shown, list) else []
        stored_l = stored if isinstance(stored, list) else []
        return [
            _text_kept(
                v,
                shown_l[i] if i < len(shown_l) else _NOTHING,
                stored_l[i] if i < len(stored_l) else _NOTHING,
                f"{location}[{i}]",
            )
            for i, v in enumerate(sent)
        ]
    return sent


class _TaskCheckpoint:
    """The state at ``task``'s checkpoint, read when a check first asks for it and then kept.

    The decision POST is a hot path (docs/performance.md): it reads the checkpoint only for edits whose
    check needs it (messages written back by a writer who sees values masked, a state with Pydantic
    validators), and the unreadable-state check reuses that read instead of making its own.
    """

    def __init__(self, task: ApprovalTask) -> None:
        self._task = task
        self._read = False
        self._view: CheckpointView | None = None

    @property
    def view(self) -> CheckpointView | None:
        if not self._read:
            self._view = thread_state_read(self._task.thread, self._task.checkpoint_id)
            self._read = True
        return self._view

    @property
    def unreadable(self) -> str | None:
        """For ``abilities.state_unreadable_refusal``: why the graph cannot load the state, if it was read here
        (None: not read, that check reads it if it must)."""
        return self._view.unreadable if self._view is not None else None


def _state_patch_check(
    task: ApprovalTask, request: DecisionRequest, *, at: _TaskCheckpoint, redaction: list[str]
) -> dict[str, Any] | None:
    _mask_refuse(request.state_patch, "edits")
    _mask_refuse(request.action_args, "action_args")
    for index, item in enumerate(request.decisions or []):
        _mask_refuse(item, f"decisions[{index}]")
    patch = request.state_patch
    if request.outcome == "edit" and not edits_proposed(request) and request.decisions is None:
        raise InvalidInput("an edit needs state edits or edited action arguments", field="edits")
    if not patch:
        return None
    if request.outcome not in ("edit", "approve"):
        raise InvalidInput("state edits go with an edit or approve decision", field="edits")
    if redaction and holds_message(patch) and at.view is not None:
        patch = _messages_kept(patch, at.view, thread=task.thread, redaction=redaction, field="edits")
    editable = gate_policy(task.payload, task.kind).editable
    try:
        schema = graph_get(task.graph).state_schema
    except UnknownGraph:
        raise InvalidInput("this task has no graph state to edit", field="edits") from None
    # A validator reading several fields judges a one-field edit with the others as stored: the values at
    # the task's checkpoint, read only for a schema that has validators (the unreadable check reuses them).
    current = None
    if has_validators(schema):
        view = at.view
        current = view.values if view is not None else None
    try:
        return values_validate(schema, patch, prefix="edits", allowed=editable, current=current)
    except FieldError as exc:
        raise InvalidInput(exc.message, field=exc.field) from None


def _closed_for(actor: User, task: ApprovalTask) -> str:
    """Why a closed task takes no decision, saying whether ``actor``'s own decision is among those that closed it:
    a client retrying a decision whose answer it lost learns that it went through (decisions take no
    idempotency key)."""
    closed = f"this task is {task.status} and can no longer be decided"
    own = Decision.objects.filter(task=task, actor_id=actor.pk).order_by("-created_at").first()
    if own is None:
        return closed
    return f"{closed}; your decision {own.pk} ({own.outcome}, {own.created_at:%Y-%m-%d %H:%M:%S} UTC) is recorded on it"


def _sibling_edits_refuse(task: ApprovalTask, patch: dict[str, Any]) -> None:
    """Tasks opened in one super-step resume in one command, whose update takes each key once: an edit of a key
    that a sibling task's decision already edits would replace that signed value (or, through a reducer, apply
    both in an order nobody signed), and the first decision's record would no longer be what the graph got.
    Refused, naming the key; the first edit stands. Under the thread's lock, so siblings decide one at a time."""
    signed = (
        Decision.objects.filter(
            task__thread_id=task.thread_id, task__checkpoint_id=task.checkpoint_id, run__isnull=True
        )
        .exclude(task_id=task.pk)
        .values_list("task_id", "state_patch")
    )
    for sibling, edits in signed:
        for key in patch:
            if key in (edits or {}):
                raise Conflict(
                    f"{key!r} is already edited by the decision on task {sibling}, which resumes the thread with"
                    " this one: one resume cannot apply both edits; leave it out of yours",
                    field=f"edits.{key}",
                )


def _resumes(task: ApprovalTask, outcome: str) -> bool:
    """Whether completing ``task`` resumes its graph (other kinds complete by their own rule)."""
    return task.kind not in task_completers and not (task.kind == TaskKind.BREAKPOINT and outcome == "reject")


def _resume_waiting(thread: Thread, task: ApprovalTask, grounds: DecisionGrounds) -> list[Decision] | None:
    """The decisions already made that the resume carries with this one; None while another task waits.

    ``grounds`` were read under the thread's lock, after it was taken (so committed siblings are
    seen). The usual task is alone at its checkpoint: its own earlier decisions are all there is.
    """
    if grounds.pending_sibling:
        return None
    if not grounds.checkpoint_sibling:
        return [d for d in grounds.decisions if d.run_id is None]
    # Interrupts raised in one super-step are resumed together: their decisions too.
    return list(
        Decision.objects.select_related("task")
        .filter(task__thread=thread, task__checkpoint_id=task.checkpoint_id, run__isnull=True)
        .order_by("created_at")
    )


def _resume_enqueue(
    thread: Thread,
    checkpoint_id: str,
    actor: User,
    decisions: list[Decision],
    *,
    run_id: uuid.UUID,
    audited_first: AuditEntry | None = None,
) -> Run:
    """Queue the run that resumes ``thread`` with ``decisions`` (the last one was inserted naming ``run_id``).

    ``audited_first``: the deciding signature's event, appended just before the run's ``run.queued`` (one
    statement).
    """
    command = signed_command(decisions, checkpoint_id=checkpoint_id)
    resume, update = command["resume"] or {}, command["update"]
    try:
        run = run_enqueue(thread=thread, kind=RunKind.RESUME, command=command, created_by=actor, run_id=run_id)
    except ThreadBusy as exc:
        raise Conflict(str(exc), field="thread_id") from None
    earlier = [d.pk for d in decisions if d.run_id != run.id]
    if earlier:
        Decision.objects.filter(pk__in=earlier).update(run=run)
    queued = AuditEntry(
        actor=actor,
        action=AuditAction.RUN_QUEUED,
        subject_type="run",
        subject_id=run.id,
        thread_id=thread.id,
        graph=thread.graph,
        details={"kind": "resume", "interrupts": sorted(resume), "update": update or None},
    )
    audit_record_all([queued] if audited_first is None else [audited_first, queued])
    return run


def _thread_cancel(thread: Thread, *, actor: User, reason: str) -> None:
    thread_cancel(thread=thread)  # wakes long polls waiting on this thread, on commit
    audit_thread(thread=thread, actor=actor, action=AuditAction.THREAD_CANCELLED, details={"reason": reason})
