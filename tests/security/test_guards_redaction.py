"""Redaction's matching, as an attacker probes it: every spelling of a sensitive path is masked, nothing leaks
through a list, a nested quote of the field, a differently shaped path, the list of masked paths or a search filter.

In-process and pure (no database): written against the surviving mutants of ``approvals/redaction.py``
(docs/mutation-testing.md).
"""

from __future__ import annotations

import pytest

from approvals.redaction import EVERY_VALUE, MASK, filter_split, path_parse, redact

# --- how a declared path is read ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "segments"),
    [
        ("applicant.date_of_birth", ("applicant", "date_of_birth")),
        ("documents[*].number", ("documents", "*", "number")),
        ("documents[].number", ("documents", "*", "number")),  # [] is every item too
        ("documents[0].number", ("documents", "0", "number")),
        ("matrix[*][*]", ("matrix", "*", "*")),
        ("[*].ssn", ("*", "ssn")),
        ("ssn", ("ssn",)),
    ],
)
def test_a_declared_path_is_read_segment_by_segment(declared, segments):
    assert path_parse(declared) == segments


def test_every_list_spelling_of_a_path_masks_every_item():
    state = {"documents": [{"number": "P-1", "kind": "passport"}, {"number": "P-2", "kind": "visa"}]}
    for declared in ("documents[*].number", "documents[].number"):
        shown, applied = redact(state, [declared])
        assert shown == {"documents": [{"number": MASK, "kind": "passport"}, {"number": MASK, "kind": "visa"}]}
        assert applied == ["documents[0].number", "documents[1].number"]


def test_an_index_in_the_declaration_masks_that_item_only():
    state = {"documents": [{"number": "P-1"}, {"number": "P-2"}]}
    shown, applied = redact(state, ["documents[1].number"])
    assert shown == {"documents": [{"number": "P-1"}, {"number": MASK}]}
    assert applied == ["documents[1].number"]


def test_nested_lists_are_masked_all_the_way_down():
    shown, applied = redact({"matrix": [["a", "b"], ["c"]]}, ["matrix[*][*]"])
    assert shown == {"matrix": [[MASK, MASK], [MASK]]}
    assert applied == ["matrix[0][0]", "matrix[0][1]", "matrix[1][0]"]


# --- where a path matches ----------------------------------------------------------------------


def test_a_quote_of_the_field_deeper_in_a_payload_is_masked_too():
    """An interrupt payload quoting the state (details.applicant.date_of_birth) must not show the value."""
    payload = {
        "applicant": {"name": "Ada", "date_of_birth": "1815-12-10"},
        "details": {"applicant": {"date_of_birth": "1815-12-10"}},
    }
    shown, applied = redact(payload, ["applicant.date_of_birth"])
    assert "1815-12-10" not in repr(shown)
    assert shown["applicant"] == {"name": "Ada", "date_of_birth": MASK}
    assert applied == ["applicant.date_of_birth", "details.applicant.date_of_birth"]


def test_a_field_of_the_same_name_under_another_parent_is_not_masked():
    """Suffix matching compares the whole declared path, not its last segment alone."""
    state = {"applicant": {"date_of_birth": "1815-12-10"}, "company": {"date_of_birth": "1900-01-01"}}
    shown, applied = redact(state, ["applicant.date_of_birth"])
    assert shown == {"applicant": {"date_of_birth": MASK}, "company": {"date_of_birth": "1900-01-01"}}
    assert applied == ["applicant.date_of_birth"]


def test_a_declared_path_longer_than_the_location_does_not_match_it():
    shown, applied = redact({"date_of_birth": "x", "b": {"date_of_birth": "y"}}, ["a.b.date_of_birth"])
    assert shown == {"date_of_birth": "x", "b": {"date_of_birth": "y"}}
    assert applied == []


def test_a_wildcard_matches_any_key_of_a_mapping():
    state = {"accounts": {"main": {"iban": "DE1"}, "savings": {"iban": "DE2"}}, "iban": "top"}
    shown, applied = redact(state, ["accounts.*.iban"])
    assert shown == {"accounts": {"main": {"iban": MASK}, "savings": {"iban": MASK}}, "iban": "top"}
    assert applied == ["accounts.main.iban", "accounts.savings.iban"]


