"""Domain errors; the API turns each into one JSON error response."""

from __future__ import annotations

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


def validation_error_describe(errors: list[dict[str, Any]]) -> DomainError:
    """The first of django-ninja's validation errors as a DomainError naming the field.

    Ninja prefixes locations with where the value came from ("body", "query",
    "path") and then the parameter's name ("body" again for a body schema).
    """
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", []) or []]
    source = loc[0] if loc else ""
    if loc and loc[0] in ("body", "query", "path"):
        loc = loc[1:]
    if loc and loc[0] in ("body", "query"):
        loc = loc[1:]
    # Nothing left of the location: the body as a whole (none was sent, or not an object).
    # A list's index reads as the services name it (``assignments[0].gate``), not ``assignments.0.gate``.
    field = "".join(f"[{p}]" if p.isdigit() and i else f".{p}" if i else p for i, p in enumerate(loc))
    field = field or ("body" if source == "body" else None)
    message = str(first.get("msg", "invalid request"))
    if first.get("type") in ("uuid_parsing", "uuid_type"):
        message = "must be a UUID"  # pydantic's words name the first bad character, not what was wanted
    if first.get("type") == "json_invalid":
        error = DomainError(f"request body is not valid JSON: {message}", field="body")
        error.code = "malformed_json"
        return error
    return InvalidInput(f"{field}: {message}" if field else message, field=field)
