"""The audit trail's filters, parsed once: the console's audit page, ``GET /api/audit`` and the export
(``GET /api/audit/export``, ``manage.py audit_export``) all read them here, so one query string means
one set of events on every surface.

- ``actor``: an actor's label, any case;
- ``action``: an action, or ending in ``.`` a family of them (``decision.``);
- ``graph``, ``thread``: a graph's name, a thread's id;
- ``since`` / ``until``: ISO 8601, UTC when no offset; the window is ``[since, until)``, and a bare date
  is a whole day (``until=2026-12-06`` ends at the midnight after it: ``approvals.inputs.instant_parse``).

Empty values (a blank form field) mean "any".
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from approvals.errors import InvalidInput
from approvals.inputs import instant_parse, range_check

FILTERS = ("graph", "thread", "actor", "action", "since", "until")
# The bounds of the console's filter fields (and of the columns they compare with).
MAX_LENGTH = {"actor": 150, "action": 64, "graph": 100}


@dataclass(frozen=True)
class AuditFilters:
    graph: str = ""
    thread: uuid.UUID | None = None
    actor: str = ""
    action: str = ""  # "task." (trailing dot) matches every action under it
    since: datetime | None = None
    until: datetime | None = None

    @property
    def empty(self) -> bool:
        return not any((self.graph, self.thread, self.actor, self.action, self.since, self.until))

    def as_dict(self) -> dict[str, str]:
        out = {}
        for name in FILTERS:
            value = getattr(self, name)
            if value:
                out[name] = value.isoformat() if isinstance(value, datetime) else str(value)
        return out

    def query(self) -> dict[str, Any]:
        """The keyword arguments of ``approvals.selectors.audit_filter``."""
        return {
            "actor": self.actor,
            "action": self.action,
            "graph": self.graph,
            "thread_id": self.thread,
            "since": self.since,
            "until": self.until,
        }


def audit_filters_parse(
    *,
    graph: str | None = None,
    thread: str | None = None,
    actor: str | None = None,
    action: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> AuditFilters:
    """Filters from query strings, form fields or command options; each refusal names its field."""
    texts = {"graph": graph, "actor": actor, "action": action}
    for name, value in texts.items():
        if value and len(value.strip()) > MAX_LENGTH[name]:
            raise InvalidInput(f"{name}: at most {MAX_LENGTH[name]} characters", field=name)
    ident = None
    if thread and thread.strip():
        try:
            ident = uuid.UUID(thread.strip())
        except ValueError:
            raise InvalidInput("thread: not a thread id", field="thread") from None
    since, until = (since or "").strip(), (until or "").strip()
    start = instant_parse(since, "since", end=False) if since else None
    end = instant_parse(until, "until", end=True) if until else None
    range_check(start, end)  # before the first byte of an export, which would otherwise fail mid-stream
    return AuditFilters(
        graph=(graph or "").strip(),
        thread=ident,
        actor=(actor or "").strip(),
        action=(action or "").strip(),
        since=start,
        until=end,
    )