def test_a_masked_subtree_is_masked_whole():
    shown, applied = redact({"applicant": {"ssn": "1", "deep": {"ssn": "2"}}}, ["applicant"])
    assert shown == {"applicant": MASK}
    assert applied == ["applicant"]


def test_several_paths_apply_together_and_each_masked_location_is_listed_once():
    state = {"ssn": "1", "applicant": {"ssn": "2", "dob": "3"}}
    shown, applied = redact(state, ["ssn", "applicant.dob", "ssn"])
    assert shown == {"ssn": MASK, "applicant": {"ssn": MASK, "dob": MASK}}
    assert applied == ["applicant.dob", "applicant.ssn", "ssn"]


def test_a_top_level_list_of_records_is_masked_per_item():
    shown, applied = redact([{"ssn": "1"}, {"ssn": "2"}], ["ssn"])
    assert shown == [{"ssn": MASK}, {"ssn": MASK}]
    assert applied == ["[0].ssn", "[1].ssn"]


def test_no_declared_path_leaves_the_value_as_it_is():
    value = {"ssn": "1"}
    shown, applied = redact(value, [])
    assert shown is value and applied == []


def test_a_scalar_value_has_no_location_to_mask():
    assert redact("1815-12-10", ["date_of_birth"]) == ("1815-12-10", [])


def test_the_original_is_never_changed():
    state = {"applicant": {"ssn": "1"}, "list": [{"ssn": "2"}]}
    redact(state, ["ssn"])
    assert state == {"applicant": {"ssn": "1"}, "list": [{"ssn": "2"}]}


# --- search filters: no oracle -------------------------------------------------------------------


def test_a_filter_that_reaches_no_redacted_location_compares_with_the_real_values():
    assert filter_split({"status": "open", "amount": 5}, ["applicant.ssn"]) == ({"status": "open", "amount": 5}, {})


def test_a_filter_for_a_real_value_at_a_redacted_location_finds_nothing():
    """Otherwise a reader without the reveal right could guess the value, one filter at a time."""
    assert filter_split({"applicant": {"ssn": "123-45-6789"}}, ["applicant.ssn"]) is None
    assert filter_split({"status": "open", "ssn": "123"}, ["ssn"]) is None


def test_a_filter_on_the_mask_itself_compares_with_what_the_reader_sees():
    wanted = {"applicant": {"ssn": MASK}, "status": "open"}
    assert filter_split(wanted, ["applicant.ssn"]) == ({"status": "open"}, {"applicant": {"ssn": MASK}})


def test_every_value_masks_each_scalar_and_keeps_the_structure():
    """The policy of a graph no longer registered: its rules are unknown, so nothing is shown but the shape."""
    value = {"amount": 5, "applicant": {"name": "Ada", "tags": ["vip", None]}, "ok": True, "empty": {}}
    masked, applied = redact(value, [EVERY_VALUE])
    assert masked == {"amount": MASK, "applicant": {"name": MASK, "tags": [MASK, None]}, "ok": MASK, "empty": {}}
    assert "applicant.tags[0]" in applied


# --- an edit by someone who sees values masked keeps every one of them (hidden_kept) -------------------------

KYC = {"documents": [{"type": "passport", "number": "P-123"}, {"type": "id_card", "number": "I-456"}]}


@pytest.mark.parametrize(
    "patch,location",
    [
        ({"documents": []}, "documents[0].number"),  # an outside tester erased a passport number they never saw
        ({"documents": [{"type": "passport", "number": MASK}]}, "documents[1].number"),  # cut short
        ({"documents": "none"}, "documents[0].number"),  # the list replaced by a scalar
        ({"documents": [{"type": "passport"}, {"type": "id_card", "number": MASK}, {"type": "visa"}]}, None),
    ],
)
def test_a_state_edit_cannot_drop_a_value_its_editor_sees_masked(patch, location):
    from approvals.redaction import HiddenEdited, hidden_kept

    if location is None:  # left out, or the mask sent back: each kept; an item added beside them is the editor's
        kept = hidden_kept(patch, KYC, ["documents[*].number"])
        assert [d.get("number") for d in kept["documents"]] == ["P-123", "I-456", None]
        return
    with pytest.raises(HiddenEdited) as refused:
        hidden_kept(patch, KYC, ["documents[*].number"])
    assert refused.value.location == location
