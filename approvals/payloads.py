"""Interrupt payload conventions: what a reviewer may decide, and the resume value it becomes.

First-class shapes:
- ``gatehouse``: Gatehouse's gate payload (``runtime.gatekeeper``);
- ``hitl``: LangChain ``HumanInTheLoopMiddleware`` batched requests
  (``action_requests`` + ``review_configs``);
- ``tool_approval``: the middleware's ``per_call`` mode (one tool call per interrupt);
- ``agent_inbox``: Agent Inbox ``HumanInterrupt`` (a list of one request);
- ``breakpoint``: a static ``interrupt_before``/``after`` pause;
- ``generic``: any other JSON value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from approvals import json_schemas
from approvals.errors import InvalidInput
from runtime.gatekeeper import GATE_MARKER

NOT_GIVEN: Any = object()

GENERIC_DECISIONS = ["approve", "reject", "edit", "respond"]
_INBOX_MAP = {"approve": "allow_accept", "edit": "allow_edit", "respond": "allow_respond", "reject": "allow_ignore"}


# The longest reason a decision keeps, on every surface (native API, console, /lg/ resumes, bulk): one
# longer is refused naming ``reason`` (422), not cut short. The same as a comment's and a replay's.
REASON_MAX_CHARS = 4000


@dataclass
class DecisionRequest:
    outcome: str
    reason: str = ""
    checkpoint_id: str | None = None
    state_patch: dict[str, Any] | None = None
    action_args: dict[str, Any] | None = None
    message: str | None = None
    decisions: list[dict[str, Any]] | None = None  # per action request (HITL)
    resume: Any = field(default=NOT_GIVEN)
    evidence_digest: str | None = None  # what the client was shown; refused if it no longer matches


def payload_kind(payload: Any, task_kind: str = "interrupt") -> str:
    if task_kind == "breakpoint":
        return "breakpoint"
    if isinstance(payload, dict):
        if payload.get("type") == GATE_MARKER:
            return "gatehouse"
        if isinstance(payload.get("action_requests"), list) and isinstance(payload.get("review_configs"), list):
            return "hitl"
        if payload.get("type") == "tool_approval" and "name" in payload:
            return "tool_approval"
    if _inbox_request(payload) is not None:
        return "agent_inbox"
    return "generic"


def _inbox_request(payload: Any) -> dict[str, Any] | None:
    item = payload[0] if isinstance(payload, list) and len(payload) == 1 else payload
    if isinstance(item, dict) and isinstance(item.get("action_request"), dict) and isinstance(item.get("config"), dict):
        return item
    return None


def payload_title(payload: Any, node: str) -> str:
    kind = payload_kind(payload)
    if kind == "gatehouse":
        return str(payload.get("title") or node)[:300]
    if kind == "hitl":
        names = ", ".join(str(r.get("name")) for r in payload["action_requests"])
        return f"Review tool calls: {names}"[:300]
    if kind == "tool_approval":
        return f"Review tool call: {payload['name']}"[:300]
    if kind == "agent_inbox":
        req = _inbox_request(payload) or {}
        return str(req.get("description") or req["action_request"].get("action") or node)[:300]
    if isinstance(payload, dict):
        for key in ("title", "question", "message", "description"):
            value = payload.get(key)
            if isinstance(value, str):
                return value[:300]
    if isinstance(payload, str):
        return payload[:300]
    return f"Review at {node}"


def _hitl_allowed(payload: dict[str, Any], index: int) -> list[str]:
    name = payload["action_requests"][index].get("name")
    for config in payload["review_configs"]:
        if config.get("action_name") == name:
            return list(config.get("allowed_decisions") or [])
    return ["approve", "edit", "reject", "respond"]


def _schema_decisions(schema: Any) -> list[str]:
    """Decision types a ``response_schema`` accepts (its ``type`` constants)."""
    found: list[Any] = []
    # Iterative: a graph's schema is not depth-checked as request JSON is.
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            properties = node.get("properties")
            type_prop = properties.get("type") if isinstance(properties, dict) else None
            if isinstance(type_prop, dict):
                if "const" in type_prop:
                    found.append(type_prop["const"])
                enum = type_prop.get("enum")
                found.extend(enum if isinstance(enum, list) else [])
            pending.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            pending.extend(reversed(node))
    return [d for d in dict.fromkeys(d for d in found if isinstance(d, str)) if d in GENERIC_DECISIONS]


def decisions_allowed(payload: Any, task_kind: str = "interrupt", response_schema: Any = None) -> list[str]:
    kind = payload_kind(payload, task_kind)
    if kind == "breakpoint":
        return ["approve", "edit", "reject"]
    if kind == "gatehouse":
        return list(payload.get("allowed_decisions") or GENERIC_DECISIONS)
    if kind == "hitl":
        # A one-click decision applies to every request, so it must be allowed for all.
        per_request = [set(_hitl_allowed(payload, i)) for i in range(len(payload["action_requests"]))]
        common = set.intersection(*per_request) if per_request else set()
        return [d for d in GENERIC_DECISIONS if d in common]
    if kind == "tool_approval":
        return _schema_decisions(response_schema) or list(GENERIC_DECISIONS)
    if kind == "agent_inbox":
        config = (_inbox_request(payload) or {})["config"]
        return [d for d, flag in _INBOX_MAP.items() if config.get(flag)]
    return list(GENERIC_DECISIONS)


# What a decision means for the action its gate guards; approving with edits still approves.
DECISION_MEANING = {"approve": "approved", "edit": "approved", "reject": "rejected", "respond": "reviewed"}
_INBOX_OUTCOMES = {"accept": "approve", "edit": "edit", "response": "respond", "ignore": "reject"}


def resume_outcome(value: Any) -> str | None:
    """The decision an exact resume value states in its own words: a gate's ``decision``, a tool call's
    ``type``, the most consequential of per-call ``decisions`` (reject, edit, respond, then approve), an
    Agent Inbox response's ``type``; None for a value that states none (a generic answer)."""
    if isinstance(value, dict):
        if value.get("decision") in GENERIC_DECISIONS:
            return str(value["decision"])
        if value.get("type") in GENERIC_DECISIONS:
            return str(value["type"])
        if isinstance(value.get("decisions"), list):
            types = {d.get("type") for d in value["decisions"] if isinstance(d, dict)}
            return next((o for o in ("reject", "edit", "respond", "approve") if o in types), None)
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return _INBOX_OUTCOMES.get(str(value[0].get("type")))
    return None


