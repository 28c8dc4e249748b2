"""``/lg/`` run streams: the worker's chunks (``runtime.stream``) as server-sent events, masked for the reader.

``POST /threads/{id}/runs/stream`` records the modes the client asked for on
the run (in the transaction that enqueues it), so the worker publishes them;
``GET /threads/{id}/runs/{run_id}/stream`` joins a run's stream, from its start
or after ``Last-Event-ID``. Both send ``metadata``, then each chunk as LangGraph
Server names it (``values``, ``updates``, ``messages/partial``, ``debug|<ns>``,
...), then an ``error`` if the run failed, then ``end`` once the run has
settled: every chunk is published before the run's outcome commits, so the
log is complete when the outcome is.

Masking (``Shield``): a reader without the right to see sensitive fields gets
every chunk through ``redaction.redact`` with the graph's sensitive paths,
exactly as ``values`` are masked everywhere (paths match at any depth, so a
masked field is masked inside an update, a debug checkpoint, a task's input or
result, an event's input or output, a message's tool-call arguments). Messages
are also masked as if they stood at any state key a path names
(``messages[*].content`` masks a streamed message's content). Free text —
message content, custom and event strings — is masked by the values found at
sensitive paths so far (the thread's, the run's input and command, each update),
and streamed text is held back while it ends with the start of one, so no
token reveals a piece of a value. A permitted reader sees chunks unmasked; a
chunk that shows them a sensitive field the stream has not shown them before is
audited (``gateway.guard``, with the chunk's fields), the others are not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import json
import logging
import re
import time
import typing
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from pydantic import BaseModel

from approvals import gateway, permissions
from approvals.errors import InvalidInput
from approvals.redaction import MASK, path_parse, redact, redacted_values, state_redact, strings_masked, text_mask
from lgplatform.services import run_error_out, run_progress, thread_state
from runtime.models import ACTIVE_RUN_STATUSES, Run, RunStatus, Thread
from runtime.notify import ThreadWatch, between_waits
from runtime.registry import UnknownGraph, graph_get
from runtime.state_schema import schema_fields
from runtime.stream import CLIENT_MODES, Entry, RunLogUnreadable, event_mode, run_log, run_stream_request

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 10.0  # a comment line this often keeps proxies from closing an idle stream
READ_WAIT_SECONDS = 5.0
# Modes whose chunks are free text or arbitrary data rather than state: also masked by value.
_FREE_MODES = frozenset({"messages", "messages-tuple", "custom", "events"})
_CONTENT = frozenset({"content"})  # streamed text: masked as it is held back (``_HeldText``), not piece by piece


def stream_modes_parse(value: str | list[str] | None, *, field: str = "stream_mode") -> list[str]:
    """The modes asked for, in order, once each; an unknown one is a 422 naming ``field``."""
    modes = [value] if isinstance(value, str) else list(value or ["values"])
    unknown = [m for m in modes if m not in CLIENT_MODES]
    if unknown:
        raise InvalidInput(
            f"unknown stream_mode {', '.join(map(str, unknown))} (supported: {', '.join(CLIENT_MODES)})", field=field
        )
    return list(dict.fromkeys(modes))


def run_stream_record(*, run: Run, modes: list[str], subgraphs: bool) -> None:
    """Have the worker publish ``modes``; call in the transaction that created the run."""
    run_stream_request(run_id=run.pk, modes=modes, subgraphs=subgraphs)
    run.stream = {"modes": sorted(set(modes)), "subgraphs": subgraphs}


def sse(event: str, data: Any, entry_id: str | None = None) -> bytes:
    head = f"id: {entry_id}\n" if entry_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, cls=DjangoJSONEncoder)}\n\n".encode()


def _sse_raw(event: str, data: str, entry_id: str) -> bytes:
    return f"id: {entry_id}\nevent: {event}\ndata: {data}\n\n".encode()


# --- masking ----------------------------------------------------------------------------------------


class _HeldText:
    """Streamed text masked by known values, never showing the start of one before it is complete.

    The text of a stream (``key``) is masked as a whole; what is shown stops where
    the text so far ends with a proper prefix of a known value (or inside a value
    it contains), until more text settles it or the stream is flushed.
    """

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.raw: dict[str, str] = {}
        self.shown: dict[str, int] = {}  # length of the masked text sent so far (deltas)

    def _settled(self, raw: str) -> str:
        if not self.known:
            return raw
        lower = raw.lower()
        held = 0
        for value in self.known:
            value = value.lower()
            for size in range(min(len(value) - 1, len(lower)), held, -1):
                if lower.endswith(value[:size]):
                    held = size
                    break
        cut = len(raw) - held
        pattern = "|".join(re.escape(v) for v in sorted(self.known, key=lambda v: (-len(v), v)))
        for match in re.finditer(pattern, raw, flags=re.IGNORECASE):
            if match.start() < cut < match.end():
                cut = match.start()
        return raw[:cut]

    def whole(self, key: str, text: str, *, final: bool) -> str:
        """The masked text so far (for events that carry the whole text each time)."""
        self.raw[key] = text
        return text_mask(text if final else self._settled(text), self.known)

    def delta(self, key: str, piece: str, *, final: bool) -> str:
        """The masked text this piece adds (for events that carry a piece each time)."""
        raw = self.raw.get(key, "") + piece
        self.raw[key] = raw
        masked = text_mask(raw if final else self._settled(raw), self.known)
        sent = self.shown.get(key, 0)
        self.shown[key] = max(sent, len(masked))
        return masked[sent:]


class Shield:
    """What one reader may see of a run's chunks (see the module doc)."""

    def __init__(self, user: permissions.Principal, thread: Thread, run: Run) -> None:
        self.user = user
        self.thread = thread
        self.run = run
        self.sensitive = gateway.sensitive_paths(thread.graph) if thread.graph else []
        self.masked = gateway.paths_masked_for(user, thread.graph) if self.sensitive else []
        self.revealed: set[str] = set()
        heads = {p[0] for p in map(path_parse, self.masked) if p and p[0] != "*"} | {"_"}
        keys = _message_keys(thread.graph) if self.masked else None
        # A message streams before the update that stores it: it is masked as if it stood at each key a
        # sensitive path names which can hold one ("messages[*].content", "history"); a key the schema
        # says cannot ("secret": str) would mask every message whole for a value its text masks anyway.
        self._message_heads = heads if keys is None else heads & (keys | {"_"})
        known: set[str] = set()
        if self.masked:
            known = gateway.thread_redacted_values(thread) | redacted_values([run.input, run.command], self.masked)
        self.text = _HeldText(known)
        self._held: dict[str, tuple[str, Any]] = {}  # streamed text not all shown yet: key → (event, last data)

    @property
    def plain(self) -> bool:
        """Nothing to mask or audit: chunks go out as published."""
        return not self.sensitive

    @property
    def audits(self) -> bool:
        """Showing a chunk may write an audit event (a permitted reader): call ``shown`` off the event loop."""
        return bool(self.sensitive) and not self.masked

    def shown(self, event: str, data: Any) -> list[tuple[str, Any]]:
        """The events to send for one published event (none, it, or it and flushed held text)."""
        if not self.sensitive:
            return [(event, data)]
        if not self.masked:
            _, applied = redact(data, self.sensitive)
            if set(applied) - self.revealed:
                gateway.guard(
                    self.user, self.thread.graph, data, subject=f"run:{self.run.pk}", thread_id=self.thread.pk
                )
                self.revealed.update(applied)
            return [(event, data)]
        self.text.known.update(redacted_values(data, self.masked))
        mode = event_mode(event)
        out: list[tuple[str, Any]] = []
        if mode == "updates":
            out.extend(self.flush())  # a node finished: the text it streamed is settled
        if mode in _FREE_MODES:
            masked = self._free(event, redact(data, self.masked)[0])
        else:  # state (values, an update, a checkpoint, a task's input or result): its messages masked as values
            masked = state_redact(data, self.masked, quoted=self.text.known)[0]
        out.append((event, masked))
        return out

    def flush(self) -> list[tuple[str, Any]]:
        """Held text of streamed messages, now shown (a node ended, or the stream does)."""
        out: list[tuple[str, Any]] = []
        for key in list(self._held):
            event, template = self._held.pop(key)
            kind = key[0]
            if kind == "m":  # the whole message, its whole text
                out.append(
                    (event, [{**template, "content": self.text.whole(key, self.text.raw.get(key, ""), final=True)}])
                )
                continue
            rest = self.text.delta(key, "", final=True)
            if not rest:
                continue
            if kind == "t":  # a tuple: the rest of the text as one more piece
                message, metadata = template
                out.append((event, [{**message, "content": rest}, metadata]))
            else:  # an on_chat_model_stream event
                chunk = {**template["data"]["chunk"], "content": rest}
                out.append((event, {**template, "data": {**template["data"], "chunk": chunk}}))
        return out

    # --- free text ---

    def _message(self, message: Any) -> Any:
        """A message masked as if it stood at any state key a sensitive path starts with."""
        if not isinstance(message, dict):
            return message
        for head in self._message_heads:
            wrapped = redact({head: [message]}, self.masked)[0][head]
            if wrapped == MASK or wrapped == [MASK]:
                return {"type": message.get("type"), "id": message.get("id"), "content": MASK}
            message = wrapped[0]
        return message

    def _streamed(self, key: str, event: str, holder: Any, piece: str, *, whole: bool, final: bool) -> str:
        """Text shown for one piece of streamed text; remembers where held text would go."""
        shown = self.text.whole(key, piece, final=final) if whole else self.text.delta(key, piece, final=final)
        if final:
            self._held.pop(key, None)
        else:
            self._held[key] = (event, holder)
        return shown

    def _free(self, event: str, data: Any) -> Any:
        name = event.split("|", 1)[0]
        known = self.text.known
        if name in ("messages/partial", "messages/complete") and isinstance(data, list):
            out = []
            for message in map(self._message, data):
                if isinstance(message, dict) and isinstance(message.get("content"), str):
                    key, final = f"m:{message.get('id')}", name == "messages/complete"
                    message = strings_masked(message, known, kept=_CONTENT)
                    message["content"] = self._streamed(
                        key, event, message, message["content"], whole=True, final=final
                    )
                else:
                    message = strings_masked(message, known)
                out.append(message)
            return out
        if name == "messages" and isinstance(data, list) and len(data) == 2:
            message, metadata = self._message(data[0]), strings_masked(data[1], known)
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                key = f"t:{message.get('id')}"
                final = message.get("chunk_position") == "last" or not str(message.get("type", "")).endswith("Chunk")
                message = strings_masked(message, known, kept=_CONTENT)
                message["content"] = self._streamed(
                    key, event, [message, metadata], message["content"], whole=False, final=final
                )
            else:
                message = strings_masked(message, known)
            return [message, metadata]
        if (
            name == "events"
            and isinstance(data, dict)
            and data.get("event") in ("on_chat_model_stream", "on_llm_stream")
        ):
            chunk = (data.get("data") or {}).get("chunk")
            if isinstance(chunk, dict) and isinstance(chunk.get("content"), str):
                data = strings_masked(data, known, kept=_CONTENT)
                key = f"e:{data.get('run_id')}"
                data["data"]["chunk"]["content"] = self._streamed(
                    key, event, data, chunk["content"], whole=False, final=False
                )
                return data
        return strings_masked(data, known)


