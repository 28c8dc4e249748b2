"""The decision panel of a task: what it shows (decisions allowed, typed edit
inputs for the state and the action's arguments, one block per HITL action
request) and the ``DecisionRequest`` a submitted panel means.

Not a Django form: the inputs come from the task's payload and JSON Schemas
(``console.schema_form``), and errors from the domain are put next to the input
they name (``DecisionPanel.attach``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict

from approvals.external import answer_response
from approvals.gate_policy import gate_policy
from approvals.inputs import json_kind
from approvals.models import TaskKind
from approvals.payloads import DECISION_MEANING, DecisionRequest, decisions_allowed, payload_kind
from console.forms import NUL_REFUSED, nul_fields
from console.schema_form import (
    EditField,
    FieldInvalid,
    changed_values,
    fields_from_schema,
    json_object,
    json_typed,
    typed_kept,
)

DECISION_LABELS = {"approve": "Approve", "reject": "Reject", "edit": "Edit and approve", "respond": "Respond"}
# Decisions that carry no edits: the domain refuses state edits and action arguments with them (approvals.services,
# approvals.payloads), so the panel neither judges nor sends what is left in the edit inputs.
WITHOUT_EDITS = ("reject", "respond")
EDITS_JSON_LABEL = "State patch (JSON object)"  # the raw state edits box, as its label reads (its errors name it)


@dataclass
class DecisionPanel:
    """Everything the decision panel shows for one task, and the request it parses into."""

    kind: str
    allowed: list[str]
    state_fields: list[EditField]
    arg_fields: list[EditField]
    requests: list[dict[str, Any]] = field(default_factory=list)  # HITL: one entry per action request
    response_schema: Any = None
    # What the "answer as JSON" input is sent as: a graph's exact resume value, or (an external task)
    # the edited response, which the API takes as ``action_args``.
    answer_as: str = "resume"
    errors: dict[str, str] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)
    # Decisions the payload allows but this viewer may not give now, and why (not offered; refused if sent).
    withheld: dict[str, str] = field(default_factory=dict)

    def withhold(self, decision: str, why: str) -> None:
        if decision in self.allowed:
            self.allowed = [d for d in self.allowed if d != decision]
            self.withheld[decision] = why

    @property
    def choices(self) -> list[tuple[str, str]]:
        return [(d, DECISION_LABELS[d]) for d in self.allowed]

    # What the form renders (the template asks these too): an error goes only next to an input shown.
    @property
    def shows_outcome(self) -> bool:
        return self.kind != "hitl"

    @property
    def shows_edits(self) -> bool:
        return self.shows_outcome and "edit" in self.allowed and bool(self.arg_fields or self.state_fields)

    @property
    def shows_message(self) -> bool:
        return self.shows_outcome and "respond" in self.allowed

    @property
    def shows_answer(self) -> bool:
        return self.shows_outcome and bool(self.response_schema)

    @property
    def answer_is_response(self) -> bool:
        return self.answer_as == "action_args"

    @property
    def answer_label(self) -> str:
        """The answer box's label, which its errors name."""
        return "Your answer as JSON" if self.answer_is_response else "Answer as JSON"

    @property
    def form_error(self) -> str:
        return self.errors.get("__all__", "")

    def error_for(self, name: str) -> str:
        return self.errors.get(name, "")

    def attach(self, field_name: str | None, message: str) -> None:
        """Put a domain error next to the input it names (or the closest enclosing one shown), else at the
        top of the form: a refusal is never invisible."""
        shown = self._inputs_shown()
        # Request fields without an input of their name, and the inputs that stand for them, in order.
        aliases = {
            "edits": ["edits_json", *(["resume"] if self.answer_is_response else [])],
            "action_args": ["resume", "edits_json"] if self.answer_is_response else ["edits_json"],
        }
        candidate = field_name or ""
        while candidate:
            for name in [candidate, *aliases.get(candidate, [])]:
                if name in shown:
                    self.errors[name] = message
                    return
            candidate = _parent(candidate)
        self.errors["__all__"] = message

    def _inputs_shown(self) -> set[str]:
        names = {"reason", "password", "claim"}  # always rendered ("claim": its notice)
        if self.shows_outcome:
            names.add("decision")
        if self.shows_edits:
            names |= {"edits_json", *(f.name for f in [*self.state_fields, *self.arg_fields])}
        if self.shows_message:
            names.add("message")
        if self.shows_answer:
            names.add("resume")
        for item in self.requests:
            names |= {item["type_name"], item["message_name"]}
            if "edit" in item["allowed"] and item["fields"]:
                names |= {item["args_name"], *(f.name for f in item["fields"])}
        return names


def _parent(name: str) -> str:
    if name.endswith("]") and "[" in name:
        return name[: name.rindex("[")]
    return name.rsplit(".", 1)[0] if "." in name else ""


