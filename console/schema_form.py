"""Inputs generated from a JSON Schema, and the values typed into them parsed back.

One ``EditField`` per schema property (or per key of a value without a schema),
with a widget chosen from the property's type: integer, number, boolean, enum,
string or JSON. Fields are named like the domain's error fields
(``edits.amount``, ``action_args.tier``, ``decisions[0].args.x``,
``input.applicant``) so an ``InvalidInput`` raised by a service lands next to
the input that caused it. Used by the decision panel and the start-a-thread form.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict

from approvals.errors import DomainError
from approvals.inputs import INT64_MAX, INT64_MIN, MalformedJson, json_kind, json_loads_strict


@dataclass
class EditField:
    name: str  # the form input name, also the domain error field
    key: str
    widget: str  # integer | number | boolean | enum | string | json
    value: Any
    choices: list[Any] = field(default_factory=list)
    description: str = ""
    note: str = ""  # what the value feeds (a state field, an action argument, or both)
    error: str = ""
    raw: str | None = None  # what the user typed, re-shown after an error

    @property
    def shown(self) -> str:
        return self.raw if self.raw is not None else self.initial

    @property
    def initial(self) -> str:
        """The value as the form first shows it: what an untouched input sends back. An unset field is
        empty, a boolean too (its "—"): shown as "false", an unset flag made every Approve an edit of it,
        refused with "choose yes or no"."""
        if self.value is None:
            return ""
        if self.widget == "json":
            return json.dumps(self.value, indent=2, ensure_ascii=False)
        if self.widget == "boolean":
            return "true" if self.value else "false"
        return str(self.value)

    @property
    def label(self) -> str:
        """The field as its errors name it, as the domain's do ("term_months" is "Term months")."""
        words = self.key.replace("_", " ")
        return words[:1].upper() + words[1:]

    @property
    def input_id(self) -> str:
        return "f-" + "".join(c if c.isalnum() else "-" for c in self.name)


def _widget_for(schema: dict[str, Any] | None, value: Any) -> tuple[str, list[Any]]:
    schema = schema or {}
    options = [s for s in schema.get("anyOf", []) if isinstance(s, dict) and s.get("type") != "null"]
    if len(options) == 1:
        schema = options[0]
    if "enum" in schema:
        return "enum", list(schema["enum"])
    kind = schema.get("type")
    if kind in ("integer", "number", "boolean", "string"):
        return str(kind), []
    if kind or schema.get("anyOf") or schema.get("$ref"):
        return "json", []
    # No schema (free-form key, or action args without a schema): keep the value's own type.
    if isinstance(value, bool):
        return "boolean", []
    if isinstance(value, int):
        return "integer", []
    if isinstance(value, float):
        return "number", []
    if isinstance(value, str):
        return "string", []
    return "json", []


def fields_from_schema(
    prefix: str, schema: dict[str, Any] | None, values: dict[str, Any], keys: list[str] | None = None
) -> list[EditField]:
    properties = (schema or {}).get("properties") or {}
    names = keys if keys is not None else list(dict.fromkeys([*properties, *values]))
    out = []
    for key in names:
        prop = properties.get(key) if isinstance(properties.get(key), dict) else None
        widget, choices = _widget_for(prop, values.get(key))
        out.append(
            EditField(
                name=f"{prefix}.{key}",
                key=key,
                widget=widget,
                value=values.get(key),
                choices=choices,
                description=str((prop or {}).get("description", "")),
            )
        )
    return out


class FieldInvalid(ValueError):
    pass


# What a number field takes: ASCII digits with an optional sign; a decimal adds a fraction and an
# exponent as a JSON number has them. Python's int() and float() also read other scripts' digits
# ("١٢٣" is 123), full-width ones and underscores ("1_5" is 15): a reviewer's typo became an amount.
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def parse_value(f: EditField, raw: str) -> Any:
    """The typed ``raw`` as ``f``'s value; ``FieldInvalid`` says why not, naming the field by its label as the
    domain's errors do ("Amount must be at least 1"): the message is also read out of context (a screen
    reader's alert, the top-of-form notice of a plain submit)."""
    raw = raw.strip() if f.widget != "string" else raw
    label = f.label
    if f.widget == "integer":
        if not _WHOLE.fullmatch(raw):
            typed = f" ({raw!r} is not)" if raw else ""
            raise FieldInvalid(f"{label} must be a whole number: the digits 0-9, with an optional sign{typed}")
        # Past 19 digits it is out of range anyway (and past 4300, int() refuses to read it).
        whole = int(raw) if len(raw.lstrip("+-").lstrip("0")) <= 19 else INT64_MAX + 1
        if not INT64_MIN <= whole <= INT64_MAX:
            raise FieldInvalid(f"{label} must be within the signed 64-bit range")
        return whole
    if f.widget == "number":
        if not _DECIMAL.fullmatch(raw):
            typed = f" ({raw!r} is not)" if raw else ""
            raise FieldInvalid(
                f"{label} must be a number: the digits 0-9, an optional sign, fraction (.5) and exponent (e3){typed}"
            )
        number = float(raw)
        if not math.isfinite(number):
            raise FieldInvalid(f"{label} must be finite")
        if number.is_integer() and not INT64_MIN <= number <= INT64_MAX:
            raise FieldInvalid(f"{label} must be within the signed 64-bit range")
        return int(number) if number.is_integer() and "." not in raw and "e" not in raw.lower() else number
    if f.widget == "boolean":
        if raw not in ("true", "false"):
            raise FieldInvalid(f"{label} must be true or false")
        return raw == "true"
    if f.widget == "enum":
        for choice in f.choices:
            if str(choice) == raw:
                return choice
        raise FieldInvalid(f"{label} must be one of: {', '.join(map(str, f.choices))}")
    if f.widget == "json":
        if raw == "":
            return None
        return json_typed(raw, label)
    return raw


