"""Interrupt payload conventions: kinds, allowed decisions, and the resume value each decision becomes."""

from __future__ import annotations

from typing import Any

import pytest

from approvals.errors import InvalidInput
from approvals.payloads import (
    NOT_GIVEN,
    DecisionRequest,
    decisions_allowed,
    payload_kind,
    payload_title,
    resume_value_build,
)
from runtime.gatekeeper import gate_payload

GATE = gate_payload(
    title="Disburse 20000?",
    proposed_action={"name": "disburse", "args": {"amount": 20000, "term_months": 24, "note": "x", "urgent": False}},
    editable=["amount"],
)
GATE_APPROVE_REJECT = gate_payload(title="Identity ok?", decisions=["approve", "reject"])
GATE_WITH_ARGS_SCHEMA = gate_payload(
    title="Pay?",
    proposed_action={
        "name": "pay",
        "args": {"amount": 1},
        "args_schema": {
            "type": "object",
            "properties": {"amount": {"type": "integer", "maximum": 100}},
            "additionalProperties": False,
        },
    },
)


def hitl(*configs: tuple[str, list[str]], args: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "action_requests": [
            {"name": name, "args": dict(args or {"to": "a@example.com"}), "description": f"call {name}"}
            for name, _ in configs
        ],
        "review_configs": [{"action_name": name, "allowed_decisions": allowed} for name, allowed in configs],
    }


HITL_ONE = hitl(("send_email", ["approve", "edit", "reject"]))
HITL_TWO = hitl(("send_email", ["approve", "edit", "reject"]), ("delete_file", ["approve", "reject"]))
TOOL = {"type": "tool_approval", "name": "refund", "args": {"amount": 30}}
TOOL_SCHEMA = {
    "anyOf": [
        {"type": "object", "properties": {"type": {"const": "approve"}}, "required": ["type"]},
        {
            "type": "object",
            "properties": {"type": {"const": "reject"}, "message": {"type": "string"}},
            "required": ["type"],
        },
    ]
}


def inbox(**flags: bool) -> list[dict[str, Any]]:
    config = {"allow_accept": False, "allow_edit": False, "allow_respond": False, "allow_ignore": False, **flags}
    return [
        {
            "action_request": {"action": "send_email", "args": {"to": "a@example.com", "count": 2}},
            "config": config,
            "description": "Send the welcome email",
        }
    ]


INBOX_ALL = inbox(allow_accept=True, allow_edit=True, allow_respond=True, allow_ignore=True)


def build(
    payload: Any, outcome: str = "approve", *, task_kind: str = "interrupt", response_schema: Any = None, **fields: Any
) -> Any:
    request = DecisionRequest(outcome=outcome, **fields)
    return resume_value_build(
        payload=payload, task_kind=task_kind, response_schema=response_schema, request=request, reviewer="rita"
    )


def refused(payload: Any, outcome: str = "approve", **kwargs: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        build(payload, outcome, **kwargs)
    return caught.value


# --- kinds -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload,task_kind,kind",
    [
        (GATE, "interrupt", "gatehouse"),
        (HITL_TWO, "interrupt", "hitl"),
        (TOOL, "interrupt", "tool_approval"),
        (INBOX_ALL, "interrupt", "agent_inbox"),
        (INBOX_ALL[0], "interrupt", "agent_inbox"),
        (None, "breakpoint", "breakpoint"),
        (GATE, "breakpoint", "breakpoint"),
        ({"title": "anything"}, "interrupt", "generic"),
        ("Approve?", "interrupt", "generic"),
        (None, "interrupt", "generic"),
        ({"type": "tool_approval"}, "interrupt", "generic"),  # no tool name
        ({"action_requests": [], "review_configs": "x"}, "interrupt", "generic"),
        (INBOX_ALL * 2, "interrupt", "generic"),  # Agent Inbox sends exactly one request
    ],
)
def test_it_recognises_the_payload_kind(payload, task_kind, kind):
    assert payload_kind(payload, task_kind) == kind


