"""The edge every request crosses: one strict JSON reader and the bounds of numbers and ids.

Both APIs (``/api/`` and ``/lg/``), the signed webhooks and the console's JSON form fields
read request JSON through ``json_loads_strict``. It refuses, naming the JSON path, what
PostgreSQL or SQLite cannot store or what would crash a handler deeper down:

- NUL bytes (PostgreSQL text and jsonb cannot hold ``\\u0000``) and lone UTF-16
  surrogates (not encodable as UTF-8) in strings and object keys;
- non-finite numbers (``NaN``, ``Infinity``, ``1e309``): not JSON, refused by SQLite's
  ``JSON_VALID`` and PostgreSQL's jsonb;
- integers outside signed 64 bits, which no checkpointer or database column stores;
- nesting deeper than ``MAX_JSON_DEPTH``: Python's recursive encoders and validators
  raise ``RecursionError`` on deep documents.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any

from django.http import HttpRequest
from django.utils.dateparse import parse_date, parse_datetime
from ninja.parser import Parser
from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from approvals.errors import DomainError, InvalidInput

MAX_JSON_DEPTH = 64
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# Offsets past a million rows are not paging but probing; keyset cursors serve deep reads.
MAX_OFFSET = 1_000_000

# Query and path parameters, bounded so no database sees a number it cannot bind.
DbId = Annotated[int, Field(ge=1, le=INT64_MAX)]
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET)]
# A LangGraph checkpoint id (a UUID, version 6 in practice).
CHECKPOINT_ID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
CheckpointId = Annotated[str, Field(pattern=CHECKPOINT_ID_PATTERN, max_length=36)]
# What a task is bound to: a graph's checkpoint id (a UUID, with or without hyphens) or an external
# task's ``external-<32 hex>``. A decision naming anything else is malformed (422), not stale (409).
TASK_CHECKPOINT_ID_PATTERN = rf"^(?:external-[0-9a-f]{{32}}|[0-9a-fA-F]{{32}}|{CHECKPOINT_ID_PATTERN[1:-1]})$"


def _task_checkpoint(value: str) -> str:
    if not re.fullmatch(TASK_CHECKPOINT_ID_PATTERN, value):
        raise PydanticCustomError("checkpoint_id", "not a checkpoint id: send the task's checkpoint_id as shown")
    return value


TaskCheckpointId = Annotated[str, Field(max_length=64), AfterValidator(_task_checkpoint)]


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        # A time without a zone names no instant (a deadline read as UTC is hours off for its sender),
        # and comparing it with the aware clock raises deep in a service.
        raise PydanticCustomError("naive_datetime", "give a time zone, e.g. Z or +02:00")
    if not instant_in_range(value):
        raise PydanticCustomError("datetime_range", OUT_OF_RANGE)
    return value


OUT_OF_RANGE = "is out of range: its UTC time must fall between 0001-01-01 and 9999-12-31"


def instant_in_range(value: datetime) -> bool:
    """Whether ``value`` (aware, or naive read as UTC) has a UTC time Python can represent.

    ``9999-12-31T23:59:59-12:00`` parses, but its UTC time is in the year 10000: converting it, as
    every database write, comparison in SQL and range arithmetic does, raises ``OverflowError``.
    """
    if value.tzinfo is None:
        return True
    try:
        value.astimezone(UTC)
    except OverflowError:
        return False
    return True


def instant_check(value: datetime, *, field: str) -> datetime:
    """``value``, or ``InvalidInput`` (422) naming ``field`` when its UTC time is out of range."""
    if not instant_in_range(value):
        raise InvalidInput(f"{field}: {OUT_OF_RANGE}", field=field)
    return value


def instant_parse(value: str, name: str, *, end: bool) -> datetime:
    """An ISO 8601 date or date and time (UTC when no offset), or ``InvalidInput`` naming ``name``.

    A bare date is a whole day, as a person means it: as a window's start its midnight, as its (exclusive)
    end the next midnight, so ``since=D&until=D`` is the day D. One rule for every since/until: the audit
    trail (page, API, export), the decision history and the dashboard.
    """
    when: datetime | None = None
    try:
        # A bare date first: parse_datetime (fromisoformat) would read "2026-06-01" as its midnight.
        day = parse_date(value) if len(value) == 10 else None
        if day is not None:
            when = datetime(day.year, day.month, day.day, tzinfo=UTC)
            if end:
                # The next midnight; for 9999-12-31 that is in the year 10000, so the last instant there is
                # (it was refused as out of 0001-01-01..9999-12-31, a range the date is in).
                when = when + timedelta(days=1) if day < date.max else datetime.max.replace(tzinfo=UTC)
        else:
            when = parse_datetime(value)
    except ValueError:
        when = None
    if when is None:
        raise InvalidInput(f"{name}: not an ISO 8601 date or date and time", field=name)
    return instant_check(when if when.tzinfo else when.replace(tzinfo=UTC), field=name)


def range_check(since: datetime | None, until: datetime | None) -> None:
    """A time window [since, until) must be one: ``since`` before ``until`` when both are given. A window
    the wrong way round matches nothing, and an empty list read as "nothing happened then"."""
    if since is not None and until is not None and since >= until:
        raise InvalidInput("since: must be before until", field="since")


_ISO_DATE_START = re.compile(r"\d{4}-\d{2}-\d{2}")


def _iso_text(value: Any) -> Any:
    # pydantic reads a number, or a string of digits, as Unix time: "starts_at": 1 was 1970-01-01T00:00:01Z.
    if isinstance(value, datetime) or (isinstance(value, str) and _ISO_DATE_START.match(value)):
        return value
    raise PydanticCustomError("datetime_iso", "give an ISO 8601 date and time, e.g. 2026-12-24T09:00:00Z")


# A date-time body field: an ISO 8601 string (not a number) with an offset, else 422 naming it.
AwareDatetime = Annotated[datetime, BeforeValidator(_iso_text), AfterValidator(_aware)]


def _uuid_read(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return uuid.UUID(value)
    except ValueError:
        raise PydanticCustomError("uuid_parsing", "must be a UUID") from None


# An id as LangGraph Server reads one in a path: any form ``uuid.UUID()`` reads (upper case, without
# hyphens, braced, ``urn:uuid:``); anything else is a 422 naming the parameter, never a 404 of routing.
AnyUuid = Annotated[uuid.UUID, BeforeValidator(_uuid_read)]

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class MalformedJson(DomainError):
    status = 400
    code = "malformed_json"


class UnsupportedMediaType(DomainError):
    status = 415
    code = "unsupported_media_type"


# application/json and the structured-syntax suffix application/*+json (RFC 6839), any parameters.
_JSON_MEDIA_TYPE = re.compile(r"application/(?:[!#$&^\w.+-]+\+)?json", re.IGNORECASE)


def json_media_type_check(request: HttpRequest) -> None:
    """Refuse a body that says it is not JSON (415 naming ``Content-Type``); one that says nothing is JSON.

    A text/plain body was read as JSON all the same (a thread created from it), and a form was
    "malformed JSON".
    """
    media = request.META.get("CONTENT_TYPE", "").split(";", 1)[0].strip()
    if media and not _JSON_MEDIA_TYPE.fullmatch(media):
        shown = media if len(media) <= 100 else media[:100] + "…"
        raise UnsupportedMediaType(
            f"Content-Type: {shown!r} is not JSON; send the body as application/json", field="Content-Type"
        )


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    return "contains a NUL byte" if found.group() == "\x00" else "contains an unpaired UTF-16 surrogate"


def _key_label(key: str) -> str:
    # A key that carries the problem is named escaped, so the field itself is printable.
    return json.dumps(key)[1:-1] if text_problem(key) else key


def json_check(value: Any, *, field: str = "") -> None:
    """Refuse what cannot be stored or safely processed, naming the first offending path (``a.b[0]``).

    Iterative, so a deep document fails on the depth limit and never on the interpreter's stack.
    """
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        item, path, depth = stack.pop()
        where = path or "body"
        if isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise InvalidInput(f"{where}: nested deeper than {MAX_JSON_DEPTH} levels", field=where)
            if isinstance(item, dict):
                children = []
                for key, child in item.items():
                    name = f"{path}.{_key_label(str(key))}" if path else _key_label(str(key))
                    problem = text_problem(str(key))
                    if problem:
                        raise InvalidInput(f"{name}: the key {problem}", field=name)
                    children.append((child, name, depth + 1))
            else:
                children = [(child, f"{path}[{i}]" if path else f"[{i}]", depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))
        elif isinstance(item, str):
            problem = text_problem(item)
            if problem:
                raise InvalidInput(f"{where}: the text {problem}", field=where)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                raise InvalidInput(f"{where}: integer outside the signed 64-bit range", field=where)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInput(f"{where}: numbers must be finite (no NaN, Infinity or overflow)", field=where)


def json_loads_strict(raw: bytes | str, *, field: str = "") -> Any:
    """Parse ``raw`` as JSON and ``json_check`` it; ``MalformedJson`` (400) for text that is not JSON."""
    try:
        value = json.loads(raw)
    except RecursionError:
        where = field or "body"
        raise InvalidInput(f"{where}: nested deeper than {MAX_JSON_DEPTH} levels", field=where) from None
    except ValueError as exc:  # includes UnicodeDecodeError
        raise MalformedJson(f"request body is not valid JSON: {exc}", field=field or "body") from None
    json_check(value, field=field)
    return value


class StrictJsonParser(Parser):
    """django-ninja's body parser for both APIs: a JSON media type (or none), ``json_loads_strict``, and the
    body must be an object. Operations that read no body (the signed webhooks read raw bytes) never call it.

    Ninja wraps any parser exception in ``HttpError(400)``; the APIs' ``HttpError``
    handlers answer with ``parse_error_of`` so the field and status survive.

    ``arrays``: the URL names of the operations whose body is an array (``/lg/runs/batch``), as their
    decorators name them (``url_name=``).
    """

    def __init__(self, *, arrays: tuple[str, ...] = ()) -> None:
        self.arrays = frozenset(arrays)

    def parse_body(self, request: HttpRequest) -> Any:
        json_media_type_check(request)
        value = json_loads_strict(request.body)
        match = request.resolver_match
        if isinstance(value, list) and match is not None and match.url_name in self.arrays:
            return value
        if not isinstance(value, dict):
            # Every operation of both APIs reads an object. Ninja's schemas read anything else by attribute,
            # so ``[1]`` was every field's default (a thread created from nothing) and ``[]`` a decision
            # whose "decision" was missing: say what is wrong with the body instead.
            raise InvalidInput(f"body: must be a JSON object, not {json_kind(value)}", field="body")
        return value


def json_kind(value: Any) -> str:
    """What a JSON value is, for a message saying it is the wrong kind ("not an array")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a string" if isinstance(value, str) else "a number"


