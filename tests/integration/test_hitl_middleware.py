"""A ``create_agent`` agent with LangChain's HumanInTheLoopMiddleware runs in Gatehouse unchanged.

The agents live in tests/graphs/agents.py and are registered through langgraph.json;
a fake chat model from langchain_core requests the tool calls named in the user message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from approvals.models import ApprovalTask, Decision
from runtime.models import Run, RunKind
from tests.conftest import api_decide, pending_tasks, thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _start(operator: Any, reviewer: Any, graph: str, *calls: dict[str, Any], count: int = 1) -> tuple[str, list[Any]]:
    thread = thread_start(operator, graph, {"messages": [{"role": "user", "content": json.dumps(list(calls))}]})
    return thread["id"], pending_tasks(reviewer, thread["id"], count=count)


def _messages(persona: Any, thread_id: str) -> list[dict[str, Any]]:
    done = thread_settled(persona, thread_id)
    assert done["status"] == "completed", done
    return done["values"]["messages"]


def _tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] == "tool"]


TRANSFER = {"name": "transfer", "args": {"to": "bob", "amount": 5}}
LOOKUP = {"name": "lookup", "args": {"query": "card limit"}}


def test_the_request_is_shown_with_exactly_its_allowed_decisions(operator, reviewer):
    _, [task] = _start(operator, reviewer, "hitl_agent", TRANSFER)
    detail = reviewer.client.get(f"/api/tasks/{task['id']}").json()
    assert detail["payload_kind"] == "hitl"
    assert detail["allowed_decisions"] == ["approve", "reject", "edit"]
    [request] = detail["payload"]["action_requests"]
    assert request["name"] == "transfer" and request["args"] == {"to": "bob", "amount": 5}
    assert detail["payload"]["review_configs"] == [
        {"action_name": "transfer", "allowed_decisions": ["approve", "edit", "reject"]}
    ]


def test_approve_runs_the_tool(operator, reviewer):
    thread_id, [task] = _start(operator, reviewer, "hitl_agent", TRANSFER)
    assert api_decide(reviewer, task).status_code == 201
    messages = _messages(reviewer, thread_id)
    [tool] = _tool_messages(messages)
    assert tool["content"] == "sent 5 (int) to bob"
    assert messages[-1]["type"] == "ai" and messages[-1]["content"] == "done: sent 5 (int) to bob"


def test_edited_arguments_keep_their_json_types(operator, reviewer):
    thread_id, [task] = _start(operator, reviewer, "hitl_agent", TRANSFER)
    response = api_decide(
        reviewer, task, "edit", reason="cap it", decisions=[{"type": "edit", "args": {"to": "bob", "amount": 7}}]
    )
    assert response.status_code == 201, response.content
    [decision] = response.json()["resume_value"]["decisions"]
    assert decision == {"type": "edit", "edited_action": {"name": "transfer", "args": {"to": "bob", "amount": 7}}}
    messages = _messages(reviewer, thread_id)
    [tool] = _tool_messages(messages)
    assert tool["content"].endswith("sent 7 (int) to bob")  # after the middleware's edit notice
    assert '"amount": 7' in tool["content"]  # the notice shows the executed call, the int unquoted


def test_langchains_own_edited_action_form_is_accepted(operator, reviewer):
    thread_id, [task] = _start(operator, reviewer, "hitl_agent", TRANSFER)
    edited = {"type": "edit", "edited_action": {"name": "transfer", "args": {"to": "carol", "amount": 3}}}
    assert api_decide(reviewer, task, "edit", reason="r", decisions=[edited]).status_code == 201
    [tool] = _tool_messages(_messages(reviewer, thread_id))
    assert tool["content"].endswith("sent 3 (int) to carol")


def test_reject_tells_the_model_why_and_the_tool_does_not_run(operator, reviewer):
    thread_id, [task] = _start(operator, reviewer, "hitl_agent", TRANSFER)
    assert api_decide(reviewer, task, "reject", reason="too much").status_code == 201
    messages = _messages(reviewer, thread_id)
    [tool] = _tool_messages(messages)
    assert tool["status"] == "error"
    assert tool["content"] == "User rejected the tool call for `transfer` with reason: too much"
    assert "sent" not in messages[-1]["content"]


def test_respond_answers_in_place_of_the_tool(operator, reviewer):
    thread_id, [task] = _start(operator, reviewer, "hitl_agent", LOOKUP)
    detail = reviewer.client.get(f"/api/tasks/{task['id']}").json()
    assert detail["allowed_decisions"] == ["approve", "respond"]
    assert api_decide(reviewer, task, "respond", message="limit is 2000").status_code == 201
    [tool] = _tool_messages(_messages(reviewer, thread_id))
    assert (tool["content"], tool["status"]) == ("limit is 2000", "success")


def test_several_tool_calls_take_one_decision_each_in_order(operator, reviewer):
    thread_id, [task] = _start(operator, reviewer, "hitl_agent", TRANSFER, LOOKUP)
    detail = reviewer.client.get(f"/api/tasks/{task['id']}").json()
    assert detail["allowed_decisions"] == ["approve"]  # the only decision both requests allow
    decisions = [{"type": "edit", "args": {"to": "dan", "amount": 11}}, {"type": "respond", "message": "no limit"}]
    assert api_decide(reviewer, task, "edit", reason="r", decisions=decisions).status_code == 201
    tools = _tool_messages(_messages(reviewer, thread_id))
    assert sorted(t["content"].rsplit("\n", 1)[-1] for t in tools) == ["no limit", "sent 11 (int) to dan"]


def _nothing_written(thread_id: str, task_id: str) -> None:
    assert not Decision.objects.filter(task_id=task_id).exists()
    assert ApprovalTask.objects.get(pk=task_id).status == "pending"
    assert not Run.objects.filter(thread_id=thread_id, kind=RunKind.RESUME).exists()


@pytest.mark.parametrize(
    "body,field",
    [
        ({"decision": "respond", "message": "hi"}, "decisions[0].type"),  # transfer does not allow respond
        ({"decision": "approve", "decisions": [{"type": "approve"}, {"type": "approve"}]}, "decisions"),
        ({"decision": "approve", "decisions": []}, "decisions"),
        ({"decision": "edit", "reason": "r", "decisions": [{"type": "edit", "args": "amount=7"}]}, "decisions[0].args"),
        ({"decision": "approve", "decisions": [{"kind": "approve"}]}, "decisions[0].type"),
    ],
)
def test_an_invalid_decision_is_refused_before_anything_is_written(operator, reviewer, body, field):
    thread_id, [task] = _start(operator, reviewer, "hitl_agent", TRANSFER)
    response = api_decide(reviewer, task, None, **body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field
    _nothing_written(thread_id, task["id"])


# --- per_call mode: one interrupt per gated tool call, answered with one decision and a response_schema ---


def test_per_call_mode_shows_the_schema_and_its_decisions(operator, reviewer):
    _, [task] = _start(operator, reviewer, "hitl_agent_per_call", TRANSFER)
    detail = reviewer.client.get(f"/api/tasks/{task['id']}").json()
    assert detail["payload_kind"] == "tool_approval"
    assert detail["payload"]["name"] == "transfer" and detail["payload"]["args"] == {"to": "bob", "amount": 5}
    assert detail["response_schema"] is not None
    assert sorted(detail["allowed_decisions"]) == ["approve", "edit", "reject"]


def test_per_call_edit_keeps_types_and_reaches_the_tool(operator, reviewer):
    thread_id, [task] = _start(operator, reviewer, "hitl_agent_per_call", TRANSFER)
    response = api_decide(reviewer, task, "edit", reason="r", action_args={"to": "eve", "amount": 9})
    assert response.status_code == 201, response.content
    assert response.json()["resume_value"] == {
        "type": "edit",
        "edited_action": {"name": "transfer", "args": {"to": "eve", "amount": 9}},
    }
    [tool] = _tool_messages(_messages(reviewer, thread_id))
    assert tool["content"].endswith("sent 9 (int) to eve")


def test_per_call_approve_and_reject(operator, reviewer):
    approved, [a] = _start(operator, reviewer, "hitl_agent_per_call", TRANSFER)
    rejected, [r] = _start(operator, reviewer, "hitl_agent_per_call", TRANSFER)
    assert api_decide(reviewer, a).status_code == 201
    assert api_decide(reviewer, r, "reject", reason="no").status_code == 201
    assert _tool_messages(_messages(reviewer, approved))[0]["content"] == "sent 5 (int) to bob"
    assert _tool_messages(_messages(reviewer, rejected))[0]["status"] == "error"


def test_per_call_mode_asks_once_per_gated_call(operator, reviewer):
    thread_id, tasks = _start(operator, reviewer, "hitl_agent_per_call", TRANSFER, LOOKUP, count=2)
    by_name = {reviewer.client.get(f"/api/tasks/{t['id']}").json()["payload"]["name"]: t for t in tasks}
    assert api_decide(reviewer, by_name["transfer"]).status_code == 201
    assert api_decide(reviewer, by_name["lookup"], "respond", message="42").status_code == 201
    tools = _tool_messages(_messages(reviewer, thread_id))
    assert sorted(t["content"] for t in tools) == ["42", "sent 5 (int) to bob"]


@pytest.mark.parametrize(
    "body,field_prefix",
    [
        ({"decision": "edit", "reason": "r", "action_args": {"to": "eve", "amount": "nine"}}, "decision"),
        ({"decision": "respond", "message": "hi"}, "decision"),  # transfer's schema has no respond branch
    ],
)
def test_per_call_answers_outside_the_schema_are_refused(operator, reviewer, body, field_prefix):
    thread_id, [task] = _start(operator, reviewer, "hitl_agent_per_call", TRANSFER)
    response = api_decide(reviewer, task, None, **body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"].startswith(field_prefix)
    _nothing_written(thread_id, task["id"])
