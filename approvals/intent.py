"""Signed intent = executed effect: what a set of decisions signs, and the proof the effects match it.

A decision signs a resume value and a state update (``Decision.signed_digest``);
an approving decision on a Gatehouse gate also signs an action: the gate's
proposed action with the signer's edits (``Decision.signed_action``). The
effect ledger records the arguments every effect was executed with
(``Effect.args``). ``intent_verify`` binds each effect to the gate decision it
followed and proves the two agree; ``manage.py decisions_verify`` runs it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from approvals.audit import canonical
from approvals.models import ApprovalTask, AuditAction, AuditEvent, Decision, TaskKind, TaskStatus
from approvals.payloads import payload_kind
from runtime import rows
from runtime.effects import args_digest
from runtime.models import Effect, EffectStatus, Run, RunKind, Thread

APPROVING = ("approve", "edit")


def signed_digest(*, interrupt_id: str, checkpoint_id: str, resume: Any, update: Any, action: Any) -> str:
    """SHA-256 of the canonical JSON of exactly what a decision signs: the resume, the state update, the action."""
    signed = {
        "interrupt_id": interrupt_id,
        "checkpoint_id": checkpoint_id,
        "resume": resume,
        "update": update,
        "action": action,
    }
    return hashlib.sha256(canonical(signed).encode()).hexdigest()


def decision_digest(decision: Decision) -> str:
    return signed_digest(
        interrupt_id=decision.task.interrupt_id,
        checkpoint_id=decision.checkpoint_id,
        resume=decision.resume_value,
        update=decision.state_patch,
        action=decision.signed_action,
    )


def proposed_action(task: ApprovalTask) -> dict[str, Any] | None:
    payload = task.payload if isinstance(task.payload, dict) else {}
    action = payload.get("proposed_action") if payload_kind(payload, task.kind) == "gatehouse" else None
    return action if isinstance(action, dict) and isinstance(action.get("name"), str) else None


def edited_args(decision: Decision) -> dict[str, Any]:
    """The action arguments ``decision`` edited (in its resume value), if it approved."""
    value = decision.resume_value
    if decision.outcome in APPROVING and isinstance(value, dict) and isinstance(value.get("action_args"), dict):
        return dict(value["action_args"])
    return {}


def signed_command(decisions: Iterable[Decision], *, checkpoint_id: str) -> dict[str, Any]:
    """The resume command the decisions of one super-step sign, in the order they were made.

    State updates merge (a later signer's value wins). For a gate decided by a
    quorum, the final approval approves the proposal before it: action
    arguments edited by an earlier signer stay in the final resume value, as
    their state edits stay in the update. Without this an edit proposed by one
    approver and approved by another vanished from the resume.
    """
    resume: dict[str, Any] = {}
    update: dict[str, Any] = {}
    edited: dict[str, dict[str, Any]] = {}
    for d in decisions:
        update.update(d.state_patch or {})
        if d.task.kind != TaskKind.INTERRUPT:
            continue
        resume[d.task.interrupt_id] = d.resume_value
        if proposed_action(d.task) is not None:
            edited.setdefault(d.task.interrupt_id, {}).update(edited_args(d))
    for interrupt_id, args in edited.items():
        final = resume[interrupt_id]
        if args and isinstance(final, dict) and final.get("decision") in APPROVING:
            resume[interrupt_id] = {**final, "action_args": args}
    return {"resume": resume or None, "update": update or None, "checkpoint_id": checkpoint_id}


def task_signed_action(task: ApprovalTask, decisions: list[Decision]) -> dict[str, Any] | None:
    """The action a decided gate signed: proposed arguments, then state edits of the same name, then edited arguments.

    That is the order the gatekeeper convention applies them (the update is
    applied before the gate re-runs; the gate copies edited arguments over it).
    None if the gate proposed no action or was not approved.
    """
    action = proposed_action(task)
    if action is None or not decisions or decisions[-1].outcome not in APPROVING:
        return None
    args = args_signed(action, [d.state_patch for d in decisions], [edited_args(d) for d in decisions])
    return {"name": action["name"], "args": args}


def args_signed(action: dict[str, Any], patches: list[Any], edited: list[dict[str, Any]]) -> dict[str, Any]:
    """The arguments of ``action`` after the state ``patches`` and the ``edited`` arguments of a task's decisions
    (in the order they were made): each approval signs these, over every proposal made before it."""
    args = dict(action.get("args") or {}) if isinstance(action.get("args"), dict) else {}
    for patch in patches:
        for key, value in (patch or {}).items():
            if key in args:
                args[key] = value
    for each in edited:
        args.update(each)
    return args


# The decided gates of an effect's thread before the effect, newest first, each with the id of its
# last carried decision: one fixed statement, read when an effect is recorded (every executed
# effect) and when ``intent_verify`` proves one.
_GATES_BEFORE = (
    "SELECT {task}, (SELECT d.id FROM approvals_decision d WHERE d.task_id = t.id AND d.run_id IS NOT NULL "
    "ORDER BY d.created_at DESC, d.id DESC LIMIT 1) FROM approvals_approvaltask t "
    "WHERE t.thread_id = %s AND t.status = %s AND t.decided_at <= %s ORDER BY t.decided_at DESC"
)


def _gate_followed_and_last(effect: Effect) -> tuple[ApprovalTask, Any] | None:
    """The last decided gate of the effect's thread, before the effect, that proposed an action of its
    name, and the id of that gate's last carried decision (None if none was carried)."""
    if effect.thread_id is None:
        return None
    params = [
        rows.db_value(ApprovalTask, "thread", effect.thread_id),
        TaskStatus.DECIDED.value,
        rows.db_value(ApprovalTask, "decided_at", effect.created_at),
    ]
    with rows.fixed_cursor() as cursor:
        cursor.execute(_GATES_BEFORE.format(task=rows.columns(ApprovalTask, "t")), params)
        found = cursor.fetchall()
    width = rows.width(ApprovalTask)
    for row in found:
        task = rows.model_from_row(ApprovalTask, row[:width])
        action = proposed_action(task)
        if action is not None and action["name"] == effect.name:
            return task, row[width]
    return None


def _gate_followed(effect: Effect) -> ApprovalTask | None:
    """The last decided gate of the effect's thread, before the effect, that proposed an action of its name."""
    found = _gate_followed_and_last(effect)
    return None if found is None else found[0]


def _carried(task: ApprovalTask) -> list[Decision]:
    """The decisions the resume run carried for ``task``, in the order they were made."""
    return list(task.decisions.select_related("task").filter(run__isnull=False).order_by("created_at", "id"))


def decision_followed(*, effect: Effect) -> str | None:
    """The final decision of the gate the effect followed (recorded with the effect in the audit trail):
    what ``intent_verify`` finds by ``_gate_followed`` then ``_carried``, by the same read."""
    found = _gate_followed_and_last(effect)
    last = None if found is None else found[1]
    return None if last is None else str(Decision._meta.pk.to_python(last))


# --- the proof ---------------------------------------------------------------------------------


@dataclass
class ThreadFinding:
    thread_id: str
    graph: str
    problems: list[str] = field(default_factory=list)  # signed intent and executed effect disagree
    unverifiable: list[str] = field(default_factory=list)  # nothing to compare (legacy rows, effects without args)
    matched: list[str] = field(default_factory=list)


@dataclass
class IntentReport:
    threads: list[ThreadFinding] = field(default_factory=list)

    @property
    def failing(self) -> list[ThreadFinding]:
        return [t for t in self.threads if t.problems]

    @property
    def effects_matched(self) -> int:
        return sum(len(t.matched) for t in self.threads)


SIGNED_IN_TRAIL = (AuditAction.DECISION_MADE, AuditAction.DECISION_RECORDED)


def intent_verify(*, threads: Iterable[Thread] | None = None) -> IntentReport:
    """Prove, for every thread with decisions, effects or decisions in the audit trail, that what ran is what
    was signed."""
    if threads is None:
        with_effects = Effect.objects.values("thread_id")
        with_decisions = Decision.objects.values("task__thread_id")
        # A thread whose decision rows were all deleted is still checked: the trail names them.
        with_signed = AuditEvent.objects.filter(action__in=SIGNED_IN_TRAIL).values("thread_id")
        threads = Thread.objects.filter(
            Q(pk__in=with_effects) | Q(pk__in=with_decisions) | Q(pk__in=with_signed)
        ).order_by("created_at")
    report = IntentReport()
    for thread in threads:
        finding = ThreadFinding(thread_id=str(thread.pk), graph=thread.graph)
        trail = _signed_in_trail(thread)
        _verify_decisions(thread, finding, trail)
        _verify_runs(thread, finding)
        _verify_effects(thread, finding, trail)
        report.threads.append(finding)
    return report


@dataclass(frozen=True)
class SignedEvent:
    """A decision as the audit trail records it: enough to name it when its row is gone."""

    decision_id: str
    event_id: int
    action: str
    task_id: str


def _signed_in_trail(thread: Thread) -> list[SignedEvent]:
    """Every decision the audit trail records for the thread (``decision.made``/``decision.recorded``), in order."""
    events = (
        AuditEvent.objects.filter(thread_id=thread.pk, action__in=SIGNED_IN_TRAIL)
        .order_by("id")
        .values_list("id", "action", "subject_id", "details")
    )
    return [
        SignedEvent(decision_id=str(details["decision"]), event_id=pk, action=action, task_id=subject_id)
        for pk, action, subject_id, details in events
        if isinstance(details, dict) and details.get("decision")
    ]


def _verify_decisions(thread: Thread, finding: ThreadFinding, trail: list[SignedEvent]) -> None:
    decisions = list(Decision.objects.select_related("task").filter(task__thread=thread).order_by("created_at", "id"))
    kept = {str(d.pk) for d in decisions}
    for event in trail:
        if event.decision_id not in kept:  # only a database user with triggers off deletes one (migration 0035)
            finding.problems.append(
                f"decision {event.decision_id} on task {event.task_id}, recorded in the audit trail "
                f"({event.action}, event #{event.event_id}), is gone from the decisions table"
            )
    for d in decisions:
        if not d.signed_digest:
            finding.unverifiable.append(f"decision {d.pk} predates signed digests")
        elif decision_digest(d) != d.signed_digest:
            finding.problems.append(
                f"decision {d.pk} at {d.task.node}: its recorded resume, edits or action no longer match "
                f"its signed digest {d.signed_digest[:12]}"
            )


def _verify_runs(thread: Thread, finding: ThreadFinding) -> None:
    """Every resume run (and retry of one) carried exactly the command its decisions sign."""
    runs = {str(r.pk): r for r in Run.objects.filter(thread=thread)}
    carried: dict[Any, list[Decision]] = {}
    for d in Decision.objects.select_related("task").filter(task__thread=thread, run__isnull=False):
        carried.setdefault(str(d.run_id), []).append(d)
    for run_id, decisions in carried.items():
        decisions.sort(key=lambda d: (d.created_at, str(d.pk)))
        expected = signed_command(decisions, checkpoint_id=decisions[0].checkpoint_id)
        run = runs.get(run_id)
        if run is None:
            continue
        if canonical(_command_core(run.command)) != canonical(expected):
            finding.problems.append(f"resume run {run.pk} carried a command its decisions did not sign")
    for run in runs.values():
        origin = runs.get(str((run.command or {}).get("retry_of")))
        reapplied = canonical(_command_core(run.command))
        if run.kind == RunKind.RETRY and origin is not None and reapplied != canonical(_command_core(origin.command)):
            finding.problems.append(f"retry run {run.pk} re-applied a command other than the one of run {origin.pk}")


def _command_core(command: Any) -> dict[str, Any]:
    command = command or {}
    return {
        "resume": command.get("resume"),
        "update": command.get("update"),
        "checkpoint_id": command.get("checkpoint_id"),
    }


def _verify_effects(thread: Thread, finding: ThreadFinding, trail: list[SignedEvent]) -> None:
    for effect in Effect.objects.filter(thread=thread).order_by("created_at", "id"):
        if effect.calls == 0 and effect.status != EffectStatus.DONE:
            continue  # recorded intent only: never performed
        label = f"effect {effect.name} ({effect.key})"
        if effect.args is not None and effect.args_digest != args_digest(effect.args):
            finding.problems.append(
                f"{label}: its recorded arguments do not match their digest (the ledger row was altered)"
            )
            continue
        task = _gate_followed(effect)
        if task is None:
            finding.unverifiable.append(f"{label}: no gate proposed it (ran without a decision)")
            continue
        decisions = _carried(task)
        if not decisions:
            made = [e for e in trail if e.task_id == str(task.pk) and e.action == AuditAction.DECISION_MADE]
            if made:  # it ran on a signature whose row was deleted: not "nothing to compare"
                finding.problems.append(
                    f"{label} followed gate {task.node}, whose signing decision {made[-1].decision_id} "
                    f"(event #{made[-1].event_id}) is gone from the decisions table"
                )
            else:
                finding.unverifiable.append(f"{label}: gate {task.node} has no carried decisions")
            continue
        final = decisions[-1]
        if final.outcome not in APPROVING:
            finding.problems.append(
                f"{label} ran after decision {final.pk} at {task.node} {final.get_outcome_display().lower()} it"
            )
            continue
        signed = task_signed_action(task, decisions)
        if signed is None or effect.args is None:
            finding.unverifiable.append(f"{label}: the effect recorded no arguments")
            continue
        signed_args: dict[str, Any] = signed["args"]
        common = sorted(set(signed_args) & set(effect.args))
        if not common:
            finding.unverifiable.append(f"{label}: records none of the signed arguments {sorted(signed_args)}")
            continue
        differing = [k for k in common if canonical(signed_args[k]) != canonical(effect.args[k])]
        if differing:
            ran = ", ".join(f"{k}={canonical(effect.args[k])} (signed {canonical(signed_args[k])})" for k in differing)
            finding.problems.append(f"{label} followed decision {final.pk} at {task.node} but ran with {ran}")
        else:
            matched = ", ".join(f"{k}={canonical(signed_args[k])}" for k in common)
            finding.matched.append(f"{label} = signed {matched} (decision {final.pk})")


# --- what an auditor is shown ----------------------------------------------------------------


@dataclass(frozen=True)
class ActionEdit:
    """A proposed action whose arguments a decision signed with changes."""

    name: str
    proposed: dict[str, Any]
    signed: dict[str, Any]


def action_edits(decision: Decision) -> list[ActionEdit]:
    """Every proposed action whose arguments this decision changed (proposed vs signed), in any payload shape."""
    task, value = decision.task, decision.resume_value
    payload: Any = task.payload
    kind = payload_kind(payload, task.kind)
    found: list[tuple[str, Any, Any]] = []
    if kind == "gatehouse":
        action = proposed_action(task)
        # An approval edits nothing: its signed action is the proposal it approves (the edits made before it),
        # which are the proposing decisions' edits, not its own.
        if action is not None and (decision.outcome == "edit" or decision.state_patch):
            proposed: dict[str, Any] = action["args"] if isinstance(action.get("args"), dict) else {}
            signed = decision.signed_action
            if isinstance(signed, dict):
                found.append((action["name"], proposed, signed.get("args")))
            else:  # a decision recorded before signed actions: its edited arguments
                found.append((action["name"], proposed, {**proposed, **edited_args(decision)}))
    elif kind == "tool_approval" and isinstance(value, dict) and value.get("type") == "edit":
        edited = value.get("edited_action") or {}
        found.append((str(payload.get("name")), payload.get("args"), edited.get("args")))
    elif kind == "agent_inbox" and isinstance(value, list) and value and isinstance(value[0], dict):
        answer = value[0]
        item = payload[0] if isinstance(payload, list) else payload
        request = item.get("action_request") or {}
        if answer.get("type") == "edit" and isinstance(answer.get("args"), dict):
            found.append((str(request.get("action")), request.get("args"), answer["args"].get("args")))
    elif kind == "hitl" and isinstance(value, dict):
        requests = payload.get("action_requests") or []
        for index, item in enumerate(value.get("decisions") or []):
            if isinstance(item, dict) and item.get("type") == "edit" and index < len(requests):
                edited = item.get("edited_action") or {}
                found.append(
                    (f"{requests[index].get('name')}[{index}]", requests[index].get("args"), edited.get("args"))
                )
    return [
        ActionEdit(name=name, proposed=proposed, signed=signed)
        for name, proposed, signed in found
        if isinstance(proposed, dict) and isinstance(signed, dict) and canonical(proposed) != canonical(signed)
    ]