# --- allowed decisions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload,task_kind,response_schema,allowed",
    [
        (GATE, "interrupt", None, ["approve", "reject", "edit", "respond"]),
        (GATE_APPROVE_REJECT, "interrupt", None, ["approve", "reject"]),
        (HITL_ONE, "interrupt", None, ["approve", "reject", "edit"]),
        (HITL_TWO, "interrupt", None, ["approve", "reject"]),  # one click must be allowed for every call
        (TOOL, "interrupt", None, ["approve", "reject", "edit", "respond"]),
        (TOOL, "interrupt", TOOL_SCHEMA, ["approve", "reject"]),
        (INBOX_ALL, "interrupt", None, ["approve", "edit", "respond", "reject"]),
        (inbox(allow_accept=True), "interrupt", None, ["approve"]),
        (inbox(allow_respond=True, allow_ignore=True), "interrupt", None, ["respond", "reject"]),
        (inbox(), "interrupt", None, []),
        (None, "breakpoint", None, ["approve", "edit", "reject"]),
        ({"question": "ok?"}, "interrupt", None, ["approve", "reject", "edit", "respond"]),
    ],
)
def test_it_lists_the_decisions_a_payload_allows(payload, task_kind, response_schema, allowed):
    assert decisions_allowed(payload, task_kind, response_schema) == allowed


@pytest.mark.parametrize(
    "payload,node,title",
    [
        (GATE, "human_review", "Disburse 20000?"),
        (HITL_TWO, "tools", "Review tool calls: send_email, delete_file"),
        (TOOL, "tools", "Review tool call: refund"),
        (INBOX_ALL, "inbox", "Send the welcome email"),
        ({"question": "Ship it?"}, "gate", "Ship it?"),
        ("Ship it?", "gate", "Ship it?"),
        (7, "gate", "Review at gate"),
    ],
)
def test_it_titles_a_task_from_its_payload(payload, node, title):
    assert payload_title(payload, node) == title


# --- gatehouse and generic payloads ---------------------------------------------------------


@pytest.mark.parametrize("payload", [GATE, {"question": "ok?"}])
def test_an_approval_resumes_with_the_decision_reason_and_reviewer(payload):
    assert build(payload, "approve", reason="fine") == {"decision": "approve", "reason": "fine", "reviewer": "rita"}


@pytest.mark.parametrize(
    "outcome,fields,expected",
    [
        ("approve", {}, {"decision": "approve", "reason": "", "reviewer": "rita"}),
        ("reject", {"reason": "over budget"}, {"decision": "reject", "reason": "over budget", "reviewer": "rita"}),
        (
            "edit",
            {"reason": "cap", "state_patch": {"amount": 5}},
            {"decision": "edit", "reason": "cap", "reviewer": "rita"},
        ),
        (
            "respond",
            {"message": "see memo"},
            {"decision": "respond", "reason": "", "reviewer": "rita", "message": "see memo"},
        ),
    ],
)
def test_a_plain_interrupt_is_resumed_as_docs_graphs_md_says(outcome, fields, expected):
    """docs/graphs.md ("What interrupt() returns on resume"): a graph reading ``answer.get("approved", True)``
    went ahead on a reject; the value names the decision, and an edit's state changes are not in it."""
    assert build({"title": "Spend 900?"}, outcome, **fields) == expected


def test_a_response_carries_its_message():
    value = build(GATE, "respond", message="see memo")
    assert value == {"decision": "respond", "reason": "", "reviewer": "rita", "message": "see memo"}


@pytest.mark.parametrize("message", [None, "", "   "])
def test_it_refuses_a_response_without_a_message(message):
    assert refused(GATE, "respond", message=message).field == "message"


def test_it_refuses_a_decision_the_gate_does_not_allow():
    error = refused(GATE_APPROVE_REJECT, "edit", action_args={"x": 1})
    assert error.field == "decision"
    assert "approve, reject" in error.message


def test_edited_action_args_go_into_the_resume_value():
    value = build(GATE, "edit", reason="smaller", action_args={"amount": 15000})
    assert value["action_args"] == {"amount": 15000}
    assert value["decision"] == "edit"