def _message_keys(graph: str) -> set[str] | None:
    """The keys of ``graph``'s state whose declared type can hold a chat message (None: no schema to read)."""
    try:
        fields = schema_fields(graph_get(graph).state_schema)
    except (UnknownGraph, AttributeError, TypeError):
        return None
    return {key for key, hint in fields.items() if _can_hold_message(hint, set())}


_PLAIN = (str, bytes, int, float, bool, enum.Enum, datetime.date, datetime.time, decimal.Decimal, uuid.UUID)


def _can_hold_message(hint: Any, seen: set[int]) -> bool:
    """Whether a value of type ``hint`` may be or contain a message: yes unless its type rules it out
    (an opaque ``Any``, ``list`` or ``dict[str, Any]`` may hold anything)."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated or origin in (typing.Required, typing.NotRequired, typing.ClassVar):
        return _can_hold_message(typing.get_args(hint)[0], seen)
    if origin is typing.Literal:
        return False
    if origin is not None:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return not args or any(_can_hold_message(a, seen) for a in args)
    if hint is None or hint is type(None):
        return False
    if not isinstance(hint, type):
        return True  # Any, a type variable, a name that did not resolve
    from langchain_core.messages import BaseMessage  # the API's import does not load LangChain

    if issubclass(hint, BaseMessage):
        return True
    if issubclass(hint, _PLAIN):
        return False
    structured = typing.is_typeddict(hint) or dataclasses.is_dataclass(hint) or issubclass(hint, BaseModel)
    if not structured:
        return True  # list, dict, object: anything
    if id(hint) in seen:
        return False
    seen.add(id(hint))
    return any(_can_hold_message(h, seen) for h in schema_fields(hint).values())


# --- the SSE response -------------------------------------------------------------------------------


def shield_for(user: permissions.Principal, thread_id: Any, run_id: Any) -> tuple[Shield, Run]:
    thread, run = run_progress(user, thread_id, run_id)
    return Shield(user, thread, run), run


def id_key(entry_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in entry_id.split("-"))


class Follower:
    """Turns log entries into SSE bytes for one reader: filtered by mode, masked, resumable."""

    def __init__(self, shield: Shield, modes: set[str], after: str | None) -> None:
        self.shield = shield
        self.modes = modes
        # A masked reader's free text is masked with what the stream showed before: a resumed
        # stream replays the log from its start through the shield, sending only what follows.
        self.replay_until = id_key(after) if after and shield.masked else None
        self.cursor = "0" if self.replay_until else (after or "0")
        # A resumed stream has had the values already, if they were published.
        self.values_sent = after is not None and "values" in ((shield.run.stream or {}).get("modes") or [])

    async def events(self, entries: list[Entry]) -> AsyncIterator[bytes]:
        shield = self.shield
        for entry in entries:
            self.cursor = entry.id
            mode = event_mode(entry.event)
            if shield.plain or (shield.audits and mode not in self.modes):
                if mode in self.modes:
                    self.values_sent |= entry.event == "values"
                    yield _sse_raw(entry.event, entry.data, entry.id)
                continue
            data = json.loads(entry.data)
            if shield.audits:
                shown = await between_waits(shield.shown)(entry.event, data)
            else:
                shown = shield.shown(entry.event, data)
            if self.replay_until is not None:
                if id_key(entry.id) <= self.replay_until:
                    continue  # the reader has this one
                self.replay_until = None
            for event, payload in shown:
                if event_mode(event) in self.modes:
                    self.values_sent |= event == "values"
                    yield sse(event, payload, entry.id)

    def flushed(self) -> list[bytes]:
        held = self.shield.flush() if self.shield.masked else []
        return [sse(event, payload) for event, payload in held if event_mode(event) in self.modes]


class LogTail:
    """The run's log as one stream reads it: at most one read in flight. The log is a fast path: the
    database says when the run settles and holds its final values, so a log that cannot be read is given
    up and the stream goes on from the database (chunks not read are not sent; the final values are)
    rather than dying mid-response, which leaves the client waiting out its own timeout."""

    def __init__(self, run_id: str, published: bool) -> None:
        self.run_id = run_id
        self.source = run_log()
        self.reading = published  # the worker publishes this run and its log has answered so far
        self.lost = False
        self.pending: asyncio.Task[list[Entry]] | None = None

    def read(self, cursor: str) -> asyncio.Task[list[Entry]] | None:
        """The read in flight, started after ``cursor`` if none is (``None`` when the log is not read)."""
        if self.reading and self.pending is None:
            self.pending = asyncio.ensure_future(self.source.read(self.run_id, cursor, wait=READ_WAIT_SECONDS))
        return self.pending

    def taken(self) -> list[Entry]:
        """The entries of the read in flight, which has completed."""
        read, self.pending = self.pending, None
        if read is None:
            return []
        try:
            return read.result()
        except RunLogUnreadable as exc:
            return self._given_up(exc)

    async def settled(self) -> list[Entry]:
        """Once the run has settled: what the read in flight got (the worker published everything before
        the outcome committed, so a read still waiting is cut short)."""
        read, self.pending = self.pending, None
        if read is None:
            return []
        if not read.done():
            read.cancel()
        try:
            return await read
        except asyncio.CancelledError:
            if (task := asyncio.current_task()) is not None and task.cancelling():
                raise  # the client went away: this stream is being cancelled, not just the read
            return []
        except RunLogUnreadable as exc:
            return self._given_up(exc)

    async def rest(self, cursor: str) -> list[Entry]:
        """The entries after ``cursor`` without waiting: ``[]`` at the log's end or once it is given up."""
        if not self.reading:
            return []
        try:
            return await self.source.read(self.run_id, cursor, wait=0)
        except RunLogUnreadable as exc:
            return self._given_up(exc)

    def close(self) -> None:
        if self.pending is not None and not self.pending.done():
            self.pending.cancel()

    def _given_up(self, exc: RunLogUnreadable) -> list[Entry]:
        self.reading, self.lost = False, True
        log.warning("run %s: streaming on without its log (%s); its final values end the stream", self.run_id, exc)
        return []


