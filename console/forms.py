"""Django forms: sign-in, and the inbox and audit filters.

The decision panel is ``console.decision_panel``; inputs generated from a JSON
Schema (decision edits, a thread's start input) are ``console.schema_form``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.validators import MaxLengthValidator
from django.http import QueryDict

from approvals.audit_filters import FILTERS, AuditFilters, audit_filters_parse
from approvals.errors import InvalidInput
from approvals.inbox_filter import InboxFilter
from approvals.inputs import instant_parse
from approvals.models import TaskStatus
from console.selectors import SORTS

CLAIM_CHOICES = [("", "Anyone"), ("mine", "Claimed by me"), ("unclaimed", "Unclaimed"), ("others", "Claimed by others")]
ASSIGNED_CHOICES = [("", "Anyone"), ("me", "Assigned to me / my groups")]  # hand-offs
STATUS_CHOICES = [(s.value, s.label) for s in TaskStatus] + [("all", "Any status")]
DUE_CHOICES = [("", "Any deadline"), ("soon", "Due soon"), ("overdue", "Overdue"), ("escalated", "Escalated")]


NUL_REFUSED = "the text contains a NUL byte"  # PostgreSQL can neither store nor compare such text


def nul_fields(data: QueryDict) -> list[str]:
    """The posted fields whose name or value holds a NUL byte, for a view marked ``form_text_checked`` that
    reads its form by hand: it shows each as a form error next to the field (``RequestTextMiddleware`` would
    answer the API's JSON 422 in place of the page) and changes nothing."""
    return [key for key, values in data.lists() if "\x00" in key or any("\x00" in v for v in values)]


class LoginForm(AuthenticationForm):
    """Django's sign-in form, with the username's length enforced (Django only sets the widget's
    ``maxlength``): a longer name can belong to no account and is refused before authenticating."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["username"]
        field.validators.append(MaxLengthValidator(self.username_field.max_length or 150))


class InboxSortField(forms.ChoiceField):
    """The inbox's sorts, plus "col:<key>" / "-col:<key>" by a gate's inbox column (issue 14)."""

    def valid_value(self, value: Any) -> bool:
        return super().valid_value(value) or bool(re.match(r"^-?col:[a-z][a-z0-9_]{0,39}$", str(value)))


class InboxFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search")
    graph = forms.CharField(required=False, max_length=100)
    node = forms.CharField(required=False, max_length=200, label="Gate")
    status = forms.ChoiceField(required=False, choices=STATUS_CHOICES)
    claimed = forms.ChoiceField(required=False, choices=CLAIM_CHOICES, label="Claim")
    sort = InboxSortField(required=False, choices=[(k, v[1]) for k, v in SORTS.items()])
    cursor = forms.CharField(required=False, max_length=400)
    # hand-offs: tasks asked of me by name or through one of my groups
    assigned = forms.ChoiceField(required=False, choices=ASSIGNED_CHOICES, label="Assigned")
    # deadlines: ?due=overdue|escalated|soon
    due = forms.ChoiceField(required=False, choices=DUE_CHOICES, label="Due")
    before = forms.CharField(required=False, max_length=400)  # previous page (issue 14)

    def inbox_filter(self, *, columns: Mapping[str, str] | None = None) -> InboxFilter:
        """What to list (call after ``is_valid``): "all" statuses is no status filter."""
        status = self.cleaned_data.get("status") or "pending"
        data = {**self.cleaned_data, "status": "" if status == "all" else status}
        return InboxFilter.from_fields(data, columns=columns)

    def paging(self) -> dict[str, str]:
        data = self.cleaned_data
        return {
            "sort": data.get("sort") or "newest",
            "cursor": data.get("cursor") or "",
            "before": data.get("before") or "",
        }

    def filters(self) -> dict[str, str]:
        """Every field by name, as the page and its links read them."""
        return {**self.inbox_filter().text_fields(), **self.paging()}


class WindowEdgeField(forms.CharField):
    """A ``since`` (``end=False``) or ``until`` (``end=True``) as the audit trail, its API and its export read
    it (``approvals.inputs.instant_parse``): ISO 8601, UTC without an offset, a bare date a whole day."""

    def __init__(self, *, end: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.end = end

    def to_python(self, value: Any) -> Any:
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        name = "until" if self.end else "since"
        try:
            return instant_parse(text, name, end=self.end)
        except InvalidInput as exc:
            raise forms.ValidationError(exc.message.removeprefix(f"{name}: "), code="invalid") from None


class AuditFilterForm(forms.Form):
    """The audit page's filter. Its values go through ``approvals.audit_filters.audit_filters_parse``, the
    parser ``GET /api/audit`` and the export use, so the page, the API and the download agree."""

    actor = forms.CharField(required=False, max_length=150)
    action = forms.CharField(required=False, max_length=64)
    graph = forms.CharField(required=False, max_length=100)
    thread = forms.UUIDField(required=False)
    since = forms.CharField(required=False, max_length=64, label="From")
    until = forms.CharField(required=False, max_length=64, label="Until")
    before = forms.IntegerField(required=False, min_value=1)
    filters: AuditFilters

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            self.filters = audit_filters_parse(**{name: str(data.get(name) or "") for name in FILTERS})
        except InvalidInput as exc:  # shown next to its field, as the page labels it: without "since: "
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, exc.message.removeprefix(f"{field}: "))
        return data
