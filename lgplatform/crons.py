"""Crons (``client.crons``): runs started on a schedule, each as the user who made the cron.

A cron is a run's body (``payload``: input, metadata, config, multitask strategy, stream modes) and a
schedule (five-field cron syntax or a macro such as ``@hourly``, in ``timezone``, UTC by default). On a
thread (``crons.create_for_thread``) each firing starts a run there; without one (``crons.create``) each
firing starts a run on a new thread, which Gatehouse keeps (``on_run_completed="delete"`` is refused, as a
stateless run's ``on_completion="delete"`` is).

What Gatehouse adds to LangGraph Server's crons:

- **A run is started as the cron's owner, with the owner's permissions as they are when it fires.** The
  body is checked (input schema, unsupported options) when the cron is made, and again at each firing;
  an owner deactivated, or no longer allowed to start the graph, has every firing skipped, not run.
- **A firing that cannot start is skipped, and says why** (``cron.skipped`` in the audit trail): a thread
  that waits for a reviewer's decision (or is busy, with ``multitask_strategy="reject"``) is not pushed
  past its gate by a timer. The cron fires again at its next time.
- **One firing per due time, once.** The beat task (``lgplatform.fire_crons``) takes each due cron in
  its own transaction, locked with ``SKIP LOCKED`` and moved on by a conditional update, so two beats (or
  a beat restarted mid-sweep) never start the same firing twice. A beat that was down fires each missed
  cron once, then on schedule: no catch-up burst.
- **Only the owner changes a cron** (its runs are started in the owner's name); the owner or a user
  administrator deletes it. Reads are scoped to the graphs the reader may see, and ``payload`` is masked
  for a reader without "view sensitive" like the state it writes. Every change and firing is audited.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from approvals import gateway, permissions
from approvals.audit import audit_record
from approvals.errors import DomainError, Forbidden, InvalidInput, NotFound
from approvals.models import AuditAction
from approvals.users import MANAGE_USERS
from lgplatform import services as platform
from lgplatform.models import Cron
from lgplatform.responses import CronOut
from lgplatform.run_create import published_modes, run_body_check, run_create_recorded
from lgplatform.schemas import CronCreateIn, CronPatchIn, CronRunIn, RunCreateIn

log = logging.getLogger("gatehouse.crons")

# The run body's fields a cron keeps (``Cron.payload``), as sent.
PAYLOAD_FIELDS = tuple(CronRunIn.model_fields)
# Crons fired per sweep at most; the rest wait for the next (a sweep runs every GATEHOUSE_CRON_SECONDS).
SWEEP_LIMIT = 200
# Sent with a cron's every run (and a new thread's metadata): threads.search(metadata={"cron_id": ...}).
CRON_METADATA_KEY = "cron_id"


@dataclasses.dataclass
class FireResult:
    fired: int = 0
    skipped: int = 0


# --- the schedule --------------------------------------------------------------------------------------


def schedule_check(schedule: str) -> str:
    """``schedule`` if it is five cron fields or a macro (``@hourly``, ``@daily``...), else a 422 naming it.

    croniter also reads a sixth field, as seconds; the beat looks for due crons every few seconds, so a
    schedule finer than a minute would promise what it cannot keep."""
    schedule = schedule.strip()
    fields = schedule.split()
    if not schedule.startswith("@") and len(fields) != 5:
        raise InvalidInput(
            f"a schedule is five fields (minute hour day-of-month month day-of-week) or a macro such as "
            f"@hourly; {schedule!r} has {len(fields)}",
            field="schedule",
        )
    try:
        valid = croniter.is_valid(schedule)
    except Exception:  # noqa: BLE001 - croniter raises more than its own errors on some text: unreadable all the same
        valid = False
    if not valid:
        raise InvalidInput(f"{schedule!r} is not a valid cron schedule", field="schedule")
    return schedule


def timezone_check(name: str | None) -> str:
    """An IANA time zone name ("" for none: UTC), else a 422 naming ``timezone``."""
    if not name:
        return ""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"{name!r} is not an IANA time zone (e.g. Europe/Paris)", field="timezone") from None
    return name


def next_fire(schedule: str, tz_name: str, after: datetime) -> datetime:
    """The first time strictly after ``after`` that ``schedule`` names, read in ``tz_name`` (daylight saving
    included), in UTC."""
    zone = ZoneInfo(tz_name or "UTC")
    try:
        nxt: datetime = croniter(schedule, after.astimezone(zone)).get_next(datetime)
    except (CroniterBadDateError, CroniterBadCronError, CroniterNotAlphaError, ValueError, OverflowError):
        raise InvalidInput(f"{schedule!r} never fires", field="schedule") from None
    return nxt.astimezone(UTC)


def _next_run_date(cron: Cron, after: datetime) -> datetime | None:
    """When ``cron`` fires next after ``after``: none while disabled or once past its end time."""
    if not cron.enabled:
        return None
    nxt = next_fire(cron.schedule, cron.timezone, after)
    return None if cron.end_time is not None and nxt > cron.end_time else nxt


# --- making and changing one ---------------------------------------------------------------------------


def _aware(value: datetime | None) -> datetime | None:
    # A naive end time is UTC, as LangGraph Server's PostgreSQL column reads it.
    return value.replace(tzinfo=UTC) if value is not None and timezone.is_naive(value) else value


def _run_body(cron_graph: str, payload: dict[str, Any], *, thread: bool) -> RunCreateIn:
    """The run body each firing sends, from a cron's payload (the assistant named by its graph)."""
    body = RunCreateIn(assistant_id=platform.assistant_id_for(cron_graph), **_run_fields(payload))
    if not thread:
        body.if_not_exists = "create"
    return body