def edits_proposed(request: DecisionRequest) -> bool:
    """Whether the decision changes what was proposed: state edits, or edited action arguments (given
    beside the decision or inside its exact resume value)."""
    resumed_args = request.resume.get("action_args") if isinstance(request.resume, dict) else None
    return bool(request.state_patch) or request.action_args is not None or bool(resumed_args)


def _exact_resume_check(payload: Any, task_kind: str, request: DecisionRequest) -> None:
    """An exact resume value must be one the paused code can read, and say what the recorded decision
    says: the decision row (its outcome, its meaning, the reason policy, the quorum) is what auditors
    and verifiers read, the resume value is what the graph acts on. A "reject" carrying
    ``{"decision": "approve"}`` paid the loan; ``[1, 2]`` for a gate closed the task and failed the run."""
    check = _RESUME_SHAPES.get(payload_kind(payload, task_kind))
    if check is not None:
        check(payload, task_kind, request)
    stated = resume_outcome(request.resume)
    if stated is not None and DECISION_MEANING[stated] != DECISION_MEANING.get(request.outcome):
        raise InvalidInput(
            f"the resume value says {stated!r} but the decision is {request.outcome!r}: send one decision",
            field="resume",
        )


def _allowed_or_refuse(decision: str, allowed: list[str], field: str) -> None:
    if decision not in allowed:
        raise InvalidInput(
            f"decision {decision!r} is not allowed here (allowed: {', '.join(allowed) or 'none'})", field=field
        )


