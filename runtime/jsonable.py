"""Turn graph state (which may hold messages, models, dataclasses) into JSON values."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import math
import uuid
from collections.abc import Callable, Mapping
from typing import Any

# A float this large is a whole number, and PostgreSQL's jsonb writes it out in full: 1e+20 reads
# back as the integer 100000000000000000000, whose JSON text differs from the float's.
JSONB_WHOLE_FROM = 1e16


def to_jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if hasattr(value, "model_dump"):  # pydantic models, LangChain messages
        return to_jsonable(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return repr(value)


def as_jsonb_returns(value: Any) -> Any:
    """``value`` with each float of 1e16 or more (in magnitude) as the int a ``jsonb`` column gives back."""
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and abs(value) >= JSONB_WHOLE_FROM else value
    if isinstance(value, dict):
        return {k: as_jsonb_returns(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_jsonb_returns(v) for v in value]
    return value


def canonical_dumps(value: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """Canonical JSON (sorted keys, no spaces, UTF-8 text) of ``value`` as a ``jsonb`` column returns it.

    Digests and hashes are computed over what is about to be stored and later recomputed from what
    was read back; the two must render every number alike. Only a float in exponent form can differ,
    so the value is walked only when the text has one.
    """
    text = _dumps(value, default)
    return text if "e+" not in text else _dumps(as_jsonb_returns(value), default)


def _dumps(value: Any, default: Callable[[Any], Any] | None) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=default)
