"""The console's typed edit fields: an input left as the form showed it is no edit.

A graph whose state has a boolean not set yet (``refunded``) at the gate: the select showed "false"
while it sent "" for "—", so a plain Approve was read as an edit of the flag and refused ("choose yes
or no"); after that refusal the form had dropped "—" and showed "true", so a second Approve edited it.
"""

from __future__ import annotations

import re

from django.http import QueryDict
from django.template.loader import render_to_string

from console.schema_form import changed_values, fields_from_schema

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