def _gate_resume_check(payload: Any, task_kind: str, request: DecisionRequest) -> None:
    """What ``runtime.gatekeeper.request_review`` reads: an allowed ``decision``, ``action_args`` the action takes."""
    resume = request.resume
    if not isinstance(resume, dict) or not isinstance(resume.get("decision"), str):
        raise InvalidInput("a gate is resumed with an object naming its 'decision'", field="resume.decision")
    allowed = decisions_allowed(payload, task_kind)
    _allowed_or_refuse(request.outcome, allowed, "decision")
    _allowed_or_refuse(resume["decision"], allowed, "resume.decision")
    args = resume.get("action_args")
    if args is not None:
        if not isinstance(args, dict):
            raise InvalidInput("edited action arguments must be an object", field="resume.action_args")
        _gate_args_check(payload, args)


def _hitl_resume_check(payload: Any, task_kind: str, request: DecisionRequest) -> None:
    """What ``HumanInTheLoopMiddleware`` reads: ``{"decisions": [...]}``, one allowed decision per tool call."""
    resume = request.resume
    if not isinstance(resume, dict) or not isinstance(resume.get("decisions"), list):
        raise InvalidInput(
            "tool-call reviews are resumed with {'decisions': [one per tool call]}", field="resume.decisions"
        )
    try:
        _hitl_decisions(payload, replace(request, decisions=resume["decisions"]))
    except InvalidInput as exc:
        raise InvalidInput(exc.message, field=f"resume.{exc.field}") from None


def _tool_resume_check(payload: Any, task_kind: str, request: DecisionRequest) -> None:
    """The middleware's ``per_call`` mode: one decision object with its ``type``."""
    resume = request.resume
    if not isinstance(resume, dict) or not isinstance(resume.get("type"), str):
        raise InvalidInput("a tool call is resumed with an object naming its 'type'", field="resume.type")
    edited = resume.get("edited_action")
    args = resume.get("args", edited.get("args") if isinstance(edited, dict) else None)
    if args is not None and not isinstance(args, dict):
        raise InvalidInput("edited arguments must be an object", field="resume.args")
    message = resume.get("message")
    decided = DecisionRequest(
        outcome=resume["type"], action_args=args, message=message if isinstance(message, str) else None
    )
    _tool_decision(str(payload.get("name", "")), decided, field="resume")


def _inbox_resume_check(payload: Any, task_kind: str, request: DecisionRequest) -> None:
    """Agent Inbox's ``[HumanResponse]``: a list of one response of a type the request's config allows."""
    resume = request.resume
    if not (isinstance(resume, list) and len(resume) == 1 and isinstance(resume[0], dict)):
        raise InvalidInput("an Agent Inbox request is resumed with a list of one response", field="resume")
    kind, args = resume[0].get("type"), resume[0].get("args")
    if kind not in _INBOX_OUTCOMES:
        raise InvalidInput(f"type: one of {', '.join(_INBOX_OUTCOMES)}", field="resume[0].type")
    _allowed_or_refuse(_INBOX_OUTCOMES[str(kind)], decisions_allowed(payload, task_kind), "resume[0].type")
    if kind == "edit" and not (isinstance(args, dict) and isinstance(args.get("args"), dict)):
        raise InvalidInput("an edit's args are {'action': ..., 'args': {...}}", field="resume[0].args")
    if kind == "response" and not (isinstance(args, str) and args.strip()):
        raise InvalidInput("a response's args are its text", field="resume[0].args")


_RESUME_SHAPES: dict[str, Callable[[Any, str, DecisionRequest], None]] = {
    "gatehouse": _gate_resume_check,
    "hitl": _hitl_resume_check,
    "tool_approval": _tool_resume_check,
    "agent_inbox": _inbox_resume_check,
}