def _run_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload's fields a run body takes (stream_resumable, checkpoint_during, durability: accepted and
    kept, as LangGraph Server does, and meaning nothing here: a run's stream is kept and every step is durable)."""
    taken = ("input", "metadata", "config", "context", "interrupt_before", "interrupt_after", "webhook")
    fields = {k: payload[k] for k in taken if payload.get(k) is not None}
    fields["multitask_strategy"] = payload.get("multitask_strategy")
    fields["stream_mode"] = payload.get("stream_mode")
    fields["stream_subgraphs"] = bool(payload.get("stream_subgraphs"))
    return fields


def _payload_check(actor: User, graph: str, payload: dict[str, Any], *, thread: bool) -> None:
    """Refuse, naming the field, a payload no firing could start a run from (checked again at each firing)."""
    if payload.get("input") is None:
        raise InvalidInput("a cron starts each run with an input: send one", field="input")
    body = _run_body(graph, payload, thread=thread)
    run_body_check(body)
    platform.run_config_check(body.config)
    platform.recursion_limit_read(body.config, graph)
    platform.run_metadata_read(body.config, body.metadata)
    published_modes(body)
    platform.run_start_check(actor, graph, payload["input"])


def cron_create(*, actor: User, body: CronCreateIn, thread_id: Any = None) -> Cron:
    """``crons.create`` (no ``thread_id``: a new thread per firing) and ``crons.create_for_thread``."""
    graph = platform.assistant_graph(actor, body.assistant_id)
    thread = None
    if thread_id is not None:
        thread = platform.thread_get_for(actor, thread_id)
        if thread.graph and thread.graph != graph:
            raise InvalidInput(f"thread {thread.id} runs graph {thread.graph!r}, not {graph!r}", field="assistant_id")
    elif body.on_run_completed == "delete":
        raise InvalidInput(
            "Gatehouse keeps every thread, with its decisions and audit trail: send on_run_completed 'keep' or "
            "leave it out",
            field="on_run_completed",
        )
    payload = body.model_dump(include=set(PAYLOAD_FIELDS), exclude_none=True)
    _payload_check(actor, graph, payload, thread=thread is not None)
    cron = Cron(
        graph=graph,
        thread=thread,
        schedule=schedule_check(body.schedule),
        timezone=timezone_check(body.timezone),
        payload=payload,
        metadata=body.metadata or {},
        owner=actor,
        enabled=body.enabled,
        end_time=_aware(body.end_time),
        on_run_completed="" if thread is not None else (body.on_run_completed or "keep"),
    )
    cron.next_run_date = _next_run_date(cron, timezone.now())
    with transaction.atomic():
        cron.save()
        _audit(actor, AuditAction.CRON_CREATED, cron, details=_described(cron))
    return cron