# json.loads' own words: "Expecting ',' delimiter: line 2 column 5 (char 10)".
_JSON_AT = re.compile(r"^(?P<what>.*): line (?P<line>\d+) column (?P<column>\d+) \(char \d+\)$")


def json_typed(raw: str, label: str, *, object_wanted: str = "") -> Any:
    """What a person typed into a JSON text box, parsed; ``FieldInvalid`` names the box by its ``label`` on the
    page ("Metadata (JSON object): not valid JSON — Expecting ',' delimiter at line 2, column 5"): the message is
    also read out of context (a screen reader's alert). With ``object_wanted`` (what the box takes, "a JSON
    object"), anything but an object is refused too, saying what was typed instead."""
    try:
        value = json_loads_strict(raw)
    except MalformedJson as exc:
        why = exc.message.rsplit("not valid JSON: ", 1)[-1]
        at = _JSON_AT.match(why)
        if at:
            why = f"{at['what']} at line {at['line']}, column {at['column']}"
        raise FieldInvalid(f"{label}: not valid JSON — {why}") from None
    except DomainError as exc:  # stored nowhere: a NUL byte, nesting past the limit, an integer out of range
        raise FieldInvalid(f"{label}: {json_problem(exc)}") from None
    if object_wanted and not isinstance(value, dict):
        raise FieldInvalid(f"{label}: must be {object_wanted}, not {json_kind(value)}")
    return value


def json_problem(exc: DomainError) -> str:
    """A JSON refusal's message for a form field: without the API's "request body"/"body" (a form has none)."""
    if isinstance(exc, MalformedJson):
        return exc.message.replace("request body is ", "", 1)
    return exc.message.removeprefix("body: ")


def changed_values(fields: list[EditField], data: QueryDict, errors: dict[str, str]) -> dict[str, Any]:
    """Values the user changed (typed); unchanged inputs are left out so only real edits are sent."""
    changed: dict[str, Any] = {}
    for f in fields:
        if f.name not in data:
            continue
        raw = data.get(f.name, "")
        if raw == f.initial:
            continue  # untouched (or changed back after a refusal)
        try:
            value = parse_value(f, raw)
        except FieldInvalid as exc:
            f.raw = raw
            errors[f.name] = str(exc)
            continue
        if value != f.value:
            f.raw = raw
            changed[f.key] = value
    return changed


def typed_kept(fields: list[EditField], data: QueryDict) -> None:
    """Re-show what the user typed in inputs that this submit does not use (a rejection's edits), unjudged:
    the inputs keep it should the reviewer switch back to an approval."""
    for f in fields:
        raw = data.get(f.name)
        if raw is not None and raw != f.initial:
            f.raw = raw


def json_object(data: QueryDict, name: str, label: str, errors: dict[str, str]) -> dict[str, Any] | None:
    """The JSON object typed into the text box ``name`` (labelled ``label`` on the page), None if left blank;
    a refusal goes to ``errors[name]``, naming the box by its label."""
    raw = (data.get(name) or "").strip()
    if not raw:
        return None
    try:
        value: dict[str, Any] = json_typed(raw, label, object_wanted="a JSON object")
    except FieldInvalid as exc:
        errors[name] = str(exc)
        return None
    return value


# --- a thread's start input ---------------------------------------------------------------


INPUT_JSON_LABEL = "Input (JSON object)"  # the start page's raw input box, as its label reads
METADATA_JSON_LABEL = "Metadata (JSON object)"  # the start page's raw metadata box


def start_fields(input_schema: dict[str, Any]) -> list[EditField]:
    return fields_from_schema("input", input_schema, {})


def start_input_parse(fields: list[EditField], data: QueryDict, errors: dict[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in fields:
        raw = data.get(f.name, "")
        if raw.strip() == "" and f.widget != "boolean":
            continue  # left blank: the graph's own default applies
        if f.widget == "boolean" and raw == "":
            continue
        try:
            values[f.key] = parse_value(f, raw)
        except FieldInvalid as exc:
            f.raw = raw
            errors[f.name] = str(exc)
        else:
            f.raw = raw
    raw_input = json_object(data, "input_json", INPUT_JSON_LABEL, errors)
    if raw_input:
        values.update(raw_input)
    return values
