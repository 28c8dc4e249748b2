"""``threads.join_stream`` (``GET /lg/threads/{id}/stream``): the runs of a thread as one stream.

Modes (``stream_mode``, repeatable, as langgraph_sdk sends them; LangGraph Server's comma-separated
``stream_modes`` too):

- ``run_modes`` (the default): each run's stream as ``runs.join_stream`` sends it — ``metadata``
  ``{"run_id", "attempt"}``, its chunks (the modes the run publishes, masked for the reader; a run that
  publishes none, its final values), ``error`` if it failed — and then ``metadata``
  ``{"status": "run_done", "run_id"}`` where a run's stream sends ``end``;
- ``lifecycle``: only those two ``metadata`` events of each run;
- ``state_update``: ``state_update`` ``{"state", "thread_id"}`` when the thread's state is updated
  (``threads.update_state``), the state as this reader may see it.

Which runs: those active when the stream is joined, each from its start (a late joiner misses nothing;
LangGraph Server sends only what follows the join), and every run created on the thread after. Resumed
with ``Last-Event-ID`` (``_resumed``): the run whose log holds the id from after it, then every run created
after that one from its start; a run log's ids order a thread's runs (SQLite's one sequence, Redis's
millisecond ids), and ``0`` is before them all. Only chunks carry ids: the ``metadata`` events and
``state_update`` do not, so a resumed stream sends the run_done of the run it resumes in again, and no
state update from before it was joined.

The stream ends after ``GATEHOUSE_PLATFORM_WAIT_SECONDS`` (LangGraph Server's never ends): join again
with the last event id to go on. Gatehouse's own ``follow=false`` ends it once the runs it found have
settled: what happened after an id, and nothing new. A stream starts with the comment ``: joined``,
after which nothing on the thread is missed. The run logs are read as ``lgplatform.stream`` reads them;
the database says when a run settles or a new one is queued (on the thread's notification, or within
``runtime.notify.FALLBACK_SECONDS``).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Max, Q
from django.utils import timezone

from approvals import permissions
from approvals.errors import InvalidInput
from approvals.models import AuditAction, AuditEvent
from lgplatform.services import thread_get_for, thread_state
from lgplatform.stream import (
    Follower,
    Heartbeat,
    LogTail,
    id_key,
    logs_followed,
    run_outcome,
    run_rest,
    run_started,
    shield_for,
    sse,
)
from runtime.models import ACTIVE_RUN_STATUSES, Run
from runtime.notify import ThreadWatch, between_waits
from runtime.stream import TTL_SECONDS

THREAD_MODES = ("run_modes", "lifecycle", "state_update")


def thread_stream_modes_parse(asked: Iterable[str], *, field: str = "stream_mode") -> set[str]:
    """The modes asked for (``run_modes`` if none); an unknown one is a 422 naming ``field``."""
    modes = {m.strip() for value in asked for m in value.split(",") if m.strip()}
    unknown = sorted(modes - set(THREAD_MODES))
    if unknown:
        raise InvalidInput(
            f"unknown stream_mode {', '.join(unknown)} (a thread's stream has: {', '.join(THREAD_MODES)})",
            field=field,
        )
    return modes or {"run_modes"}


def run_done(run_id: Any) -> bytes:
    return sse("metadata", {"status": "run_done", "run_id": str(run_id)})


@dataclass
class _Followed:
    """One run of the thread, as this stream follows it."""

    run: Run
    follower: Follower
    tail: LogTail
    announce: bool  # the reader has not had this run's ``metadata`` (nor any of its chunks)


@dataclass
class _Joined:
    """The thread as the stream found it: the runs to follow at once, and where new runs and state updates start."""

    runs: list[Run]
    known: set[Any]  # runs at the newest creation time seen: not new, though not older than ``since``
    since: datetime.datetime | None  # a run created at or after this (and not known) is new
    updates_after: int  # the thread's newest ``thread.state_updated`` audit event


def _joined(user: permissions.Principal, thread_id: Any, after: str | None) -> _Joined:
    thread = thread_get_for(user, thread_id)
    runs = thread.runs.order_by("created_at", "id")
    since = runs.aggregate(newest=Max("created_at"))["newest"]
    following = Q(status__in=ACTIVE_RUN_STATUSES)
    if after is not None:  # settled runs whose log may still hold entries after the id
        following |= Q(created_at__gte=timezone.now() - datetime.timedelta(seconds=TTL_SECONDS))
    newest = AuditEvent.objects.filter(thread_id=thread.pk, action=AuditAction.THREAD_STATE_UPDATED)
    return _Joined(
        runs=list(runs.filter(following)),
        known=set(runs.filter(created_at=since).values_list("pk", flat=True)) if since else set(),
        since=since,
        updates_after=newest.aggregate(last=Max("id"))["last"] or 0,
    )


def _runs_now(thread_id: Any, following: Iterable[Any], since: datetime.datetime | None) -> list[Run]:
    """The followed runs as they are now, the active ones, and those created since the join (all of the
    thread's when it had none then); oldest first."""
    runs = Run.objects.filter(thread_id=thread_id).order_by("created_at", "id")
    if since is None:
        return list(runs)
    return list(runs.filter(Q(pk__in=list(following)) | Q(status__in=ACTIVE_RUN_STATUSES) | Q(created_at__gte=since)))


def _state_updates(user: permissions.Principal, thread_id: Any, after: int) -> list[tuple[int, dict[str, Any]]]:
    """The thread's state updates after audit event ``after``: each the state it made, as ``user`` sees it."""
    events = AuditEvent.objects.filter(thread_id=thread_id, action=AuditAction.THREAD_STATE_UPDATED, id__gt=after)
    updates = []
    for event_id, details in events.order_by("id").values_list("id", "details"):
        state = thread_state(user, thread_id, str((details or {}).get("checkpoint_id") or "") or None)
        updates.append((event_id, {"state": state.model_dump(mode="json"), "thread_id": str(thread_id)}))
    return updates


async def thread_stream_events(
    *,
    user: permissions.Principal,
    thread_id: Any,
    modes: set[str],
    after: str | None,
    limit: float,
    follow: bool = True,
) -> AsyncIterator[bytes]:
    """The thread's runs (see the module doc) until ``limit`` seconds have passed or the client leaves; with
    ``follow`` false, until the runs it found have settled."""
    deadline = time.monotonic() + limit
    heartbeat = Heartbeat()
    chunks = "run_modes" in modes
    announced = bool(modes & {"run_modes", "lifecycle"})
    followed: dict[Any, _Followed] = {}
    done: set[Any] = set()
    try:
        async with ThreadWatch(thread_id) as watch:
            joined = await between_waits(_joined)(user, thread_id, after)
            at_join = {run.pk for run in joined.runs}
            done |= joined.known - at_join
            updates_after = joined.updates_after
            runs = joined.runs
            plan = await _resumed(runs, after) if after is not None else {}
            yield b": joined\n\n"  # what follows is followed: a client may now start what it waits for
            while True:
                for run in runs:
                    if run.pk in done:
                        continue
                    seen = followed.get(run.pk)
                    if seen is None:
                        if after is not None and run.pk in at_join and run.pk not in plan:
                            done.add(run.pk)  # the reader had all of it
                            continue
                        seen = await _follow(user, thread_id, run, chunks, plan.get(run.pk))
                        followed[run.pk] = seen
                        if announced and seen.announce:
                            yield run_started(run)
                    seen.run = run
                    if run.status in ACTIVE_RUN_STATUSES:
                        continue
                    if chunks:
                        async for chunk in run_rest(seen.follower, seen.tail):
                            yield chunk
                        seen.tail.close()
                        async for chunk in run_outcome(
                            user=user, thread_id=thread_id, run=run, follower=seen.follower, tail=seen.tail
                        ):
                            yield chunk
                    if announced:
                        yield run_done(run.pk)
                    del followed[run.pk]
                    done.add(run.pk)
                if "state_update" in modes:
                    for event_id, update in await between_waits(_state_updates)(user, thread_id, updates_after):
                        updates_after = event_id
                        yield sse("state_update", update)
                if watch.ended or not (follow or followed):
                    return
                if time.monotonic() >= deadline:
                    yield f": {limit:.0f}s are up: join again with the last event id (Last-Event-ID)\n\n".encode()
                    return
                # follow the active runs' logs until the watch says the thread changed
                pairs = [(seen.follower, seen.tail) for seen in followed.values()]
                async for chunk in logs_followed(pairs, watch, deadline, heartbeat):
                    yield chunk
                runs = await between_waits(_runs_now)(thread_id, followed, joined.since)
    finally:
        for seen in followed.values():
            seen.tail.close()


async def _follow(user: permissions.Principal, thread_id: Any, run: Run, chunks: bool, after: str | None) -> _Followed:
    """Start following ``run``: from its start (announced), or after ``after``."""
    shield, run = await between_waits(shield_for)(user, thread_id, run.pk)
    published = (run.stream or {}).get("modes") or []
    tail = LogTail(str(run.pk), published=chunks and bool(published))
    if after is None:
        return _Followed(run, Follower(shield, set(published or ["values"]), None), tail, announce=True)
    return _Followed(run, Follower(shield, set(published), after), tail, announce=False)


async def _resumed(runs: list[Run], after: str) -> dict[Any, str | None]:
    """Where a stream resumed after ``after`` takes up each run (oldest first): ``None`` from its start, the id
    after it, absent when the reader had all of it. The run whose log holds the id is taken up after it (its
    ``run_done`` sent again: it carries no id), those created after it from their start, and those before it
    only for what their logs hold after the id (runs that overlapped). An id before every log: all from the start."""
    heads = {}
    for run in runs:
        if (run.stream or {}).get("modes"):
            tail = LogTail(str(run.pk), published=True)
            heads[run.pk] = await tail.rest("0")
    anchor = max(
        (i for i, run in enumerate(runs) if heads.get(run.pk) and id_key(heads[run.pk][0].id) <= id_key(after)),
        default=-1,
    )
    plan: dict[Any, str | None] = {run.pk: None for run in runs[anchor + 1 :]}
    if anchor >= 0:
        plan[runs[anchor].pk] = after
    for run in runs[: max(anchor, 0)]:
        later = heads.get(run.pk) and await LogTail(str(run.pk), published=True).rest(after)
        if later or run.status in ACTIVE_RUN_STATUSES:
            plan[run.pk] = after
    return plan
