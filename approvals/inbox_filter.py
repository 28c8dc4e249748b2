"""The inbox's filter, defined once.

The inbox page and its live updates (``console.page_context.inbox_context``), the
native API's task list and bulk "select all matching" (``approvals.bulk``) all
build an ``InboxFilter`` and hand it to ``selectors.tasks_inbox``, so a bulk
action selects exactly what the inbox lists.

The API speaks one set of names (``FILTER_KEYS``: ``gate``, ``thread``, …) and one
parser (``InboxFilter.parse``) reads them, for ``GET /api/tasks`` and for a bulk
``filter`` alike; the inbox page's form says ``node`` for the gate, which the
parser takes as an alias (bulk filters sent it before they took the API's names).

Adding a filter: a field here (and its check in ``parse`` unless any text will
do), its clause in ``selectors.tasks_inbox``, and — to offer it on the page — a
field of ``console.forms.InboxFilterForm`` with the same name.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from approvals.deadlines import DUE_FILTERS
from approvals.errors import InvalidInput
from approvals.models import TaskStatus

INBOX_CLAIMED = ("", "mine", "unclaimed", "others")
COLUMN_PARAM = "c."  # a column filter's name in a query string (the inbox page's, GET /api/tasks'): c.<key>
MAX_COLUMN_FILTERS = 8
MAX_TEXT = 200


@dataclass(frozen=True)
class InboxFilter:
    """Which approval tasks the inbox lists (empty text: no filter)."""

    graph: str = ""
    node: str = ""  # the gate
    status: str = "pending"  # "": any status
    claimed: str = ""  # mine | unclaimed | others (INBOX_CLAIMED)
    q: str = ""  # a task or thread id, or text of the title, case or applicant
    assigned: str = ""  # "me": asked of the user by name or through a group (approvals.assignment)
    due: str = ""  # overdue | escalated | soon (approvals.deadlines)
    thread: str = ""  # a thread id: its tasks only (the API's filter; the inbox page has none)
    columns: dict[str, str] = field(default_factory=dict)  # the gate's inbox-column filters (approvals.columns)

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], *, columns: Mapping[str, str] | None = None) -> InboxFilter:
        """From text fields already checked by name (a form's cleaned data); other keys are ignored."""
        return cls(**{name: str(data.get(name) or "") for name in TEXT_FIELDS}, columns=dict(columns or {}))

    @classmethod
    def parse(cls, raw: Any, *, prefix: str = "filter", status: bool = False) -> InboxFilter:
        """The filter by the API's names (``FILTER_KEYS``; ``node`` an alias of ``gate``): a bulk "select all
        matching" selection as JSON (every filter but ``status``: it selects pending tasks), or, with
        ``status``, ``GET /api/tasks``'s query (status too; absent, any status).

        Refused naming ``<prefix>.<key>`` (the bare key without a prefix): an unknown key, text over 200
        characters, more than 8 column filters, a value outside its choices, a thread that is no id.
        """

        def where(key: str) -> str:
            return f"{prefix}.{key}" if prefix else key

        def column_where(key: str) -> str:
            # Without a prefix the filter is a query string (GET /api/tasks), where a column filter is c.<key>.
            return where(f"columns.{key}") if prefix else f"{COLUMN_PARAM}{key}"

        if not isinstance(raw, dict):
            raise InvalidInput("filter must be an object of inbox filters", field=prefix or "filter")
        raw = dict(raw)
        for alias, name in ALIASES.items():
            if alias in raw:
                value = raw.pop(alias)
                if raw.setdefault(name, value) != value:
                    raise InvalidInput(f"{alias} is an alias of {name}: give one of them", field=where(alias))
        keys = (*FILTER_KEYS, "columns") if status else SELECTION_KEYS
        unknown = sorted(set(raw) - set(keys))
        if unknown:
            aliases = ", ".join(f"{a} (alias of {n})" for a, n in ALIASES.items())
            raise InvalidInput(
                f"unknown inbox filter {unknown[0]!r} (filters: {', '.join(keys)}; {aliases})",
                field=where(unknown[0]),
            )
        values: dict[str, Any] = {}
        columns = raw.get("columns") or {}
        if not isinstance(columns, dict):
            raise InvalidInput("columns must map at most 8 column keys to filters", field=where("columns"))
        if len(columns) > MAX_COLUMN_FILTERS:
            beyond = column_where(str(list(columns)[MAX_COLUMN_FILTERS]))
            raise InvalidInput(
                "columns must map at most 8 column keys to filters", field=where("columns") if prefix else beyond
            )
        for key, value in columns.items():
            if not isinstance(value, str) or len(value) > MAX_TEXT:
                raise InvalidInput("a column filter is text of at most 200 characters", field=column_where(key))
        values["columns"] = dict(columns)
        for key in keys:
            if key == "columns":
                continue
            value = raw.get(key, "")
            if not isinstance(value, str) or len(value) > MAX_TEXT:
                raise InvalidInput(f"{key} must be text of at most 200 characters", field=where(key))
            values[FIELD_OF.get(key, key)] = value
        if values["claimed"] not in INBOX_CLAIMED:
            choices = ", ".join(c for c in INBOX_CLAIMED if c)
            raise InvalidInput(f"claimed must be one of {choices}", field=where("claimed"))
        if values["assigned"] not in ("", "me"):
            raise InvalidInput("assigned must be 'me' or empty", field=where("assigned"))
        if values["due"] not in ("", *DUE_FILTERS):
            raise InvalidInput(f"due must be one of {', '.join(DUE_FILTERS)}", field=where("due"))
        if status and values["status"] not in ("", *INBOX_STATUSES):
            raise InvalidInput(f"status must be one of {', '.join(INBOX_STATUSES)}", field=where("status"))
        if values["thread"]:
            try:
                values["thread"] = str(uuid.UUID(values["thread"].strip()))
            except ValueError:
                raise InvalidInput("thread must be a thread id (a UUID)", field=where("thread")) from None
        return cls(**values)

    def text_fields(self) -> dict[str, str]:
        """Every text filter by name (status included), as the inbox page's form names them."""
        return {key: getattr(self, key) for key in TEXT_FIELDS}

    def selection(self) -> dict[str, Any]:
        """The JSON ``parse`` reads back, by the API's names: what a bulk action stores and audits as its filter."""
        return {key: getattr(self, FIELD_OF.get(key, key)) for key in SELECTION_KEYS}

    def form_fields(self) -> dict[str, str]:
        """The selection as form fields, by the inbox's names ("c.<key>" for column filters)."""
        return {**self._selection_text(), **{f"c.{key}": value for key, value in self.columns.items()}}

    def _selection_text(self) -> dict[str, str]:
        return {key: getattr(self, key) for key in SELECTION_FIELDS}


# Every text filter of the inbox page, by its form's names; a selection carries all of them but status (a bulk
# action decides pending tasks).
TEXT_FIELDS = tuple(f.name for f in fields(InboxFilter) if f.name not in ("columns", "thread"))
SELECTION_FIELDS = tuple(name for name in TEXT_FIELDS if name != "status")
# The API's names (GET /api/tasks, a bulk "filter"): the gate is "gate", and a thread can be asked for.
API_NAMES = {"node": "gate"}
FIELD_OF = {api: name for name, api in API_NAMES.items()}
ALIASES = {"node": "gate"}  # accepted for the API's name: what bulk filters and the inbox page's form send
FILTER_KEYS = tuple(API_NAMES.get(name, name) for name in (*TEXT_FIELDS, "thread"))
SELECTION_KEYS = (*(key for key in FILTER_KEYS if key != "status"), "columns")
INBOX_STATUSES = tuple(TaskStatus.values)
