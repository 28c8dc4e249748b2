"""The inbox filter is defined once: the page's form, a bulk selection and the API all speak ``InboxFilter``."""

from __future__ import annotations

import pytest

from approvals.api import TaskQuery
from approvals.errors import InvalidInput
from approvals.inbox_filter import FILTER_KEYS, SELECTION_KEYS, TEXT_FIELDS, InboxFilter
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
        ({"thread": "nope"}, "filter.thread"),
        ({"gate": "a", "node": "b"}, "filter.node"),  # an alias and its name saying two things
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


def test_a_selection_takes_the_task_lists_names_gate_and_thread():
    """GET /api/tasks takes gate and thread; a bulk filter took node and had no thread."""
    thread = "6f0c0000-0000-4000-8000-000000000001"
    wanted = InboxFilter.parse({"graph": "loan_approval", "gate": "human_review", "thread": thread})
    assert (wanted.node, wanted.thread) == ("human_review", thread)
    assert wanted.selection()["gate"] == "human_review" and "node" not in wanted.selection()
    assert InboxFilter.parse(wanted.selection()) == wanted


def test_node_stays_an_alias_of_gate():
    assert InboxFilter.parse({"node": "human_review"}) == InboxFilter.parse({"gate": "human_review"})
    assert InboxFilter.parse({"node": "x", "gate": "x"}).node == "x"


def test_the_task_list_and_a_selection_share_one_list_of_names():
    """One parser: the task list's query names are the filter's, and a selection is all of them but status."""
    query_names = set(TaskQuery.model_fields) - {"limit", "cursor"}
    assert query_names == set(FILTER_KEYS)
    assert set(SELECTION_KEYS) == set(FILTER_KEYS) - {"status"} | {"columns"}


def test_the_task_list_parses_status_and_refuses_with_the_bare_name():
    assert InboxFilter.parse({}, prefix="", status=True).status == ""  # no status: any
    assert InboxFilter.parse({"status": "decided"}, prefix="", status=True).status == "decided"
    with pytest.raises(InvalidInput) as refused:
        InboxFilter.parse({"thread": "nope"}, prefix="", status=True)
    assert refused.value.field == "thread"
