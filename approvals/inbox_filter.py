"""The inbox's filter, defined once.

The inbox page and its live updates (``console.page_context.inbox_context``), the
native API's task list and bulk "select all matching" (``approvals.bulk``) all
build an ``InboxFilter`` and hand it to ``selectors.tasks_inbox``, so a bulk
action selects exactly what the inbox lists.

Adding a filter: a field here (and its check in ``parse`` unless any text will
do), its clause in ``selectors.tasks_inbox``, and — to offer it on the page — a
field of ``console.forms.InboxFilterForm`` with the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from approvals.deadlines import DUE_FILTERS
from approvals.errors import InvalidInput

INBOX_CLAIMED = ("", "mine", "unclaimed", "others")
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
    columns: dict[str, str] = field(default_factory=dict)  # the gate's inbox-column filters (approvals.columns)

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], *, columns: Mapping[str, str] | None = None) -> InboxFilter:
        """From text fields already checked by name (a form's cleaned data); other keys are ignored."""
        return cls(**{name: str(data.get(name) or "") for name in TEXT_FIELDS}, columns=dict(columns or {}))

    @classmethod
    def parse(cls, raw: Any) -> InboxFilter:
        """A "select all matching" selection as JSON: every filter but ``status`` (it selects pending tasks).

        Refused naming ``filter.<key>``: an unknown key, text over 200 characters, more than
        8 column filters, a value outside its choices.
        """
        if not isinstance(raw, dict):
            raise InvalidInput("filter must be an object of inbox filters", field="filter")
        unknown = sorted(set(raw) - set(SELECTION_KEYS))
        if unknown:
            raise InvalidInput(
                f"unknown inbox filter {unknown[0]!r} (filters: {', '.join(SELECTION_KEYS)})",
                field=f"filter.{unknown[0]}",
            )
        values: dict[str, Any] = {}
        columns = raw.get("columns") or {}
        if not isinstance(columns, dict) or len(columns) > MAX_COLUMN_FILTERS:
            raise InvalidInput("columns must map at most 8 column keys to filters", field="filter.columns")
        for key, value in columns.items():
            if not isinstance(value, str) or len(value) > MAX_TEXT:
                raise InvalidInput("a column filter is text of at most 200 characters", field=f"filter.columns.{key}")
        values["columns"] = dict(columns)
        for key in SELECTION_FIELDS:
            value = raw.get(key, "")
            if not isinstance(value, str) or len(value) > MAX_TEXT:
                raise InvalidInput(f"{key} must be text of at most 200 characters", field=f"filter.{key}")
            values[key] = value
        if values["claimed"] not in INBOX_CLAIMED:
            choices = ", ".join(c for c in INBOX_CLAIMED if c)
            raise InvalidInput(f"claimed must be one of {choices}", field="filter.claimed")
        if values["assigned"] not in ("", "me"):
            raise InvalidInput("assigned must be 'me' or empty", field="filter.assigned")
        if values["due"] not in ("", *DUE_FILTERS):
            raise InvalidInput(f"due must be one of {', '.join(DUE_FILTERS)}", field="filter.due")
        return cls(**values)

    def text_fields(self) -> dict[str, str]:
        """Every text filter by name (status included), as the inbox page's form names them."""
        return {key: getattr(self, key) for key in TEXT_FIELDS}

    def selection(self) -> dict[str, Any]:
        """The JSON ``parse`` reads back: what a bulk action stores and audits as its filter."""
        return {**self._selection_text(), "columns": self.columns}

    def form_fields(self) -> dict[str, str]:
        """The selection as form fields, by the inbox's names ("c.<key>" for column filters)."""
        return {**self._selection_text(), **{f"c.{key}": value for key, value in self.columns.items()}}

    def _selection_text(self) -> dict[str, str]:
        return {key: getattr(self, key) for key in SELECTION_FIELDS}


# Every text filter, by name; a selection carries all of them but status (a bulk action decides pending tasks).
TEXT_FIELDS = tuple(f.name for f in fields(InboxFilter) if f.name != "columns")
SELECTION_FIELDS = tuple(name for name in TEXT_FIELDS if name != "status")
SELECTION_KEYS = (*SELECTION_FIELDS, "columns")