def parse_error_of(exc: BaseException) -> DomainError | None:
    """The ``DomainError`` a ``StrictJsonParser`` raised, if it is what ``exc`` wraps."""
    cause = exc.__cause__
    return cause if isinstance(cause, DomainError) else None


# A thread's metadata is listed with it on every page of threads (and searched): a megabyte in one thread
# made each page of five weigh as much. Case numbers, applicants and tags fit many times over.
MAX_METADATA_BYTES = 16 * 1024


def _metadata_size(value: dict[str, Any]) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _metadata_bounded(value: dict[str, Any]) -> dict[str, Any]:
    size = _metadata_size(value)
    if size > MAX_METADATA_BYTES:
        raise PydanticCustomError(
            "metadata_size",
            "is {size} bytes as JSON; metadata is at most {limit}",
            {"size": size, "limit": MAX_METADATA_BYTES},
        )
    return value


def metadata_check(value: dict[str, Any], *, field: str = "metadata") -> dict[str, Any]:
    """``ThreadMetadata``'s rule for a caller that is not an API schema (the console's start form):
    storable JSON (``json_check``) of at most ``MAX_METADATA_BYTES``; ``InvalidInput`` naming ``field``."""
    json_check(value, field=field)
    size = _metadata_size(value)
    if size > MAX_METADATA_BYTES:
        raise InvalidInput(f"{field}: is {size} bytes as JSON; metadata is at most {MAX_METADATA_BYTES}", field=field)
    return value


ThreadMetadata = Annotated[dict[str, Any], AfterValidator(_metadata_bounded)]