def decision_panel_for(task: Any, state_values: dict[str, Any], state_schema: dict[str, Any]) -> DecisionPanel:
    payload = task.payload
    kind = payload_kind(payload, task.kind)
    allowed = decisions_allowed(payload, task.kind, task.response_schema)
    editable: list[str] | None = None
    arg_fields: list[EditField] = []
    requests: list[dict[str, Any]] = []
    action_name = ""
    action_args: dict[str, Any] | None = None
    state_args: set[str] = set()
    if kind == "gatehouse":
        # One edit surface: an argument the gate reads from the state field of the same
        # name (the gatekeeper convention) is edited once, as that state field, which is
        # what the action node reads; only the other arguments get their own inputs.
        editable = list(gate_policy(payload, task.kind).editable or [])
        action = payload.get("proposed_action") or {}
        action_name = str(action.get("name") or "")
        if isinstance(action.get("args"), dict):
            action_args = action["args"]
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
    # A value the state does not hold yet is the one the action proposes (the graph's default, e.g. a loan's
    # term_months 12 when the applicant gave none): shown there, not an empty input beside "term_months 12".
    proposed = {k: v for k, v in (action_args or {}).items() if k in state_args and state_values.get(k) is None}
    state_fields = fields_from_schema("edits", state_schema, {**state_values, **proposed}, keys)
    for f in state_fields:
        f.note = f"state field, also the {action_name} argument" if f.key in state_args else "state field"
    return DecisionPanel(
        kind=kind,
        allowed=allowed,
        state_fields=state_fields,
        arg_fields=arg_fields,
        requests=requests,
        response_schema=task.response_schema,
        answer_as="action_args" if task.kind == TaskKind.EXTERNAL else "resume",
    )


def decision_request_parse(form: DecisionPanel, data: QueryDict) -> DecisionRequest | None:
    """The ``DecisionRequest`` the submitted form means, or None with ``form.errors`` filled (nothing sent)."""
    form.data = {k: data.get(k, "") for k in data}
    errors = form.errors
    refused = nul_fields(data)
    if refused:  # PostgreSQL can store no such text: each refused next to its input (the view is form_text_checked)
        boxes = {"edits_json": EDITS_JSON_LABEL, "resume": form.answer_label}  # named as their labels read
        for name in refused:
            form.attach(
                None if "\x00" in name else name, f"{boxes[name]}: {NUL_REFUSED}" if name in boxes else NUL_REFUSED
            )
        return None
    reason = data.get("reason", "")
    message = data.get("message", "") or None
    checkpoint_id = data.get("checkpoint_id") or None
    # The evidence the page showed (console.page_context.task_context): refused if a proposal was made since.
    evidence = data.get("evidence_digest") or None
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
        return DecisionRequest(
            outcome=outcome, reason=reason, checkpoint_id=checkpoint_id, evidence_digest=evidence, decisions=decisions
        )

    outcome = data.get("decision", "")
    if outcome in form.withheld:
        errors["decision"] = form.withheld[outcome]
    elif outcome not in form.allowed:
        errors["decision"] = f"choose one of: {', '.join(DECISION_LABELS[d] for d in form.allowed)}"
    patch: dict[str, Any] = {}
    args_changed: dict[str, Any] = {}
    if outcome in WITHOUT_EDITS:
        # A leftover edit (an amount cleared, then Reject chosen) refused the rejection over a field it does
        # not use, and hid the rejection's own errors (a missing reason) behind it.
        typed_kept([*form.state_fields, *form.arg_fields], data)
    else:
        patch = changed_values(form.state_fields, data, errors)
        raw_patch = json_object(data, "edits_json", EDITS_JSON_LABEL, errors)
        if raw_patch:
            patch.update(raw_patch)
        args_changed = changed_values(form.arg_fields, data, errors)
    resume: Any = None
    has_resume = False
    if form.shows_answer and (data.get("resume") or "").strip():
        try:
            resume, has_resume = json_typed(str(data["resume"]), form.answer_label), True
        except FieldInvalid as exc:
            errors["resume"] = str(exc)
    response: dict[str, Any] | None = None
    if form.answer_is_response and has_resume and resume is None:  # a typed null is an answer, not none given
        errors["resume"] = f"{form.answer_label}: must be a JSON object matching the schema above, not null"
    if form.answer_is_response and not errors:
        response = _response_parse(outcome, resume if has_resume else None, errors, label=form.answer_label)
        has_resume = False  # sent as the edited response, as the API's edit sends it
    if errors:
        return None
    action_args: dict[str, Any] | None = response
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
        evidence_digest=evidence,
        state_patch=patch or None,
        action_args=action_args,
        message=message,
    )
    if has_resume:
        request.resume = resume
    return request


def _response_parse(outcome: str, answer: Any, errors: dict[str, str], *, label: str) -> dict[str, Any] | None:
    """An external task's answer as its edited response: the object itself, or the ``action_args`` of
    the API's wrapped form ``{"decision": "edit", "action_args": {...}}`` (errors under ``resume``)."""
    stated, response = answer_response(answer)
    if stated is not None and DECISION_MEANING.get(stated) != DECISION_MEANING.get(outcome):
        errors["resume"] = f"the answer says {stated!r} but you chose {DECISION_LABELS.get(outcome, outcome)!r}"
    elif response is not None and not isinstance(response, dict):
        errors["resume"] = f"{label}: must be a JSON object matching the schema above, not {json_kind(response)}"
    elif response is None and outcome == "edit":
        errors["resume"] = "Edit and approve needs your answer: a JSON object matching the schema above"
    elif response is not None and outcome not in ("approve", "edit"):
        errors["resume"] = f"an answer goes with Edit and approve, not {DECISION_LABELS.get(outcome, outcome)}"
    return response if isinstance(response, dict) and "resume" not in errors else None