async def run_stream_events(
    *,
    user: permissions.Principal,
    thread_id: Any,
    run_id: Any,
    modes: Iterable[str],
    after: str | None,
    limit: float,
) -> AsyncIterator[bytes]:
    """``metadata``, the run's chunks of ``modes`` (after ``after``), ``error`` if it failed, then ``end``."""
    shield, run = await between_waits(shield_for)(user, thread_id, run_id)
    follower = Follower(shield, set(modes), after)
    if after is None:
        yield run_started(run)
    tail = LogTail(str(run_id), published=bool((run.stream or {}).get("modes")))
    deadline = time.monotonic() + limit
    heartbeat = Heartbeat()
    current = run
    try:
        async with ThreadWatch(thread_id) as watch:
            while True:
                _, current = await between_waits(run_progress)(user, thread_id, run_id)
                if current.status not in ACTIVE_RUN_STATUSES:
                    break
                if time.monotonic() >= deadline:
                    yield sse("error", _timeout_error(thread_id, run_id, limit))
                    yield sse("end", None)
                    return
                if watch.ended:
                    # The server stops (or the client left): the stream closes without its ``end``, which the
                    # SDK reads as a cut and answers by joining again after the last event id it got.
                    return
                # follow the log until the watch says the run may have settled
                async for chunk in logs_followed([(follower, tail)], watch, deadline, heartbeat):
                    yield chunk
        async for chunk in run_rest(follower, tail):
            yield chunk
    finally:
        tail.close()
    async for chunk in run_outcome(user=user, thread_id=thread_id, run=current, follower=follower, tail=tail):
        yield chunk
    yield sse("end", None)