def resume_value_build(
    *, payload: Any, task_kind: str, response_schema: Any, request: DecisionRequest, reviewer: str
) -> Any:
    """The value ``interrupt()`` returns in the graph for this decision (refuses invalid ones)."""
    if request.resume is not NOT_GIVEN:
        if response_schema:
            _schema_check(request.resume, response_schema, "resume")
        _exact_resume_check(payload, task_kind, request)
        resume = request.resume
        if payload_kind(payload, task_kind) == "gatehouse":
            # A gate records who decided: the signed-in principal, not a name the caller typed.
            resume = {**resume, "reviewer": reviewer}
        return resume
    kind = payload_kind(payload, task_kind)
    if request.decisions is not None and kind != "hitl":
        raise InvalidInput("per-request decisions are only for tool-call reviews", field="decisions")
    if kind == "hitl":
        return {"decisions": _hitl_decisions(payload, request)}
    allowed = decisions_allowed(payload, task_kind, response_schema)
    if request.outcome not in allowed:
        raise InvalidInput(
            f"decision {request.outcome!r} is not allowed here (allowed: {', '.join(allowed) or 'none'})",
            field="decision",
        )
    if kind == "breakpoint":
        return None
    if kind == "tool_approval":
        decision = _tool_decision(payload.get("name", ""), request, field="decision")
        if response_schema:
            _schema_check(decision, response_schema, "decision")
        return decision
    if kind == "agent_inbox":
        return [_inbox_response(_inbox_request(payload) or {}, request)]
    value: dict[str, Any] = {"decision": request.outcome, "reason": request.reason, "reviewer": reviewer}
    if request.outcome == "respond":
        if not (request.message or "").strip():
            raise InvalidInput("a response needs a message", field="message")
        value["message"] = request.message
    if request.action_args is not None:
        if request.outcome != "edit":
            raise InvalidInput("action_args may only be sent with an edit decision", field="action_args")
        if kind == "gatehouse":
            _gate_args_check(payload, request.action_args)
        value["action_args"] = request.action_args
    return value


def action_args_check(payload: dict[str, Any], args: dict[str, Any]) -> None:
    """Check the arguments an approval signs (proposed, then edited) as the gate's action takes them."""
    _gate_args_check(payload, args)


def _gate_args_check(payload: dict[str, Any], args: dict[str, Any]) -> None:
    action = payload.get("proposed_action") or {}
    schema = action.get("args_schema")
    if schema:
        _schema_check(args, schema, "action_args")
    elif isinstance(action.get("args"), dict):
        for key, value in args.items():
            if key not in action["args"]:
                raise InvalidInput(
                    f"unknown argument (the action takes: {', '.join(action['args'])})", field=f"action_args.{key}"
                )
            original = action["args"][key]
            if original is not None and _json_type(value) != _json_type(original):
                raise InvalidInput(
                    f"expected {_json_type(original)}, got {_json_type(value)}", field=f"action_args.{key}"
                )


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


@lru_cache(maxsize=256)
def schema_validator(schema_text: str) -> Any:
    """The compiled validator for a (canonical JSON) schema, or None if the schema cannot be applied
    (``json_schemas.schema_problem``: invalid, or a ``$ref`` that does not resolve inside it).

    ``jsonschema.validate`` checks the schema against its metaschema and builds a
    validator on every call; a gate's schema is the same for all its tasks, so
    compile it once per process.
    """
    schema = json.loads(schema_text)
    if json_schemas.schema_problem(schema) is not None:
        return None
    return json_schemas.schema_validator_build(schema)


