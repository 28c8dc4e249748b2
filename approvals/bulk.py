"""Bulk decisions: approve or reject many tasks with one reason and one signature.

Nothing here decides a task itself. ``bulk_decide`` fixes the selection (explicit
ids, or the inbox's own filter — ``approvals.inbox_filter.InboxFilter`` through
``selectors.tasks_inbox``), checks the signer's proof once and records ``bulk.started``; ``bulk_run`` (the Celery task
``approvals.bulk_run``) then hands every task to ``services.task_decide``, so each
gets its own decision bound to its own evidence digest, its own audit row and
its own resume, with every check a single decision has. A task the signer
cannot decide (it needs an edit, a quorum position they cannot fill, it is
stale, decided meanwhile, claimed by someone else, not permitted) is skipped
and listed with why. Each step commits with its progress row and publishes a
``bulk.progress`` event (``approvals.events``); ``bulk.finished`` closes it.

Concurrency: ``task_decide`` locks the task row and refuses a task that is no
longer pending, so a task decided by someone else while the bulk runs is
skipped as "already decided", never decided twice. Each step locks the bulk
row and skips tasks it has already processed, so a redelivered Celery task
continues where the first one stopped.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from approvals import permissions, services
from approvals.abilities import approvals_remaining
from approvals.audit import audit_record
from approvals.errors import Conflict, DomainError, Forbidden, InvalidInput, NotFound
from approvals.events import BULK_PROGRESS, events_step_publish
from approvals.inbox_filter import InboxFilter
from approvals.models import (
    AuditAction,
    BulkAction,
    BulkStatus,
    TaskStatus,
)
from approvals.payloads import REASON_MAX_CHARS, DecisionRequest, decisions_allowed
from approvals.selectors import tasks_inbox

log = logging.getLogger(__name__)

BULK_RUN_TASK = "approvals.bulk_run"
BULK_MAX = 500  # tasks per action
BULK_OUTCOMES = ("approve", "reject")


class SkipCode:
    NEEDS_EDIT = "needs_edit"
    QUORUM = "quorum_position"
    STALE = "stale"
    ALREADY_DECIDED = "already_decided"
    UNDECIDABLE = "undecidable"  # still pending, but nobody may decide it now (its node gone from the graph)
    ALREADY_SIGNED = "already_signed"
    CLAIMED = "claimed"
    NOT_PERMITTED = "not_permitted"
    SIGNATURE = "signature"
    INVALID = "invalid"


def bulk_matching(*, user: permissions.Principal, filter: InboxFilter) -> Any:
    """The pending tasks a "select all matching" selects: exactly the inbox's filter, oldest first."""
    pending = replace(filter, status=TaskStatus.PENDING)
    return tasks_inbox(user=user, filter=pending).order_by("created_at", "id")


def selection_seen(task_ids: Iterable[Any]) -> str:
    """What a page that offered "select all matching" showed: a digest of the set of task ids it counted.
    A bulk started from that page decides exactly that set, or is refused (``bulk_decide``'s ``seen``)."""
    return hashlib.sha256("\n".join(sorted(str(pk) for pk in task_ids)).encode()).hexdigest()


def bulk_matching_ids(*, user: permissions.Principal, filter: InboxFilter) -> list[str]:
    """The ids ``bulk_matching`` selects, at most ``BULK_MAX + 1`` (one more says "too many")."""
    return [str(pk) for pk in bulk_matching(user=user, filter=filter).values_list("id", flat=True)[: BULK_MAX + 1]]


def bulk_count(*, user: permissions.Principal, filter: InboxFilter, at_most: int | None = None) -> int:
    """How many pending tasks ``filter`` matches; with ``at_most``, counted no further than that (a
    bounded count stays cheap at 100k pending tasks; the whole count is a scan of all of them)."""
    matching = bulk_matching(user=user, filter=filter).order_by()
    return int((matching[:at_most] if at_most is not None else matching).count())


def _ids_parse(raw: Any) -> list[str]:
    if not isinstance(raw, list) or not raw:
        raise InvalidInput("task_ids must be a non-empty list of task ids", field="task_ids")
    if len(raw) > BULK_MAX:
        raise InvalidInput(f"at most {BULK_MAX} tasks per bulk action (got {len(raw)})", field="task_ids")
    out: list[str] = []
    for index, item in enumerate(raw):
        try:
            out.append(str(uuid.UUID(str(item))))
        except ValueError:
            raise InvalidInput(f"{item!r} is not a task id", field=f"task_ids[{index}]") from None
    return list(dict.fromkeys(out))  # a task listed twice is decided once