class Heartbeat:
    """A comment line every ``HEARTBEAT_SECONDS`` keeps proxies from closing an idle stream."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def due_in(self, deadline: float) -> float:
        """Seconds until the next beat or ``deadline``, whichever comes first."""
        return max(0.0, min(deadline, self.last + HEARTBEAT_SECONDS) - time.monotonic())

    def beat(self) -> bytes | None:
        if time.monotonic() - self.last < HEARTBEAT_SECONDS:
            return None
        self.last = time.monotonic()
        return b": heartbeat\n\n"


async def logs_followed(
    followed: Iterable[tuple[Follower, LogTail]], watch: ThreadWatch, deadline: float, heartbeat: Heartbeat
) -> AsyncIterator[bytes]:
    """The chunks of runs' logs as they are written, until the watch says the thread changed (a run may have
    settled), the deadline, or a heartbeat's time. At most one read per log in flight, kept across calls."""
    followed = list(followed)
    while True:
        reads = {read for follower, tail in followed if (read := tail.read(follower.cursor)) is not None}
        waiting = asyncio.ensure_future(watch.changed(heartbeat.due_in(deadline)))
        done, _ = await asyncio.wait({waiting, *reads}, return_when=asyncio.FIRST_COMPLETED)
        for follower, tail in followed:
            if tail.pending is not None and tail.pending in done:
                async for chunk in follower.events(tail.taken()):
                    yield chunk
        if (beat := heartbeat.beat()) is not None:
            yield beat
        if waiting in done:
            return
        waiting.cancel()