def cron_update(*, actor: User, cron_id: Any, body: CronPatchIn) -> Cron:
    """``crons.update``: what ``body`` sends changes (``end_time: null`` clears it); its owner only."""
    sent = body.model_fields_set
    if not sent:
        raise InvalidInput("send at least one field to change", field="body")
    with transaction.atomic():
        cron = _cron_for(actor, cron_id, lock=True)
        if cron.owner_id != actor.pk:
            raise Forbidden(
                "only its owner changes a cron: its runs are started as them (delete it and make your own)",
                field="cron_id",
            )
        changed = sorted(sent)
        if body.on_run_completed == "delete" and cron.thread_id is None:
            raise InvalidInput(
                "Gatehouse keeps every thread: on_run_completed 'delete' is refused", field="on_run_completed"
            )
        payload_sent = {k for k in sent if k in PAYLOAD_FIELDS}
        if payload_sent:
            payload = {**cron.payload, **body.model_dump(include=payload_sent)}
            payload = {k: v for k, v in payload.items() if v is not None}
            _payload_check(actor, cron.graph, payload, thread=cron.thread_id is not None)
            cron.payload = payload
        if "metadata" in sent:
            cron.metadata = body.metadata or {}
        if "schedule" in sent and body.schedule is not None:
            cron.schedule = schedule_check(body.schedule)
        if "timezone" in sent:
            cron.timezone = timezone_check(body.timezone)
        if "end_time" in sent:
            cron.end_time = _aware(body.end_time)
        if "enabled" in sent and body.enabled is not None:
            cron.enabled = body.enabled
        if "on_run_completed" in sent and cron.thread_id is None:
            cron.on_run_completed = body.on_run_completed or "keep"
        if sent & {"schedule", "timezone", "end_time", "enabled"}:
            cron.next_run_date = _next_run_date(cron, timezone.now())
        cron.save()
        _audit(actor, AuditAction.CRON_UPDATED, cron, details={**_described(cron), "changed": changed})
    return cron


def cron_deletable(actor: permissions.Principal, cron: Cron) -> bool:
    """Its owner, or a user administrator (an owner who left keeps no cron alive)."""
    return bool(cron.owner_id == actor.pk or permissions.can(actor, MANAGE_USERS))


def cron_delete(*, actor: User, cron_id: Any) -> None:
    """``crons.delete`` (and the console's Delete): by ``cron_deletable``'s users."""
    with transaction.atomic():
        cron = _cron_for(actor, cron_id, lock=True)
        if not cron_deletable(actor, cron):
            raise Forbidden("only its owner or a user administrator deletes a cron", field="cron_id")
        _audit(actor, AuditAction.CRON_DELETED, cron, details=_described(cron))
        cron.delete()


def _described(cron: Cron) -> dict[str, Any]:
    """A cron as its audit events record it (``payload`` masked on the way out, like any state they quote)."""
    return {
        "schedule": cron.schedule,
        "timezone": cron.timezone or "UTC",
        "enabled": cron.enabled,
        "end_time": cron.end_time.isoformat() if cron.end_time else None,
        "owner": cron.owner.get_username(),
        "payload": cron.payload,
        "metadata": cron.metadata,
    }


def _audit(actor: User, action: AuditAction, cron: Cron, *, details: dict[str, Any], thread_id: Any = None) -> None:
    audit_record(
        actor=actor,
        action=action,
        subject_type="cron",
        subject_id=cron.id,
        thread_id=thread_id or cron.thread_id,
        graph=cron.graph,
        details=details,
    )


# --- reading -------------------------------------------------------------------------------------------


def crons_visible(user: permissions.Principal) -> QuerySet[Cron]:
    """The crons on the graphs ``user`` may see (a thread's cron: its thread's graph)."""
    graphs = permissions.graphs_visible(user)
    crons = Cron.objects.select_related("owner")
    return crons if graphs is None else crons.filter(graph__in=graphs)


def _cron_for(user: permissions.Principal, cron_id: Any, *, lock: bool = False) -> Cron:
    try:
        key = uuid.UUID(str(cron_id))
    except ValueError:
        raise InvalidInput(f"{cron_id!r} is not a UUID", field="cron_id") from None
    crons = crons_visible(user)
    cron = (crons.select_for_update(of=("self",)) if lock else crons).filter(pk=key).first()
    if cron is None:
        raise NotFound(f"cron {cron_id} not found", field="cron_id")
    return cron