def bulk_decide(
    *,
    actor: User,
    outcome: str,
    reason: str,
    task_ids: list[Any] | None = None,
    filter: Any = None,
    signer: services.Signer | None = None,
    seen: str | None = None,
) -> BulkAction:
    """Start a bulk decision; returns the queued action (``bulk_run`` decides its tasks, after commit).

    Refused with nothing written: an outcome other than approve/reject, both or neither of
    ``task_ids`` and ``filter``, more than ``BULK_MAX`` tasks, no right to decide, a failed
    re-authentication, a reason the outcome needs but did not get, and, with ``seen`` (the console's
    "select all matching": ``selection_seen`` of the tasks its page counted), a filter that now matches
    another set of tasks. An outside tester's reviewer confirmed "Approve 3 tasks" while a fourth loan
    arrived: four were approved, and the fourth paid out unseen.
    """
    if outcome not in BULK_OUTCOMES:
        raise InvalidInput(f"a bulk decision is {' or '.join(BULK_OUTCOMES)}", field="outcome")
    if not isinstance(reason, str) or len(reason) > REASON_MAX_CHARS:
        # Each task's decision keeps at most this much (task_decide): refused here, before any is decided.
        raise InvalidInput(f"reason must be text of at most {REASON_MAX_CHARS} characters", field="reason")
    if (task_ids is None) == (filter is None):
        raise InvalidInput("give either task_ids or filter (select all matching)", field="task_ids")
    permissions.require(actor, "approvals.decide_task", "decide approval tasks")
    signer = signer or services.Signer()
    try:
        reauthenticated_at = services.signature_proof(actor, signer)
    except services.SignatureRefused as exc:
        with transaction.atomic():
            audit_record(
                actor=actor,
                action=AuditAction.DECISION_REFUSED,
                subject_type="bulk",
                subject_id="-",
                details={"rule": exc.rule, "message": exc.message, "outcome": outcome},
            )
        raise
    parsed: InboxFilter | None = None
    if filter is not None:
        parsed = InboxFilter.parse(filter)
        ids = bulk_matching_ids(user=actor, filter=parsed)
        if not ids:
            raise InvalidInput("no pending task matches this filter", field="filter")
        if seen is not None and selection_seen(ids) != seen:
            raise Conflict(
                f"the pending tasks matching this filter have changed since your page counted them ({len(ids)} "
                "match now): nothing was decided; look at the list again and select them again",
                field="filter",
            )
        if len(ids) > BULK_MAX:
            total = bulk_count(user=actor, filter=parsed)
            raise InvalidInput(
                f"{total} tasks match this filter; a bulk action takes at most {BULK_MAX}: narrow the filter",
                field="filter",
            )
    else:
        ids = _ids_parse(task_ids)
    if not reason.strip():
        _reason_check(actor, ids, outcome)
    with transaction.atomic():
        bulk = BulkAction.objects.create(
            actor=actor,
            outcome=outcome,
            reason=reason,
            task_ids=ids,
            filter=parsed.selection() if parsed else None,
            authenticated_at=signer.authenticated_at,
            reauthenticated_at=reauthenticated_at,
            signed_via=signer.via,
            token_scope=_scope_of(actor),
        )
        audit_record(
            actor=actor,
            action=AuditAction.BULK_STARTED,
            subject_type="bulk",
            subject_id=bulk.id,
            details={
                "outcome": outcome,
                "reason": reason,
                "tasks": len(ids),
                "task_ids": ids,
                "filter": bulk.filter,
                "reauthenticated": reauthenticated_at is not None,
            },
        )
        transaction.on_commit(lambda: bulk_dispatch(bulk_id=bulk.pk))
    return bulk


BULK_OUTCOMES = ("approve", "reject")


def bulk_reasons_at(graph: str, gate: str) -> list[str]:
    """The bulk outcomes a gate needs a reason for: the inbox asks for the reason before the bulk
    confirmation (console/static/console/bulk.js), and ``_reason_check`` still refuses without one."""
    return [o for o in BULK_OUTCOMES if services.reason_required(graph, gate, o)]


def bulk_reasons_matching(
    *, user: permissions.Principal, filter: InboxFilter, gates: Iterable[tuple[str, str]] | None = None
) -> list[str]:
    """``bulk_reasons_at`` over every gate of the tasks "select all matching" selects. ``gates``: their
    (graph, gate) pairs when the caller already holds every matching task (the inbox's whole list),
    which spares a DISTINCT over them on every render."""
    if gates is None:
        gates = bulk_matching(user=user, filter=filter).order_by().values_list("graph", "node").distinct()
    needed = {o for graph, gate in set(gates) for o in bulk_reasons_at(graph, gate)}
    return [o for o in BULK_OUTCOMES if o in needed]


