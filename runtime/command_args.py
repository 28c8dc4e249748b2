"""Arguments of management commands checked in one place: a bad one is one ``CommandError`` line naming the
option (exit status 1), never a traceback, a silent no-op or a default taken for it.

argparse's own ``type=`` errors print the whole usage before the message; these run in ``handle`` so the
error is the single line Django prints for a ``CommandError``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable

from django.core.management.base import CommandError

from runtime.registry import graph_names


def uuid_option(option: str, value: str, *, what: str = "thread id") -> uuid.UUID:
    try:
        return uuid.UUID(str(value).strip())
    except ValueError:
        raise CommandError(f"{option} {value!r}: not a {what} (a UUID)") from None


def int_option(option: str, value: int, *, minimum: int, maximum: int, unit: str = "") -> int:
    if not minimum <= value <= maximum:
        suffix = f" {unit}" if unit else ""
        raise CommandError(f"{option} {value}: must be between {minimum} and {maximum}{suffix}")
    return value


def positive_seconds_option(option: str, value: float) -> float:
    """A duration in seconds: finite and above 0 (0 would make every heartbeat stale, not mean "unset")."""
    if not math.isfinite(value) or value <= 0:
        raise CommandError(f"{option} {value:g}: must be a number of seconds above 0")
    return value


def graph_option(option: str, value: str, *, also: Iterable[str] = ()) -> str:
    """A registered graph, or one of ``also`` (graphs known otherwise, e.g. from threads that outlived their
    registration); an unknown one names the registered graphs."""
    name = value.strip()
    if name in graph_names() or name in set(also):
        return name
    raise CommandError(f"{option} {value!r}: unknown graph (registered: {', '.join(graph_names()) or 'none'})")