def run_started(run: Run) -> bytes:
    """The ``metadata`` event a run's stream starts with."""
    return sse("metadata", {"run_id": str(run.pk), "attempt": max(run.attempts, 1)})


async def run_rest(follower: Follower, tail: LogTail) -> AsyncIterator[bytes]:
    """Once the run has settled: the chunks of its log not yet read, and free text held back for masking."""
    async for chunk in follower.events(await tail.settled()):
        yield chunk
    while entries := await tail.rest(follower.cursor):
        async for chunk in follower.events(entries):
            yield chunk
    for chunk in follower.flushed():
        yield chunk


async def run_outcome(
    *, user: permissions.Principal, thread_id: Any, run: Run, follower: Follower, tail: LogTail
) -> AsyncIterator[bytes]:
    """After a settled run's chunks: ``error`` if it failed, else its final values if the stream owes them."""
    if run.status == RunStatus.FAILED:
        yield sse("error", run_error_out(run.error, run.error_type))
    elif "values" in follower.modes and (not follower.values_sent or tail.lost):
        # Nothing streamed the values (a run nobody asked to publish, or a log that could not be
        # written), or the last of them may not have been read: the final state, with its interrupts,
        # as before streaming existed.
        state = await between_waits(thread_state)(user, thread_id)
        values = dict(state.values)
        if state.interrupts:
            values["__interrupt__"] = [i.as_streamed() for i in state.interrupts]
        yield sse("values", values)