def _reason_check(actor: User, ids: list[str], outcome: str) -> None:
    """Refuse before starting when a selected task's gate needs a reason for ``outcome`` and none was
    given: every such task would be skipped one by one, after a bulk that decided nothing."""
    gates = permissions.tasks_visible(actor).filter(pk__in=ids).values_list("graph", "node").distinct()
    needing = sorted(f"{graph} / {gate}" for graph, gate in gates if services.reason_required(graph, gate, outcome))
    if needing:
        raise InvalidInput(f"a reason is required to {outcome} at {', '.join(needing[:3])}", field="reason")


def bulk_dispatch(*, bulk_id: Any) -> None:
    """Send the bulk to a worker (by name: the worker imports ``approvals.tasks``)."""
    from celery import current_app

    try:
        current_app.send_task(BULK_RUN_TASK, args=[str(bulk_id)])
    except Exception:  # the broker is down: the action stays queued; GET /api/bulk-decisions/{id} shows it
        log.exception("dispatch of bulk action %s failed", bulk_id)


def bulk_get_for(user: permissions.Principal, bulk_id: Any) -> BulkAction:
    """The bulk action if ``user`` started it (or is an admin who sees every graph); 404 otherwise."""
    bulk = BulkAction.objects.filter(pk=bulk_id).first()
    if bulk is None or not user.is_authenticated:
        raise NotFound(f"bulk action {bulk_id} not found", field="bulk_id")
    # Its starter, or an auditor/admin who sees every graph (the rows name tasks of any graph).
    sees_all = permissions.can(user, "approvals.view_audit") and permissions.graphs_visible(user) is None
    if bulk.actor_id != user.pk and not sees_all:
        raise NotFound(f"bulk action {bulk_id} not found", field="bulk_id")
    return bulk


def bulk_resumed_threads(*, user: permissions.Principal, bulk: BulkAction) -> list[str]:
    """The threads ``bulk``'s decisions resumed that ``user`` may see: where their runs' outcomes are published."""
    task_ids = [item["task"] for item in bulk.decided if item.get("run")]
    if not task_ids:
        return []
    visible = permissions.tasks_visible(user).filter(pk__in=task_ids)
    return [str(pk) for pk in visible.values_list("thread_id", flat=True).distinct()]


def bulk_run(*, bulk_id: Any) -> BulkAction:
    """Decide every task of the bulk action one by one (idempotent: a rerun continues, never repeats)."""
    bulk = BulkAction.objects.select_related("actor").get(pk=bulk_id)
    if bulk.is_finished:
        return bulk
    BulkAction.objects.filter(pk=bulk.pk, status=BulkStatus.QUEUED).update(status=BulkStatus.RUNNING)
    for task_id in bulk.task_ids:
        bulk_step(bulk_id=bulk.pk, task_id=task_id)
    return bulk_finish(bulk_id=bulk.pk)


def _scope_of(actor: User) -> list[list[str]] | None:
    scope = getattr(actor, permissions.TOKEN_SCOPE_ATTR, None)
    return [list(scope[0]), list(scope[1])] if scope else None


def _actor(bulk: BulkAction) -> User:
    """The user who started ``bulk``, narrowed by the token they started it with: a token scoped to one
    graph must not decide another graph's tasks because a worker, not the request, decides them."""
    actor: User = bulk.actor
    if bulk.token_scope:
        setattr(actor, permissions.TOKEN_SCOPE_ATTR, (bulk.token_scope[0], bulk.token_scope[1]))
    return actor


def _signer(bulk: BulkAction) -> services.Signer:
    return services.Signer(
        authenticated_at=bulk.authenticated_at, reauthenticated_at=bulk.reauthenticated_at, via=bulk.signed_via
    )


def _title(actor: User, task_id: str) -> str:
    """A skipped task's title, for a task ``actor`` may see: one they may not see reads as one that
    does not exist (no title, the same reason)."""
    task = permissions.tasks_visible(actor).filter(pk=task_id).only("title", "node").first()
    return (task.title or task.node) if task else ""