def thread_crons(user: permissions.Principal, thread: Any) -> list[Cron]:
    """The crons that start runs on ``thread`` (already permission-checked), the next to fire first: its page
    shows who will start what and when (never their payloads)."""
    return _listed(user, crons_visible(user).filter(thread=thread))


def owned_crons(user: permissions.Principal, owner: Any) -> list[Cron]:
    """The crons ``owner`` made that ``user`` may see (a user's page: what goes on in their name)."""
    return _listed(user, crons_visible(user).filter(owner=owner))


def _listed(user: permissions.Principal, crons: QuerySet[Cron]) -> list[Cron]:
    """The next to fire first; each marked ``deletable`` by ``user`` (a page offers its Delete button)."""
    listed = list(crons.order_by(F("next_run_date").asc(nulls_last=True), "created_at"))
    for cron in listed:
        cron.deletable = cron_deletable(user, cron)  # type: ignore[attr-defined]
    return listed


def cron_get(user: permissions.Principal, cron_id: Any) -> CronOut:
    return cron_out(user, _cron_for(user, cron_id))


_SORTS = {
    "cron_id": "id",
    "assistant_id": "graph",
    "thread_id": "thread_id",
    "next_run_date": "next_run_date",
    "end_time": "end_time",
    "created_at": "created_at",
    "updated_at": "updated_at",
}


def _crons_matching(
    user: permissions.Principal,
    *,
    assistant_id: str | None,
    thread_id: str | None,
    enabled: bool | None,
    metadata: dict[str, Any] | None,
) -> QuerySet[Cron]:
    crons = crons_visible(user)
    if assistant_id:
        try:
            crons = crons.filter(graph=platform.assistant_graph(user, assistant_id))
        except NotFound:
            return crons.none()
    if thread_id:
        try:
            crons = crons.filter(thread_id=uuid.UUID(thread_id))
        except ValueError:
            raise InvalidInput(f"{thread_id!r} is not a UUID", field="thread_id") from None
    if enabled is not None:
        crons = crons.filter(enabled=enabled)
    return platform.json_keys_equal(crons, "metadata", metadata) if metadata else crons


def crons_search(
    user: permissions.Principal,
    *,
    assistant_id: str | None = None,
    thread_id: str | None = None,
    enabled: bool | None = None,
    metadata: dict[str, Any] | None = None,
    limit: int = 10,
    offset: int = 0,
    sort_by: str | None = None,
    sort_order: str | None = None,
) -> list[CronOut]:
    """``crons.search``: newest first unless sorted otherwise; payloads revealed in one audited reading."""
    crons = _crons_matching(user, assistant_id=assistant_id, thread_id=thread_id, enabled=enabled, metadata=metadata)
    column = F(_SORTS[sort_by or "created_at"])
    ordered = column.asc(nulls_last=True) if sort_order == "asc" else column.desc(nulls_last=True)
    page = list(crons.order_by(ordered, "id")[offset : offset + limit])
    with gateway.reveals_gathered(user, reading="cron:search"):
        return [cron_out(user, cron) for cron in page]


def crons_count(
    user: permissions.Principal,
    *,
    assistant_id: str | None = None,
    thread_id: str | None = None,
    enabled: bool | None = None,
    metadata: dict[str, Any] | None = None,
) -> int:
    return _crons_matching(
        user, assistant_id=assistant_id, thread_id=thread_id, enabled=enabled, metadata=metadata
    ).count()


def cron_out(user: permissions.Principal, cron: Cron) -> CronOut:
    payload, _ = gateway.guard(
        user, cron.graph, cron.payload, subject=f"cron:{cron.id}", thread_id=cron.thread_id, quoted=()
    )
    return CronOut(
        cron_id=str(cron.id),
        assistant_id=platform.assistant_id_for(cron.graph),
        thread_id=str(cron.thread_id) if cron.thread_id else None,
        on_run_completed=cron.on_run_completed or None,
        end_time=cron.end_time,
        schedule=cron.schedule,
        timezone=cron.timezone or None,
        created_at=cron.created_at,
        updated_at=cron.updated_at,
        # The body it was made from, as LangGraph Server keeps it (with its assistant and schedule).
        payload={"assistant_id": platform.assistant_id_for(cron.graph), "schedule": cron.schedule, **payload},
        user_id=cron.owner.get_username(),
        next_run_date=cron.next_run_date,
        metadata=cron.metadata,
        enabled=cron.enabled,
    )