async def events_ended(events: AsyncIterator[bytes], *, thread_id: Any, run_id: Any | None) -> AsyncIterator[bytes]:
    """``events``, ended by ``error`` (and a run's ``end``) if they fail: the response has started, so the server
    can no longer answer a 500, and a stream cut short without its ``end`` left its client waiting out its own
    timeout (120 s for langgraph-sdk) before joining the run again. The failure is logged as one. ``run_id``
    None: a thread's stream (``lgplatform.thread_stream``)."""
    try:
        async for chunk in events:
            yield chunk
    except Exception as exc:
        if run_id is None:
            log.exception("thread %s: its stream failed", thread_id)
            again = f"join the thread's stream again: GET /lg/threads/{thread_id}/stream with Last-Event-ID"
        else:
            log.exception("run %s: its stream failed", run_id)
            again = f"join the run: GET /lg/threads/{thread_id}/runs/{run_id}/join"
        yield sse("error", {"error": type(exc).__name__, "message": f"the stream failed on the server; {again}"})
        if run_id is not None:
            yield sse("end", None)


def _timeout_error(thread_id: Any, run_id: Any, limit: float) -> dict[str, Any]:
    return {
        "error": "TimeoutError",
        "message": f"run {run_id} is still running after {limit:.0f}s; "
        f"join it: GET /lg/threads/{thread_id}/runs/{run_id}/stream",
    }
