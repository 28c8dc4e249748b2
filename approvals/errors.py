"""Domain errors; the API turns each into one JSON error response."""

from __future__ import annotations

import re
from typing import Any


class DomainError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class NotFound(DomainError):
    status = 404
    code = "not_found"


class Forbidden(DomainError):
    status = 403
    code = "forbidden"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class InvalidInput(DomainError):
    status = 422
    code = "invalid"


class Unavailable(DomainError):
    """Not now: the server is stopping (a wait its request's end cut short). Answered with ``Retry-After``."""

    status = 503
    code = "unavailable"


# pydantic names the member of a union an error is about in its location (``("before", "str")``): a type's
# label (``str``, ``list[str]``, ``dict[str,any]``, ``function-after[...]``, ``constrained-str``) or a model's
# name. The client sent no such key.
_TYPE_LABEL = re.compile(r"str|int|float|bool|bytes|none|[a-z]+(?:-[a-z]+)+|[\w-]+\[.*\]")

Loc = list[str | int]


def _member_at(loc: Loc, locs: list[Loc], start: int) -> int | None:
    """Where in ``loc`` (from ``start``) a union's member is named: a place where an error at the same
    location names a type there (so a model's name beside ``list[Model]`` is a member too)."""
    for at in range(start, len(loc)):
        here = [other[at] for other in locs if len(other) > at and other[:at] == loc[:at]]
        if isinstance(loc[at], str) and any(isinstance(part, str) and _TYPE_LABEL.fullmatch(part) for part in here):
            return at
    return None


def _error_located(errors: list[dict[str, Any]]) -> tuple[dict[str, Any], Loc]:
    """The first error and its location without union members' labels; of a union's members, the error
    that reached deepest into the value: ``["values", 5]`` is a list with a bad item, not a bad string."""
    group = [(error, list(error.get("loc") or ())) for error in errors]
    chosen, loc = group[0] if group else ({}, [])
    at = _member_at(loc, [other for _, other in group], 0)
    while at is not None:
        prefix = loc[:at]
        group = [(e, other[:at] + other[at + 1 :]) for e, other in group if len(other) > at and other[:at] == prefix]
        chosen, loc = max(group, key=lambda pair: len(pair[1]))  # the first of the deepest
        at = _member_at(loc, [other for _, other in group], at)  # a union inside the member
    return chosen, loc


def validation_error_describe(errors: list[dict[str, Any]]) -> DomainError:
    """The first of django-ninja's validation errors as a DomainError naming the field.

    Ninja prefixes locations with where the value came from ("body", "query",
    "path") and then the parameter's name ("body" again for a body schema).
    """
    first, located = _error_located(errors)
    loc = [str(p) for p in located]
    source = loc[0] if loc else ""
    if loc and loc[0] in ("body", "query", "path"):
        loc = loc[1:]
    if loc and loc[0] in ("body", "query"):
        loc = loc[1:]
    # Nothing left of the location: the body as a whole (none was sent, or not an object).
    # A list's index reads as the services name it (``assignments[0].gate``), not ``assignments.0.gate``;
    # an array body's item as ``[1].input``.
    field: str | None = "".join(f"[{p}]" if p.isdigit() else f".{p}" if i else p for i, p in enumerate(loc))
    field = field or ("body" if source == "body" else None)
    message = str(first.get("msg", "invalid request"))
    if first.get("type") in ("uuid_parsing", "uuid_type"):
        message = "must be a UUID"  # pydantic's words name the first bad character, not what was wanted
    if first.get("type") == "json_invalid":
        error = DomainError(f"request body is not valid JSON: {message}", field="body")
        error.code = "malformed_json"
        return error
    return InvalidInput(f"{field}: {message}" if field else message, field=field)
