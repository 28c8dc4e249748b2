"""Deadline policy of a gate: when it is due, when to remind, whom to escalate to, what happens on timeout.

Two sources, parsed here so both are read the same way:

- ``langgraph.json`` → ``"gatehouse": {"deadlines": {graph: {gate: {...}}}}`` (the operator's policy):
  parsed strictly by ``deadlines_parse`` when the registry loads (start-up), so a bad value stops the
  web server and the worker with a message naming the field;
- the gate's interrupt payload (``due``, ``remind_before``, ``escalate_to``, ``on_timeout``, or the
  older ``sla_seconds``): parsed leniently by ``payload_deadline`` (a bad value is ignored, as every
  other payload policy key is). A payload can never ask for an automatic approval.

Durations are wall-clock: ``"90s"``, ``"30m"``, ``"4h"``, ``"2d"`` (or a positive number of seconds).
This module is pure (no database): the approvals domain decides what the policy does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A task can be due at most this far ahead: a typo ("4000d") is refused, not scheduled for 2037.
MAX_DUE_SECONDS = 366 * 86400
TIMEOUT_OUTCOMES = ("reject", "approve")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d{1,7})\s*([smhd])\s*$")
_KEYS = ("due", "remind_before", "escalate_to", "on_timeout", "allow_auto_approve")
ALL_GATES = "*"  # a graph's default for gates it does not name


class DeadlineError(ValueError):
    """A bad deadline setting; ``field`` is the dotted path of the value at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class TimeoutOutcome:
    outcome: str  # "reject" or, only where the gate explicitly allows it, "approve"
    reason: str  # recorded as the system's reason on the decision


@dataclass(frozen=True)
class Deadline:
    due_seconds: int | None = None  # due this long after the task opens (None: no deadline)
    remind_before_seconds: int | None = None  # one reminder this long before it is due
    escalate_to: str | None = None  # group (or role) the task is reassigned to once overdue
    on_timeout: TimeoutOutcome | None = None  # decided automatically once overdue
    allow_auto_approve: bool = False  # only langgraph.json can set it; a payload never can

    def merged_over(self, fallback: Deadline | None) -> Deadline:
        """This policy, with the fields it leaves unset taken from ``fallback``."""
        if fallback is None:
            return self
        return Deadline(
            due_seconds=self.due_seconds if self.due_seconds is not None else fallback.due_seconds,
            remind_before_seconds=(
                self.remind_before_seconds if self.remind_before_seconds is not None else fallback.remind_before_seconds
            ),
            escalate_to=self.escalate_to or fallback.escalate_to,
            on_timeout=self.on_timeout or _payload_safe(fallback.on_timeout),
            allow_auto_approve=self.allow_auto_approve,
        )


def _payload_safe(outcome: TimeoutOutcome | None) -> TimeoutOutcome | None:
    # A timeout outcome that came from a payload is never an approval (payload_deadline refuses it too).
    return outcome if outcome is None or outcome.outcome == "reject" else None


