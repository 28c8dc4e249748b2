"""Can the checkpointer store this value exactly? Checked before a decision is accepted and before it runs.

A decision becomes ``Command(resume=..., update=...)``. If the checkpointer
cannot store one of its values, LangGraph fails *part-way*: the gate node may
already have consumed the resume while the state update was never written, and
continuing the thread would run with values nobody signed. So every value is
checked up front, with a precise walk (which names the offending field) and
then with the checkpointer's own serializer (so the check cannot drift from
what is really stored): it must serialise and read back equal.
"""

from __future__ import annotations

import math
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_DEPTH = 64  # far deeper than any state a reviewer edits; msgpack itself stops at 512


class NotStorable(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _path(field: str, key: Any) -> str:
    return f"{field}[{key}]" if isinstance(key, int) else f"{field}.{key}"


def value_storable_check(value: Any, *, field: str) -> None:
    """Raise ``NotStorable`` naming the first value under ``field`` the checkpointer would not store as given."""
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise NotStorable(where, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                raise NotStorable(where, "integer outside the signed 64-bit range the checkpointer can store")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise NotStorable(where, "not a finite number (the checkpointer stores JSON numbers only)")
        elif isinstance(item, str):
            if "\x00" in item:
                raise NotStorable(where, "contains a NUL character, which PostgreSQL cannot store")
        elif isinstance(item, dict):
            for key, sub in reversed(list(item.items())):
                if not isinstance(key, str):
                    raise NotStorable(where, "object keys must be strings")
                if "\x00" in key:
                    raise NotStorable(where, "an object key contains a NUL character")
                stack.append((sub, _path(where, key), depth + 1))
        elif isinstance(item, (list, tuple)):
            for index in reversed(range(len(item))):
                stack.append((item[index], _path(where, index), depth + 1))
        else:
            raise NotStorable(where, f"a {type(item).__name__} is not a JSON value")
    _serde_round_trip(value, field=field)


def _serde_round_trip(value: Any, *, field: str) -> None:
    from runtime.checkpointer import checkpointer_get

    serde = checkpointer_get().serde
    try:
        loaded = serde.loads_typed(serde.dumps_typed(value))
    except Exception as exc:  # noqa: BLE001 - the serializer's own refusal, whatever its type
        raise NotStorable(field, f"the checkpointer cannot store it: {exc}") from None
    if loaded != value:
        raise NotStorable(field, "the checkpointer would not read it back unchanged")
