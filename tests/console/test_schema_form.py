"""The console's typed edit fields: an input left as the form showed it is no edit.

A graph whose state has a boolean not set yet (``refunded``) at the gate: the select showed "false"
while it sent "" for "—", so a plain Approve was read as an edit of the flag and refused ("choose yes
or no"); after that refusal the form had dropped "—" and showed "true", so a second Approve edited it.
"""

from __future__ import annotations

import re

import pytest
from django.http import QueryDict
from django.template.loader import render_to_string

from console.schema_form import EditField, FieldInvalid, changed_values, fields_from_schema, parse_value

SCHEMA = {
    "properties": {
        "refunded": {"type": "boolean"},
        "tier": {"enum": ["basic", "premium"]},
        "amount": {"type": "integer"},
        "note": {"type": "string"},
    }
}


def _form(values: dict) -> list:
    return fields_from_schema("edits", SCHEMA, values)


def _posted(**fields: str) -> QueryDict:
    data = QueryDict(mutable=True)
    for name, value in fields.items():
        data[f"edits.{name}"] = value
    return data


def _selected(html: str) -> list[str]:
    return re.findall(r'<option value="([^"]*)" ?selected', html)


def test_unset_fields_left_alone_are_no_edit():
    errors: dict[str, str] = {}
    assert changed_values(_form({}), _posted(refunded="", tier="", amount="", note=""), errors) == {}
    assert errors == {}


def test_set_fields_left_alone_are_no_edit_and_a_change_is_one():
    values = {"refunded": False, "tier": "basic", "amount": 5, "note": "x"}
    errors: dict[str, str] = {}
    untouched = _posted(refunded="false", tier="basic", amount="5", note="x")
    assert changed_values(_form(values), untouched, errors) == {}
    changed = _posted(refunded="true", tier="premium", amount="6", note="x")
    assert changed_values(_form(values), changed, errors) == {"refunded": True, "tier": "premium", "amount": 6}
    assert errors == {}


def test_an_unset_select_shows_its_blank_choice_also_after_a_refusal():
    [flag, tier, *_] = _form({})
    assert _selected(render_to_string("console/partials/field.html", {"f": flag, "errors": {}})) == [""]
    flag.raw, tier.raw = "", ""  # re-shown after another field's refusal, as the user left them
    for field in (flag, tier):
        html = render_to_string("console/partials/field.html", {"f": field, "errors": {}})
        assert _selected(html) == [""], field.key
    assert changed_values([flag, tier], _posted(refunded="", tier=""), {}) == {}


# --- numbers: ASCII digits only, as JSON writes them ----------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ["\u0661\u0662\u0663", "\uff11\uff15\uff10\uff10\uff10", "15_000", "1_5", "1 000", "0x10", "1e3", "1.0", "", "٣"],
    ids=["arabic-indic", "full-width", "underscores", "1_5", "space", "hex", "exponent", "fraction", "empty", "one"],
)
def test_a_whole_number_field_takes_only_ascii_digits_and_a_sign(raw):
    """int() read "١٢٣" as 123 (a decision edit paid 123), "1_5" as 15, full-width digits too."""
    with pytest.raises(FieldInvalid):
        parse_value(EditField(name="edits.amount", key="amount", widget="integer", value=None), raw)


@pytest.mark.parametrize(
    "raw", ["\u0661\u0662\u0663", "\uff11.5", "1_0.5", "1.", ".5", "1e", "infinity", "nan", "1e400", "0x1p3"]
)
def test_a_decimal_field_takes_only_a_json_number(raw):
    with pytest.raises(FieldInvalid):
        parse_value(EditField(name="edits.rate", key="rate", widget="number", value=None), raw)


@pytest.mark.parametrize(
    "widget,raw,value",
    [
        ("integer", "15000", 15000),
        ("integer", "-7", -7),
        ("integer", "+7", 7),
        ("integer", " 42 ", 42),
        ("number", "2.5", 2.5),
        ("number", "-1.25e2", -125.0),
        ("number", "1E3", 1000.0),
        ("number", "12", 12),
        ("integer", "0009223372036854775807", 9223372036854775807),
    ],
)
def test_ascii_numbers_still_read_as_before(widget, raw, value):
    parsed = parse_value(EditField(name="edits.x", key="x", widget=widget, value=None), raw)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("raw", ["9223372036854775808", "-9223372036854775809", "9" * 5000])
def test_a_whole_number_past_64_bits_is_a_form_error_not_a_crash(raw):
    with pytest.raises(FieldInvalid, match="64-bit"):
        parse_value(EditField(name="edits.amount", key="amount", widget="integer", value=None), raw)


# --- every error names its field -----------------------------------------------------------------


@pytest.mark.parametrize(
    "widget,raw,expected",
    [
        ("integer", "abc", "Term months must be a whole number: the digits 0-9, with an optional sign ('abc' is not)"),
        (
            "integer",
            "12.5",
            "Term months must be a whole number: the digits 0-9, with an optional sign ('12.5' is not)",
        ),
        ("integer", "", "Term months must be a whole number: the digits 0-9, with an optional sign"),
        ("integer", "9" * 25, "Term months must be within the signed 64-bit range"),
        (
            "number",
            "x",
            "Term months must be a number: the digits 0-9, an optional sign, fraction (.5) and exponent (e3)",
        ),
        ("number", "1e400", "Term months must be finite"),
        ("boolean", "maybe", "Term months must be true or false"),
        ("enum", "7", "Term months must be one of: 12, 24"),
        (
            "json",
            "{x",
            "Term months: not valid JSON — Expecting property name enclosed in double quotes at line 1, column 2",
        ),
    ],
)
def test_every_refused_value_names_its_field_by_its_label(widget, raw, expected):
    """ "'abc' is not a whole number…" and "enter a whole number" named no field, unlike the domain's
    "Amount must be at least 1": read out of context (a screen reader's alert), they said nothing of where."""
    field = EditField(name="edits.term_months", key="term_months", widget=widget, value=None, choices=[12, 24])
    with pytest.raises(FieldInvalid) as refused:
        parse_value(field, raw)
    assert str(refused.value).startswith(expected)