def duration_parse(value: Any, *, field: str = "duration") -> int:
    """Seconds in ``"90s"``, ``"30m"``, ``"4h"``, ``"2d"`` or a positive integer; DeadlineError otherwise."""
    if isinstance(value, bool):
        raise DeadlineError(field, f'{value!r} is not a duration like "90s", "30m", "4h" or "2d"')
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = int(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise DeadlineError(field, f'{value!r} is not a duration like "90s", "30m", "4h" or "2d"')
    if seconds < 1:
        raise DeadlineError(field, "must be at least 1 second")
    if seconds > MAX_DUE_SECONDS:
        raise DeadlineError(field, f"must be at most {MAX_DUE_SECONDS // 86400} days")
    return seconds


def duration_human(seconds: float) -> str:
    """``"45 s"``, ``"20 min"``, ``"3 h"``, ``"3 h 30 min"``, ``"2 d 4 h"`` — never ``"86400 s"``.

    console/static/console/console.js (``durationHuman``) renders the same text for the live countdown.
    """
    s = int(abs(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        hours, minutes = s // 3600, s % 3600 // 60
        return f"{hours} h {minutes} min" if minutes and hours < 10 else f"{hours} h"
    days, hours = s // 86400, s % 86400 // 3600
    return f"{days} d {hours} h" if hours and days < 10 else f"{days} d"


def _timeout_parse(value: Any, *, field: str) -> TimeoutOutcome:
    if not isinstance(value, dict):
        raise DeadlineError(field, 'must be an object like {"outcome": "reject", "reason": "..."}')
    unknown = sorted(set(value) - {"outcome", "reason"})
    if unknown:
        raise DeadlineError(f"{field}.{unknown[0]}", 'unknown key (expected "outcome" and "reason")')
    outcome = value.get("outcome")
    if outcome not in TIMEOUT_OUTCOMES:
        raise DeadlineError(f"{field}.outcome", f'must be "reject" or "approve", not {outcome!r}')
    reason = value.get("reason")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 500:
        raise DeadlineError(f"{field}.reason", "a reason (1 to 500 characters) is required: it is recorded")
    return TimeoutOutcome(outcome=outcome, reason=reason.strip())


def deadline_parse(value: Any, *, field: str) -> Deadline:
    """One gate's deadline from langgraph.json, strictly; ``field`` names it in errors."""
    if not isinstance(value, dict):
        raise DeadlineError(field, 'must be an object like {"due": "4h"}')
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise DeadlineError(f"{field}.{unknown[0]}", f"unknown key (one of {', '.join(_KEYS)})")
    if "due" not in value:
        raise DeadlineError(f"{field}.due", 'is required (e.g. "4h")')
    due = duration_parse(value["due"], field=f"{field}.due")
    remind = None
    if value.get("remind_before") is not None:
        remind = duration_parse(value["remind_before"], field=f"{field}.remind_before")
        if remind >= due:
            raise DeadlineError(f"{field}.remind_before", "must be shorter than due")
    escalate = value.get("escalate_to")
    if escalate is not None and (not isinstance(escalate, str) or not escalate.strip() or len(escalate) > 150):
        raise DeadlineError(f"{field}.escalate_to", "must be a group or role name (1 to 150 characters)")
    allow = value.get("allow_auto_approve", False)
    if not isinstance(allow, bool):
        raise DeadlineError(f"{field}.allow_auto_approve", "must be true or false")
    on_timeout = None
    if value.get("on_timeout") is not None:
        on_timeout = _timeout_parse(value["on_timeout"], field=f"{field}.on_timeout")
        if on_timeout.outcome == "approve" and not allow:
            raise DeadlineError(
                f"{field}.on_timeout.outcome",
                'an automatic approval needs "allow_auto_approve": true on the same gate',
            )
    return Deadline(
        due_seconds=due,
        remind_before_seconds=remind,
        escalate_to=escalate.strip() if escalate else None,
        on_timeout=on_timeout,
        allow_auto_approve=allow,
    )


def deadlines_parse(graph: str, gatehouse: dict[str, Any]) -> dict[str, Deadline]:
    """``"deadlines": {graph: {gate or "*": {...}}}`` for one graph; DeadlineError on any bad value."""
    section = gatehouse.get("deadlines", {})
    if not isinstance(section, dict):
        raise DeadlineError("gatehouse.deadlines", "must map graph names to {gate: {...}}")
    gates = section.get(graph)
    if gates is None:
        return {}
    where = f"gatehouse.deadlines.{graph}"
    if not isinstance(gates, dict):
        raise DeadlineError(where, 'must map gate names (or "*") to {"due": ...}')
    return {str(gate): deadline_parse(policy, field=f"{where}.{gate}") for gate, policy in gates.items()}


def payload_deadline(payload: dict[str, Any]) -> Deadline | None:
    """The deadline a gate's payload asks for, leniently: bad values are ignored, approvals refused.

    ``due`` wins over the older ``sla_seconds``. ``allow_auto_approve`` in a payload means nothing:
    whatever built the payload (possibly from a model's output) cannot grant itself an approval.
    """

    def lenient(key: str) -> int | None:
        try:
            return duration_parse(payload[key], field=key) if payload.get(key) is not None else None
        except DeadlineError:
            return None

    due = lenient("due") or lenient("sla_seconds")
    remind = lenient("remind_before")
    escalate = payload.get("escalate_to")
    on_timeout = None
    try:
        if payload.get("on_timeout") is not None:
            on_timeout = _payload_safe(_timeout_parse(payload["on_timeout"], field="on_timeout"))
    except DeadlineError:
        on_timeout = None
    deadline = Deadline(
        due_seconds=due,
        remind_before_seconds=remind if remind is not None and due is not None and remind < due else None,
        escalate_to=escalate.strip()[:150] if isinstance(escalate, str) and escalate.strip() else None,
        on_timeout=on_timeout,
    )
    return deadline if deadline != Deadline() else None
