"""Forms: inbox and audit filters, and typed edit forms generated from JSON schemas.

Edit fields are named like the domain's error fields (``edits.amount``,
``action_args.tier``, ``decisions[0].type``) so an ``InvalidInput`` raised by
a service lands next to the input that caused it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.validators import MaxLengthValidator
from django.http import QueryDict

from approvals.errors import DomainError
from approvals.gate_policy import gate_policy
from approvals.inbox_filter import InboxFilter
from approvals.inputs import INT64_MAX, INT64_MIN, MalformedJson, json_loads_strict
from approvals.models import TaskStatus
from approvals.payloads import DecisionRequest, decisions_allowed, payload_kind
from console.selectors import SORTS

CLAIM_CHOICES = [("", "Anyone"), ("mine", "Claimed by me"), ("unclaimed", "Unclaimed"), ("others", "Claimed by others")]
ASSIGNED_CHOICES = [("", "Anyone"), ("me", "Assigned to me / my groups")]  # hand-offs
STATUS_CHOICES = [(s.value, s.label) for s in TaskStatus] + [("all", "Any status")]
DUE_CHOICES = [("", "Any deadline"), ("soon", "Due soon"), ("overdue", "Overdue"), ("escalated", "Escalated")]
DECISION_LABELS = {"approve": "Approve", "reject": "Reject", "edit": "Edit and approve", "respond": "Respond"}


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


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    action = forms.CharField(required=False, max_length=64)
    graph = forms.CharField(required=False, max_length=100)
    thread = forms.UUIDField(required=False)
    since = forms.DateTimeField(required=False, label="From")
    until = forms.DateTimeField(required=False, label="Until")
    before = forms.IntegerField(required=False, min_value=1)


# --- typed fields from a schema ---------------------------------------------------------


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
        if self.raw is not None:
            return self.raw
        if self.widget == "json":
            return json.dumps(self.value, indent=2, ensure_ascii=False) if self.value is not None else ""
        if self.widget == "boolean":
            return "true" if self.value else "false"
        return "" if self.value is None else str(self.value)

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


def parse_value(f: EditField, raw: str) -> Any:
    raw = raw.strip() if f.widget != "string" else raw
    if f.widget == "integer":
        if raw == "":
            raise FieldInvalid("enter a whole number")
        try:
            whole = int(raw)
        except ValueError:
            raise FieldInvalid(f"{raw!r} is not a whole number") from None
        if not INT64_MIN <= whole <= INT64_MAX:
            raise FieldInvalid("the number is outside the signed 64-bit range")
        return whole
    if f.widget == "number":
        try:
            number = float(raw)
        except ValueError:
            raise FieldInvalid(f"{raw!r} is not a number") from None
        if not math.isfinite(number):
            raise FieldInvalid("the number must be finite")
        if number.is_integer() and not INT64_MIN <= number <= INT64_MAX:
            raise FieldInvalid("the number is outside the signed 64-bit range")
        return int(number) if number.is_integer() and "." not in raw and "e" not in raw.lower() else number
    if f.widget == "boolean":
        if raw not in ("true", "false"):
            raise FieldInvalid("choose yes or no")
        return raw == "true"
    if f.widget == "enum":
        for choice in f.choices:
            if str(choice) == raw:
                return choice
        raise FieldInvalid(f"choose one of: {', '.join(map(str, f.choices))}")
    if f.widget == "json":
        if raw == "":
            return None
        try:
            return json_loads_strict(raw)
        except DomainError as exc:
            raise FieldInvalid(_json_problem(exc)) from None
    return raw


def _json_problem(exc: DomainError) -> str:
    return exc.message.replace("request body is ", "", 1) if isinstance(exc, MalformedJson) else exc.message


def changed_values(fields: list[EditField], data: QueryDict, errors: dict[str, str]) -> dict[str, Any]:
    """Values the user changed (typed); unchanged inputs are left out so only real edits are sent."""
    changed: dict[str, Any] = {}
    for f in fields:
        if f.name not in data:
            continue
        raw = data.get(f.name, "")
        if raw == f.shown and f.raw is None:
            continue
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


def json_object(data: QueryDict, name: str, errors: dict[str, str]) -> dict[str, Any] | None:
    raw = (data.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = json_loads_strict(raw)
    except DomainError as exc:
        errors[name] = _json_problem(exc)
        return None
    if not isinstance(value, dict):
        errors[name] = "must be a JSON object"
        return None
    return value


# --- the decision form ---------------------------------------------------------------------


@dataclass
class DecisionForm:
    """Everything the decision panel shows for one task, and the request it parses into."""

    kind: str
    allowed: list[str]
    state_fields: list[EditField]
    arg_fields: list[EditField]
    requests: list[dict[str, Any]] = field(default_factory=list)  # HITL: one entry per action request
    response_schema: Any = None
    errors: dict[str, str] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)

    @property
    def choices(self) -> list[tuple[str, str]]:
        return [(d, DECISION_LABELS[d]) for d in self.allowed]

    @property
    def form_error(self) -> str:
        return self.errors.get("__all__", "")

    def error_for(self, name: str) -> str:
        return self.errors.get(name, "")

    def attach(self, field_name: str | None, message: str) -> None:
        """Put a domain error next to the input it names (or the closest enclosing one)."""
        names = {f.name for f in [*self.state_fields, *self.arg_fields]}
        names |= {"reason", "message", "decision", "resume", "edits_json", "claim", "password"}
        for item in self.requests:
            names |= {item["type_name"], item["args_name"], item["message_name"]}
            names |= {f.name for f in item["fields"]}
        candidate = field_name or ""
        aliases = {"edits": "edits_json", "action_args": "edits_json", "decisions": "__all__", "task_id": "__all__"}
        while candidate:
            if candidate in names:
                self.errors[candidate] = message
                return
            if candidate in aliases:
                self.errors[aliases[candidate]] = message
                return
            candidate = _parent(candidate)
        self.errors["__all__"] = message


def _parent(name: str) -> str:
    if name.endswith("]") and "[" in name:
        return name[: name.rindex("[")]
    return name.rsplit(".", 1)[0] if "." in name else ""


def decision_form_for(task: Any, state_values: dict[str, Any], state_schema: dict[str, Any]) -> DecisionForm:
    payload = task.payload
    kind = payload_kind(payload, task.kind)
    allowed = decisions_allowed(payload, task.kind, task.response_schema)
    editable: list[str] | None = None
    arg_fields: list[EditField] = []
    requests: list[dict[str, Any]] = []
    action_name = ""
    state_args: set[str] = set()
    if kind == "gatehouse":
        # One edit surface: an argument the gate reads from the state field of the same
        # name (the gatekeeper convention) is edited once, as that state field, which is
        # what the action node reads; only the other arguments get their own inputs.
        editable = list(gate_policy(payload, task.kind).editable or [])
        action = payload.get("proposed_action") or {}
        action_name = str(action.get("name") or "")
        if isinstance(action.get("args"), dict):
            state_args = {k for k in action["args"] if k in editable}
            own = [k for k in action["args"] if k not in state_args]
            arg_fields = fields_from_schema("action_args", action.get("args_schema"), action["args"], own)
            for f in arg_fields:
                f.note = f"argument of {action_name} only (the state is not changed)"
    elif kind == "agent_inbox":
        item = payload[0] if isinstance(payload, list) else payload
        args = item["action_request"].get("args") or {}
        arg_fields = fields_from_schema("action_args", None, args if isinstance(args, dict) else {})
        editable = []
    elif kind == "tool_approval":
        args = payload.get("args") or {}
        arg_fields = fields_from_schema("action_args", None, args if isinstance(args, dict) else {})
        editable = []
    elif kind == "hitl":
        editable = []
        for index, req in enumerate(payload["action_requests"]):
            config: dict[str, Any] = next(
                (c for c in payload["review_configs"] if c.get("action_name") == req.get("name")), {}
            )
            base = f"decisions[{index}]"
            args = req.get("args") if isinstance(req.get("args"), dict) else {}
            requests.append(
                {
                    "index": index,
                    "name": req.get("name"),
                    "description": req.get("description", ""),
                    "args": args,
                    "allowed": list(config.get("allowed_decisions") or ["approve", "edit", "reject", "respond"]),
                    "type_name": f"{base}.type",
                    "args_name": f"{base}.args",
                    "message_name": f"{base}.message",
                    "fields": fields_from_schema(f"{base}.args", config.get("args_schema"), args),
                }
            )
    state_props = state_schema.get("properties") or {}
    keys = [k for k in state_props if editable is None or k in editable]
    state_fields = fields_from_schema("edits", state_schema, state_values, keys)
    for f in state_fields:
        f.note = f"state field, also the {action_name} argument" if f.key in state_args else "state field"
    return DecisionForm(
        kind=kind,
        allowed=allowed,
        state_fields=state_fields,
        arg_fields=arg_fields,
        requests=requests,
        response_schema=task.response_schema,
    )


def decision_request_parse(form: DecisionForm, data: QueryDict) -> DecisionRequest | None:
    """The ``DecisionRequest`` the submitted form means, or None with ``form.errors`` filled (nothing sent)."""
    form.data = {k: data.get(k, "") for k in data}
    errors = form.errors
    reason = data.get("reason", "")
    message = data.get("message", "") or None
    checkpoint_id = data.get("checkpoint_id") or None
    if form.kind == "hitl":
        decisions = []
        for item in form.requests:
            kind = data.get(item["type_name"], "")
            if kind not in item["allowed"]:
                errors[item["type_name"]] = f"choose one of: {', '.join(item['allowed'])}"
                continue
            entry: dict[str, Any] = {"type": kind}
            if kind == "edit":
                edited = changed_values(item["fields"], data, errors)
                entry["args"] = {**item["args"], **edited}
            if kind in ("respond", "reject"):
                entry["message"] = data.get(item["message_name"], "") or reason
            decisions.append(entry)
        if errors:
            return None
        types = {d["type"] for d in decisions}
        outcome = next((t for t in ("reject", "edit", "respond") if t in types), "approve")
        return DecisionRequest(outcome=outcome, reason=reason, checkpoint_id=checkpoint_id, decisions=decisions)

    outcome = data.get("decision", "")
    if outcome not in form.allowed:
        errors["decision"] = f"choose one of: {', '.join(DECISION_LABELS[d] for d in form.allowed)}"
    patch = changed_values(form.state_fields, data, errors)
    raw_patch = json_object(data, "edits_json", errors)
    if raw_patch:
        patch.update(raw_patch)
    args_changed = changed_values(form.arg_fields, data, errors)
    resume: Any = None
    has_resume = False
    if form.response_schema and (data.get("resume") or "").strip():
        try:
            resume, has_resume = json_loads_strict(str(data["resume"])), True
        except DomainError as exc:
            errors["resume"] = _json_problem(exc)
    if errors:
        return None
    action_args: dict[str, Any] | None = None
    if args_changed:
        if form.kind in ("agent_inbox", "tool_approval"):
            action_args = {**{f.key: f.value for f in form.arg_fields}, **args_changed}
        else:
            action_args = args_changed
    if (patch or action_args) and outcome == "approve" and "edit" in form.allowed:
        # Changing a value and pressing Approve means "approve with my edits".
        outcome = "edit"
    request = DecisionRequest(
        outcome=outcome,
        reason=reason,
        checkpoint_id=checkpoint_id,
        state_patch=patch or None,
        action_args=action_args,
        message=message,
    )
    if has_resume:
        request.resume = resume
    return request


# --- start a thread ---------------------------------------------------------------------------


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
    raw_input = json_object(data, "input_json", errors)
    if raw_input:
        values.update(raw_input)
    return values
