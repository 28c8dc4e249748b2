"""The inbox filter is defined once: the page's form, a bulk selection and the API all speak ``InboxFilter``."""

from __future__ import annotations

import pytest

from approvals.errors import InvalidInput
from approvals.inbox_filter import SELECTION_KEYS, TEXT_FIELDS, InboxFilter
from console.forms import InboxFilterForm


def test_a_stored_selection_reads_back_as_the_same_filter():
    wanted = InboxFilter.parse({"graph": "loan_approval", "q": "ACME", "due": "overdue", "columns": {"amount": ">=10"}})
    assert wanted.status == "pending"  # a selection is of pending tasks
    assert list(wanted.selection()) == list(SELECTION_KEYS)
    assert InboxFilter.parse(wanted.selection()) == wanted


def test_a_selection_has_no_status_and_says_so_by_name():
    with pytest.raises(InvalidInput) as refused:
        InboxFilter.parse({"status": "decided"})
    assert refused.value.field == "filter.status"


@pytest.mark.parametrize(
    "raw,field",
    [
        ({"claimed": "theirs"}, "filter.claimed"),
        ({"assigned": "you"}, "filter.assigned"),
        ({"due": "yesterday"}, "filter.due"),
        ({"q": "x" * 201}, "filter.q"),
        ({"columns": {"amount": 5}}, "filter.columns.amount"),
        ({"columns": {f"c{i}": "" for i in range(9)}}, "filter.columns"),
        ([], "filter"),
    ],
)
def test_a_bad_selection_is_refused_naming_the_field(raw, field):
    with pytest.raises(InvalidInput) as refused:
        InboxFilter.parse(raw)
    assert refused.value.field == field


def test_the_inbox_page_offers_every_filter():
    """A filter added to InboxFilter but not to the page's form would be one a bulk selects and nobody sees."""
    assert set(TEXT_FIELDS) <= set(InboxFilterForm.base_fields)


def test_the_form_builds_the_filter_the_page_lists():
    form = InboxFilterForm({"status": "all", "q": "ACME", "claimed": "mine", "due": "soon", "sort": "oldest"})
    assert form.is_valid(), form.errors
    wanted = form.inbox_filter(columns={"amount": ">=10"})
    assert wanted == InboxFilter(status="", q="ACME", claimed="mine", due="soon", columns={"amount": ">=10"})
    assert form.paging() == {"sort": "oldest", "cursor": "", "before": ""}
    assert form.filters() == {**wanted.text_fields(), "sort": "oldest", "cursor": "", "before": ""}


def test_no_status_chosen_lists_pending_tasks():
    form = InboxFilterForm({})
    assert form.is_valid(), form.errors
    assert form.inbox_filter().status == "pending"