def _schema_check(value: Any, schema: Any, field: str) -> None:
    schema_text = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str)
    validator = schema_validator(schema_text)
    try:
        if validator is None:
            raise json_schemas.SchemaUnusable(json_schemas.schema_problem(json.loads(schema_text)) or "")
        error = json_schemas.first_error(validator, value)  # what jsonschema.validate would raise
    except json_schemas.SchemaUnusable as exc:
        # A schema we cannot apply cannot check this answer, and an unchecked answer must not reach the
        # graph or engine that asked for the schema: refuse it, saying whose schema is at fault.
        raise InvalidInput(
            f"this task's answer schema cannot be applied ({exc}), so no answer can be checked against it; "
            "decide without an answer, or ask the task's author to fix its schema",
            field=field,
        ) from None
    if error is not None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        raise InvalidInput(error.message, field=f"{field}{where}") from None


def _hitl_decisions(payload: dict[str, Any], request: DecisionRequest) -> list[dict[str, Any]]:
    requests = payload["action_requests"]
    if request.decisions is None:
        items = [
            {"type": request.outcome, "args": request.action_args, "message": request.message or request.reason}
            for _ in requests
        ]
        if request.action_args is not None and len(requests) != 1:
            raise InvalidInput("send one decision per tool call to edit several", field="decisions")
    else:
        if len(request.decisions) != len(requests):
            raise InvalidInput(
                f"expected {len(requests)} decisions (one per tool call), got {len(request.decisions)}",
                field="decisions",
            )
        items = request.decisions
    decisions = []
    for index, item in enumerate(items):
        field = f"decisions[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise InvalidInput("each decision needs a 'type'", field=f"{field}.type")
        allowed = _hitl_allowed(payload, index)
        if item["type"] not in allowed:
            raise InvalidInput(
                f"{item['type']!r} is not allowed for {requests[index].get('name')} (allowed: {', '.join(allowed)})",
                field=f"{field}.type",
            )
        # Accept our short form ("args") and LangChain's own ("edited_action": {"args": ...}).
        edited = item.get("edited_action")
        args = item.get("args", edited.get("args") if isinstance(edited, dict) else None)
        if args is not None and not isinstance(args, dict):
            raise InvalidInput("edited arguments must be an object", field=f"{field}.args")
        message = item.get("message")
        if message is not None and not isinstance(message, str):
            raise InvalidInput("a message must be text", field=f"{field}.message")
        sub = DecisionRequest(outcome=item["type"], action_args=args, message=message)
        decisions.append(_tool_decision(str(requests[index].get("name")), sub, field=field))
    return decisions


def _tool_decision(name: str, request: DecisionRequest, *, field: str) -> dict[str, Any]:
    if request.outcome == "approve":
        return {"type": "approve"}
    if request.outcome == "edit":
        if not isinstance(request.action_args, dict):
            raise InvalidInput("an edit needs the edited arguments as an object", field=f"{field}.args")
        return {"type": "edit", "edited_action": {"name": name, "args": request.action_args}}
    if request.outcome == "reject":
        result: dict[str, Any] = {"type": "reject"}
        if request.message or request.reason:
            result["message"] = request.message or request.reason
        return result
    if request.outcome == "respond":
        if not (request.message or "").strip():
            raise InvalidInput("a response needs a message", field=f"{field}.message")
        return {"type": "respond", "message": request.message}
    raise InvalidInput(f"unknown decision {request.outcome!r}", field=f"{field}.type")


def _inbox_response(item: dict[str, Any], request: DecisionRequest) -> dict[str, Any]:
    if request.outcome == "approve":
        return {"type": "accept", "args": None}
    if request.outcome == "edit":
        if not isinstance(request.action_args, dict):
            raise InvalidInput("an edit needs the edited arguments as an object", field="action_args")
        return {"type": "edit", "args": {"action": item["action_request"].get("action"), "args": request.action_args}}
    if request.outcome == "respond":
        if not (request.message or "").strip():
            raise InvalidInput("a response needs a message", field="message")
        return {"type": "response", "args": request.message}
    return {"type": "ignore", "args": None}