def bulk_step(*, bulk_id: Any, task_id: str) -> None:
    """Decide one task of the bulk (or skip it, saying why); commits with the progress row."""
    with transaction.atomic():
        bulk = BulkAction.objects.select_for_update().select_related("actor").get(pk=bulk_id)
        processed = {item["task"] for item in bulk.decided} | {item["task"] for item in bulk.skipped}
        if task_id in processed:
            return
        actor = _actor(bulk)
        entry: dict[str, Any] = {"task": task_id, "title": ""}
        skip = _precheck(actor, task_id, bulk.outcome)
        if skip is None:
            request = DecisionRequest(outcome=bulk.outcome, reason=bulk.reason)
            try:
                # A savepoint: a refused decision rolls back to here (its refusal audit commits with the step).
                decision = services.task_decide(actor=actor, task_id=task_id, request=request, signer=_signer(bulk))
            except DomainError as exc:
                skip = _skip_from(exc)
            else:
                final = decision.task.status == TaskStatus.DECIDED
                entry.update(
                    title=decision.task.title or decision.task.node,
                    decision=str(decision.id),
                    run=str(decision.run_id) if decision.run_id else None,
                    final=final,
                    meaning=decision.meaning,
                    # A signature that did not close its task: how many approvals it still waits for (the
                    # page said "decided" of a task that was still pending).
                    remaining=None if final else approvals_remaining(decision.task, decision.task.decisions.all()),
                )
                bulk.decided = [*bulk.decided, entry]
        if skip is not None:
            entry.update(title=entry["title"] or _title(actor, task_id), code=skip[0], reason=skip[1])
            bulk.skipped = [*bulk.skipped, entry]
        bulk.done += 1
        bulk.save(update_fields=["decided", "skipped", "done"])
        events_step_publish(action=BULK_PROGRESS, subject_type="bulk", subject_id=str(bulk.pk))


def _precheck(actor: User, task_id: str, outcome: str) -> tuple[str, str] | None:
    """Skips a one-click decision can never pass; ``task_decide`` makes every other check itself."""
    task = permissions.tasks_visible(actor).filter(pk=task_id).first()
    if task is None:
        return SkipCode.NOT_PERMITTED, "you may not see this task (or it no longer exists)"
    if task.is_open and outcome not in decisions_allowed(task.payload, task.kind, task.response_schema):
        allowed = ", ".join(decisions_allowed(task.payload, task.kind, task.response_schema)) or "none"
        return SkipCode.NEEDS_EDIT, f"this gate does not take a plain {outcome} (it allows: {allowed}); open it"
    return None


def _skip_from(exc: DomainError) -> tuple[str, str]:
    if isinstance(exc, services.PolicyRefusal):
        if exc.rule.startswith("signature."):
            return SkipCode.SIGNATURE, exc.message
        return SkipCode.QUORUM, exc.message
    if isinstance(exc, NotFound | Forbidden):
        return SkipCode.NOT_PERMITTED, exc.message
    if isinstance(exc, Conflict):
        if exc.field == "checkpoint_id":
            return SkipCode.STALE, exc.message
        if exc.field == "claim":
            return SkipCode.CLAIMED, exc.message
        if "already signed" in exc.message:
            return SkipCode.ALREADY_SIGNED, exc.message
        if exc.field == "task_id":
            # A closed task, or one still pending that nobody may decide (its node gone, its state unreadable):
            # an outside tester read "already_decided" on four pending tasks of a renamed node.
            closed = "can no longer be decided" in exc.message
            return (SkipCode.ALREADY_DECIDED if closed else SkipCode.UNDECIDABLE), exc.message
        return SkipCode.STALE, exc.message
    if isinstance(exc, InvalidInput) and exc.field in ("edits", "decision", "resume", "action_args", "decisions"):
        return SkipCode.NEEDS_EDIT, exc.message
    return SkipCode.INVALID, exc.message


def bulk_finish(*, bulk_id: Any) -> BulkAction:
    with transaction.atomic():
        bulk = BulkAction.objects.select_for_update().get(pk=bulk_id)
        if bulk.is_finished:
            return bulk
        bulk.status = BulkStatus.FINISHED
        bulk.finished_at = timezone.now()
        bulk.save(update_fields=["status", "finished_at"])
        audit_record(
            actor=bulk.actor,
            action=AuditAction.BULK_FINISHED,
            subject_type="bulk",
            subject_id=bulk.id,
            details={
                "outcome": bulk.outcome,
                "decided": [item["task"] for item in bulk.decided],
                "skipped": [{"task": s["task"], "code": s["code"]} for s in bulk.skipped],
            },
        )
    return bulk


def bulk_elapsed(bulk: BulkAction) -> float | None:
    end: datetime | None = bulk.finished_at
    return (end - bulk.created_at).total_seconds() if end else None