# --- firing --------------------------------------------------------------------------------------------


def crons_fire(*, now: datetime | None = None) -> FireResult:
    """Fire every cron that is due (the beat's ``lgplatform.fire_crons``), each in its own transaction."""
    now = now or timezone.now()
    result = FireResult()
    due = Cron.objects.filter(enabled=True, next_run_date__lte=now).order_by("next_run_date")
    for cron_id in list(due.values_list("pk", flat=True)[:SWEEP_LIMIT]):
        try:
            outcome = cron_fire(cron_id=cron_id, now=now)
        except Exception:  # one cron's failure must not stop the others' firings (logged; retried next sweep)
            log.exception("cron %s: firing failed", cron_id)
            continue
        result.fired += outcome == "fired"
        result.skipped += outcome == "skipped"
    return result


def cron_fire(*, cron_id: Any, now: datetime) -> str | None:
    """Start the due run of one cron as its owner: "fired", "skipped" (audited with why), or None when it is
    not due or another sweeper has it. Its next time is set in the same transaction as the run."""
    with transaction.atomic():
        cron = (
            Cron.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("owner")
            .filter(pk=cron_id, enabled=True, next_run_date__lte=now)
            .first()
        )
        if cron is None:
            return None
        due = cron.next_run_date
        assert due is not None  # noqa: S101 - the row was selected for next_run_date <= now
        nxt = _next_run_date(cron, now)  # after now: a sweep that was down fires a missed time once
        # SQLite has no row locks: the conditional update decides who fires (PostgreSQL: the lock already has).
        if not Cron.objects.filter(pk=cron.pk, next_run_date=due).update(next_run_date=nxt, updated_at=now):
            return None
        try:
            with transaction.atomic():  # a refused start leaves nothing behind but the skip's record
                run = _fire(cron)
        except DomainError as refusal:
            _skipped(cron, due, refusal)
            return "skipped"
        details: dict[str, Any] = {
            "due": due.isoformat(),
            "run": str(run.id),
            "thread": str(run.thread_id),
        }
        if cron.skipped_count:  # the firings skipped since the last run, for the record
            details["skipped_before"] = {"count": cron.skipped_count, "reason": cron.skipped_reason}
            Cron.objects.filter(pk=cron.pk).update(skipped_reason="", skipped_count=0)
        _audit(cron.owner, AuditAction.CRON_FIRED, cron, thread_id=run.thread_id, details=details)
        log.info("cron %s: fired run %s on thread %s", cron.id, run.id, run.thread_id)
        return "fired"


def _skipped(cron: Cron, due: datetime, refusal: DomainError) -> None:
    """A firing that could not start: audited with why, once per reason — the same reason again (a thread still
    waiting for its reviewer) is counted on the cron, and the count goes in the next event about it."""
    reason = refusal.message[:500]
    log.info("cron %s: firing skipped: %s", cron.id, reason)
    if reason == cron.skipped_reason:
        Cron.objects.filter(pk=cron.pk).update(skipped_count=F("skipped_count") + 1)
        return
    details: dict[str, Any] = {"due": due.isoformat(), "reason": reason, "field": refusal.field}
    if cron.skipped_count > 1:
        details["skipped_before"] = {"count": cron.skipped_count, "reason": cron.skipped_reason}
    Cron.objects.filter(pk=cron.pk).update(skipped_reason=reason, skipped_count=1)
    _audit(cron.owner, AuditAction.CRON_SKIPPED, cron, details=details)


def _fire(cron: Cron) -> Any:
    """The run of one firing, as the owner, with the owner's permissions as they are now."""
    owner = cron.owner
    if not owner.is_active:
        raise Forbidden(f"its owner {owner.get_username()} is deactivated", field="owner")
    payload = {**cron.payload, "metadata": {**(cron.payload.get("metadata") or {}), CRON_METADATA_KEY: str(cron.id)}}
    body = _run_body(cron.graph, payload, thread=cron.thread_id is not None)
    # Before the run is made: a stateless cron's new thread would be refused first, with a vaguer reason
    # ("you may not create threads") than the skip should record ("... start threads").
    _payload_check(owner, cron.graph, payload, thread=cron.thread_id is not None)
    thread_id = cron.thread_id or uuid.uuid4()
    return run_create_recorded(owner, thread_id, body, stream=published_modes(body))