@pytest.mark.parametrize(
    "args,field",
    [
        ({"amount": "15000"}, "action_args.amount"),
        ({"amount": True}, "action_args.amount"),
        ({"urgent": "no"}, "action_args.urgent"),
        ({"note": 3}, "action_args.note"),
        ({"currency": "EUR"}, "action_args.currency"),  # not an argument of the action
    ],
)
def test_it_refuses_action_args_of_the_wrong_type_naming_the_argument(args, field):
    assert refused(GATE, "edit", reason="r", action_args=args).field == field


@pytest.mark.parametrize("args,field", [({"amount": 101}, "action_args.amount"), ({"other": 1}, "action_args")])
def test_it_checks_action_args_against_the_actions_args_schema(args, field):
    assert refused(GATE_WITH_ARGS_SCHEMA, "edit", reason="r", action_args=args).field == field


def test_it_refuses_action_args_with_a_decision_other_than_edit():
    assert refused(GATE, "approve", action_args={"amount": 1}).field == "action_args"


def test_it_refuses_per_request_decisions_outside_tool_call_reviews():
    assert refused(GATE, "approve", decisions=[{"type": "approve"}]).field == "decisions"


# --- explicit resume values -------------------------------------------------------------------

REPLY_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "limit": {"type": "integer"}},
    "required": ["approved", "limit"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("resume", [{"approved": True, "limit": 5}, {"approved": False, "limit": 0}])
def test_an_explicit_resume_value_is_passed_through_when_it_matches_the_response_schema(resume):
    assert build({"title": "Set a limit"}, resume=resume, response_schema=REPLY_SCHEMA) == resume


@pytest.mark.parametrize(
    "resume,field",
    [
        ({"approved": True, "limit": "5"}, "resume.limit"),
        ({"approved": "yes", "limit": 5}, "resume.approved"),
        ({"approved": True}, "resume"),
        ("yes", "resume"),
    ],
)
def test_it_refuses_an_explicit_resume_value_that_violates_the_response_schema(resume, field):
    assert refused({"title": "Set a limit"}, resume=resume, response_schema=REPLY_SCHEMA).field == field


UNUSABLE_SCHEMAS = [
    {"$ref": "https://example.com/schema.json"},  # remote: never fetched
    {"$ref": "#/$defs/missing"},  # points nowhere
    {"type": "object", "properties": {"limit": {"$ref": "#limit"}}},  # no such anchor
    {"type": "banana"},  # not a schema
]


@pytest.fixture
def no_fetching(monkeypatch):
    """A schema's remote reference must never become a request from the server."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a schema reference was fetched: {args!r}")

    monkeypatch.setattr("urllib.request.urlopen", refuse)


@pytest.mark.usefixtures("no_fetching")
@pytest.mark.parametrize("schema", UNUSABLE_SCHEMAS)
def test_an_answer_to_a_schema_that_cannot_be_applied_is_refused_naming_the_field(schema):
    """An answer no schema checked must not reach the graph: refused (422), saying the schema is at fault."""
    error = refused({"title": "Set a limit"}, resume={"limit": 1}, response_schema=schema)
    assert error.field == "resume" and "schema cannot be applied" in error.message
    gate = gate_payload(title="Pay?", proposed_action={"name": "pay", "args": {"limit": 0}, "args_schema": schema})
    error = refused(gate, "edit", reason="r", action_args={"limit": 1})
    assert error.field == "action_args" and "schema cannot be applied" in error.message


@pytest.mark.usefixtures("no_fetching")
def test_references_inside_the_schema_resolve():
    reply = {"type": "object", "properties": {"limit": {"type": "integer"}}}
    schema = {"$ref": "#/$defs/reply", "$defs": {"reply": reply}}
    assert build({"title": "Set a limit"}, resume={"limit": 1}, response_schema=schema) == {"limit": 1}
    assert refused({"title": "Set a limit"}, resume={"limit": "x"}, response_schema=schema).field == "resume.limit"


def test_an_explicit_resume_value_without_a_schema_is_passed_through():
    assert build({"title": "Anything?"}, resume=["anything", 1]) == ["anything", 1]


def test_an_explicit_null_resume_is_a_value_not_an_absence():
    assert build({"title": "Anything?"}, resume=None) is None
    assert DecisionRequest(outcome="approve").resume is NOT_GIVEN


INBOX_PAY = [{"action_request": {"action": "pay", "args": {}}, "config": {"allow_accept": True}}]


# The decision row (outcome, meaning, reason policy, quorum) is what auditors read; the resume value is
# what the graph acts on. They must say the same: a "reject" resumed with "approve" paid the loan.
@pytest.mark.parametrize(
    "payload,outcome,resume",
    [
        (GATE, "reject", {"decision": "approve"}),
        (GATE, "approve", {"decision": "reject"}),
        (GATE, "respond", {"decision": "approve"}),
        (GATE, "edit", {"decision": "reject", "action_args": {"amount": 1}}),
        ({"type": "tool_approval", "name": "pay", "args": {}}, "reject", {"type": "approve"}),
        (INBOX_PAY, "reject", [{"type": "accept"}]),
        (HITL_TWO, "approve", {"decisions": [{"type": "approve"}, {"type": "reject"}]}),
    ],
)
def test_a_resume_value_that_says_another_decision_is_refused(payload, outcome, resume):
    assert refused(payload, outcome, reason="r", resume=resume).field == "resume"


@pytest.mark.parametrize("outcome,resume", [("approve", {"decision": "approve"}), ("edit", {"decision": "approve"})])
def test_a_resume_value_that_says_the_same_decision_is_passed_through_with_the_signer(outcome, resume):
    assert build(GATE, outcome, reason="r", resume=resume) == {"decision": "approve", "reviewer": "rita"}


@pytest.mark.parametrize(
    "payload,resume,field",
    [
        (GATE, ["anything", 1], "resume.decision"),  # the gate would fail the run reading it
        (GATE, {"approved": True}, "resume.decision"),
        (GATE_APPROVE_REJECT, {"decision": "edit"}, "resume.decision"),  # not among the gate's decisions
        (GATE, {"decision": "edit", "action_args": {"amount": "lots"}}, "action_args.amount"),
        (GATE, {"decision": "edit", "action_args": ["amount"]}, "resume.action_args"),
    ],
)
def test_a_gates_exact_resume_value_is_checked_as_the_gate_will_read_it(payload, resume, field):
    assert refused(payload, "edit" if payload is GATE else "approve", reason="r", resume=resume).field == field


TOOL_PAY = {"type": "tool_approval", "name": "pay", "args": {"amount": 5}}
INBOX_STRICT = [
    {"action_request": {"action": "pay", "args": {}}, "config": {"allow_accept": True, "allow_edit": False}}
]


# Each first-class payload's code reads its resume value in a known shape: one it cannot read closed the
# task as a signed decision and then failed the run, and every retry replayed it.
@pytest.mark.parametrize(
    "payload,outcome,resume,field",
    [
        (GATE, "approve", [1, 2], "resume.decision"),
        (GATE, "approve", "yes", "resume.decision"),
        (GATE, "approve", {"decision": "deny"}, "resume.decision"),
        (HITL_TWO, "approve", [1, 2], "resume.decisions"),
        (HITL_TWO, "approve", {"decisions": [{"type": "approve"}]}, "resume.decisions"),
        (
            HITL_TWO,
            "approve",
            {"decisions": [{"type": "approve"}, {"type": "edit", "args": {}}]},
            "resume.decisions[1].type",
        ),
        (HITL_TWO, "approve", {"decisions": [{"kind": "approve"}, {"type": "approve"}]}, "resume.decisions[0].type"),
        (TOOL_PAY, "approve", 42, "resume.type"),
        (TOOL_PAY, "approve", {"type": "ok"}, "resume.type"),
        (TOOL_PAY, "edit", {"type": "edit"}, "resume.args"),
        (TOOL_PAY, "edit", {"type": "edit", "edited_action": {"args": "amount=1"}}, "resume.args"),
        (INBOX_PAY, "approve", {"type": "accept"}, "resume"),
        (INBOX_PAY, "approve", [{"type": "approve"}], "resume[0].type"),
        (INBOX_STRICT, "edit", [{"type": "edit", "args": {"action": "pay", "args": {}}}], "resume[0].type"),
        (INBOX_PAY, "respond", [{"type": "response", "args": ""}], "resume[0].type"),
    ],
)
def test_a_resume_value_the_paused_code_cannot_read_is_refused(payload, outcome, resume, field):
    assert refused(payload, outcome, reason="r", message="m", resume=resume).field == field


@pytest.mark.parametrize(
    "payload,outcome,resume",
    [
        (
            HITL_TWO,
            "edit",
            {"decisions": [{"type": "edit", "edited_action": {"name": "send_email", "args": {}}}, {"type": "approve"}]},
        ),
        (TOOL_PAY, "edit", {"type": "edit", "edited_action": {"name": "pay", "args": {"amount": 1}}}),
        (TOOL_PAY, "reject", {"type": "reject", "message": "no"}),
        (INBOX_PAY, "approve", [{"type": "accept", "args": None}]),
    ],
)
def test_a_resume_value_in_the_shape_its_code_reads_is_passed_through(payload, outcome, resume):
    assert build(payload, outcome, reason="r", resume=resume) == resume


def test_a_decision_the_gate_does_not_allow_is_refused_with_an_exact_resume_too():
    assert refused(GATE_APPROVE_REJECT, "respond", message="m", resume={"decision": "respond"}).field == "decision"


# --- LangChain HITL middleware (batched) ------------------------------------------------------


def test_a_one_click_approval_applies_to_every_tool_call():
    assert build(HITL_TWO, "approve") == {"decisions": [{"type": "approve"}, {"type": "approve"}]}


def test_a_one_click_rejection_carries_the_reason_to_every_tool_call():
    value = build(HITL_TWO, "reject", reason="not today")
    assert value == {"decisions": [{"type": "reject", "message": "not today"}] * 2}


def test_per_request_decisions_are_applied_in_order():
    value = build(
        HITL_TWO,
        "approve",
        decisions=[
            {"type": "edit", "args": {"to": "b@example.com", "cc": ["c@example.com"], "retries": 3, "html": True}},
            {"type": "reject", "message": "keep the file"},
        ],
    )
    assert value == {
        "decisions": [
            {
                "type": "edit",
                "edited_action": {
                    "name": "send_email",
                    "args": {"to": "b@example.com", "cc": ["c@example.com"], "retries": 3, "html": True},
                },
            },
            {"type": "reject", "message": "keep the file"},
        ]
    }


def test_an_edit_keeps_the_json_types_of_the_arguments():
    [decision] = build(
        HITL_ONE,
        "edit",
        action_args={"to": "b@example.com", "count": 2, "ratio": 0.5, "dry_run": False, "tags": ["x"], "extra": None},
    )["decisions"]
    args = decision["edited_action"]["args"]
    assert args == {"to": "b@example.com", "count": 2, "ratio": 0.5, "dry_run": False, "tags": ["x"], "extra": None}
    assert type(args["count"]) is int and type(args["dry_run"]) is bool and type(args["ratio"]) is float


@pytest.mark.parametrize("count", [1, 3])
def test_it_refuses_a_number_of_decisions_that_does_not_match_the_tool_calls(count):
    error = refused(HITL_TWO, "approve", decisions=[{"type": "approve"}] * count)
    assert error.field == "decisions"
    assert "expected 2" in error.message


def test_it_refuses_a_decision_type_the_tool_call_does_not_allow_naming_its_index():
    error = refused(HITL_TWO, "approve", decisions=[{"type": "approve"}, {"type": "edit", "args": {"x": 1}}])
    assert error.field == "decisions[1].type"
    assert "delete_file" in error.message


@pytest.mark.parametrize("item", [{}, {"type": 3}, "approve"])
def test_it_refuses_a_per_request_decision_without_a_type(item):
    assert refused(HITL_ONE, "approve", decisions=[item]).field == "decisions[0].type"


def test_it_refuses_a_one_click_edit_of_several_tool_calls():
    payload = hitl(("a", ["edit"]), ("b", ["edit"]))
    assert refused(payload, "edit", action_args={"x": 1}).field == "decisions"


def test_it_refuses_an_edit_without_arguments_naming_the_request():
    assert refused(HITL_ONE, "approve", decisions=[{"type": "edit"}]).field == "decisions[0].args"


def test_it_refuses_a_per_request_response_without_a_message():
    payload = hitl(("ask", ["respond"]))
    assert refused(payload, "approve", decisions=[{"type": "respond"}]).field == "decisions[0].message"


def test_a_one_click_decision_not_allowed_for_one_tool_call_is_refused_naming_it():
    payload = hitl(("send_email", ["approve", "reject"]), ("delete_file", ["reject"]))
    assert decisions_allowed(payload) == ["reject"]
    error = refused(payload, "approve")
    assert error.field == "decisions[1].type"
    assert "delete_file" in error.message


# --- tool_approval (per-call middleware) ---------------------------------------------------------


@pytest.mark.parametrize(
    "outcome,fields,value",
    [
        ("approve", {}, {"type": "approve"}),
        ("reject", {"reason": "too much"}, {"type": "reject", "message": "too much"}),
        ("reject", {}, {"type": "reject"}),
        (
            "edit",
            {"action_args": {"amount": 10}},
            {"type": "edit", "edited_action": {"name": "refund", "args": {"amount": 10}}},
        ),
        ("respond", {"message": "call the customer"}, {"type": "respond", "message": "call the customer"}),
    ],
)
def test_a_tool_approval_resumes_with_the_middlewares_decision_shape(outcome, fields, value):
    assert build(TOOL, outcome, **fields) == value


def test_a_tool_approval_refuses_a_decision_its_response_schema_does_not_allow():
    assert refused(TOOL, "edit", response_schema=TOOL_SCHEMA, action_args={"amount": 1}).field == "decision"


def test_a_tool_approval_checks_its_value_against_the_response_schema():
    schema = {"type": "object", "properties": {"type": {"enum": ["approve", "reject"]}, "message": {"maxLength": 5}}}
    assert build(TOOL, "reject", response_schema=schema, reason="no") == {"type": "reject", "message": "no"}
    assert refused(TOOL, "reject", response_schema=schema, reason="far too long").field == "decision.message"


def test_a_tool_approval_edit_needs_arguments():
    assert refused(TOOL, "edit").field == "decision.args"


# --- Agent Inbox ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcome,fields,response",
    [
        ("approve", {}, {"type": "accept", "args": None}),
        (
            "edit",
            {"action_args": {"to": "b@example.com", "count": 3}},
            {"type": "edit", "args": {"action": "send_email", "args": {"to": "b@example.com", "count": 3}}},
        ),
        ("respond", {"message": "not yet"}, {"type": "response", "args": "not yet"}),
        ("reject", {"reason": "spam"}, {"type": "ignore", "args": None}),
    ],
)
def test_an_agent_inbox_decision_maps_to_a_human_response(outcome, fields, response):
    assert build(INBOX_ALL, outcome, **fields) == [response]


@pytest.mark.parametrize(
    "flag,outcome",
    [("allow_accept", "approve"), ("allow_edit", "edit"), ("allow_respond", "respond"), ("allow_ignore", "reject")],
)
def test_an_agent_inbox_refuses_a_decision_its_config_does_not_allow(flag, outcome):
    payload = inbox(**{f: True for f in ("allow_accept", "allow_edit", "allow_respond", "allow_ignore") if f != flag})
    assert refused(payload, outcome, action_args={"to": "x"}, message="m").field == "decision"


def test_an_agent_inbox_response_needs_a_message():
    assert refused(INBOX_ALL, "respond", message=" ").field == "message"


def test_an_agent_inbox_edit_needs_arguments():
    assert refused(INBOX_ALL, "edit").field == "action_args"


# --- static breakpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["approve", "reject"])
def test_a_breakpoint_resumes_with_no_value(outcome):
    assert build(None, outcome, task_kind="breakpoint", reason="r") is None


def test_a_breakpoint_refuses_a_response():
    assert refused(None, "respond", task_kind="breakpoint", message="hi").field == "decision"
