"""Whether a decision needs a reason is the graph's policy (langgraph.json "gatehouse": {"reasons": ...}).

A graph without a policy accepts what LangGraph Server accepts: an unmodified
client (langgraph-sdk) edits a HumanInTheLoopMiddleware tool call with no
reason. The demo graphs declare a strict policy; a gate may override its
graph's rule.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

from approvals.models import Decision
from tests.conftest import api_decide, loan_input, pending_tasks, scaled, thread_settled, thread_start
from tests.integration.test_platform_sdk import server  # noqa: F401 - the daphne fixture, shared

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

TRANSFER = {"name": "transfer", "args": {"to": "bob", "amount": 5}}


def _client(url: str, token: str) -> Any:
    return get_sync_client(url=url, api_key=token, timeout=httpx.Timeout(scaled(30.0)))


def test_an_unmodified_sdk_client_edits_a_tool_call_without_a_reason(server, personas):  # noqa: F811
    op, rv = _client(server, personas["operator"].token), _client(server, personas["reviewer"].token)
    thread = op.threads.create(metadata={"case": "reason-free-edit"})
    paused = op.runs.wait(
        thread["thread_id"], "hitl_agent", input={"messages": [{"role": "user", "content": json.dumps([TRANSFER])}]}
    )
    [interrupt] = paused["__interrupt__"]
    assert interrupt["value"]["action_requests"][0]["name"] == "transfer"
    # Exactly what HumanInTheLoopMiddleware's docs send: a decision list, no reason anywhere.
    edited = {"type": "edit", "edited_action": {"name": "transfer", "args": {"to": "carol", "amount": 3}}}
    final = rv.runs.wait(thread["thread_id"], "hitl_agent", command={"resume": {"decisions": [edited]}})
    tools = [m for m in final["messages"] if m["type"] == "tool"]
    assert tools and tools[-1]["content"].endswith("sent 3 (int) to carol")
    decision = Decision.objects.get(task__thread_id=thread["thread_id"])
    assert (decision.outcome, decision.reason) == ("edit", "")


def test_a_demo_graph_keeps_requiring_a_reason_to_reject_through_the_sdk(server, personas):  # noqa: F811
    op, rv = _client(server, personas["operator"].token), _client(server, personas["reviewer"].token)
    thread = op.threads.create(metadata={"case": "strict-reject"})
    op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input(amount=20000, income=40000))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        rv.runs.wait(thread["thread_id"], "loan_approval", command={"resume": {"decision": "reject"}})
    assert refused.value.response.status_code == 422
    error = refused.value.response.json()
    assert "a reason is required to reject" in json.dumps(error) and "reason" in json.dumps(error)
    assert not Decision.objects.filter(task__thread_id=thread["thread_id"]).exists()
    final = rv.runs.wait(
        thread["thread_id"], "loan_approval", command={"resume": {"decision": "reject", "reason": "income too low"}}
    )
    assert final["status"] == "declined"


def test_an_approval_that_updates_the_state_through_the_sdk_is_an_edit_and_needs_its_reason(server, personas):  # noqa: F811
    """``command={"resume": {"decision": "approve"}, "update": {...}}`` paid the edited amount with no reason,
    recorded as a plain approval: the loan graph requires a reason to edit."""
    op, rv = _client(server, personas["operator"].token), _client(server, personas["reviewer"].token)
    thread = op.threads.create(metadata={"case": "approve-with-update"})
    op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input(amount=20000, income=40000))
    command = {"resume": {"decision": "approve"}, "update": {"amount": 2}}
    with pytest.raises(httpx.HTTPStatusError) as refused:
        rv.runs.wait(thread["thread_id"], "loan_approval", command=command)
    assert refused.value.response.status_code == 422
    error = refused.value.response.json()
    assert "a reason is required to edit" in json.dumps(error) and "reason" in json.dumps(error)
    assert not Decision.objects.filter(task__thread_id=thread["thread_id"]).exists()
    command["resume"] = {"decision": "approve", "reason": "a token amount first"}
    rv.runs.wait(thread["thread_id"], "loan_approval", command=command)
    decision = Decision.objects.get(task__thread_id=thread["thread_id"])
    assert (decision.outcome, decision.meaning, decision.state_patch) == ("edit", "approved", {"amount": 2})


@pytest.mark.parametrize("resume", [{"decision": "deny", "reason": "do NOT pay"}, [1, 2], "yes"])
def test_a_resume_the_gate_cannot_read_is_refused_before_anything_is_written(server, personas, resume):  # noqa: F811
    """``{"decision": "deny"}`` was recorded as a signed approval while the graph declined; ``[1, 2]`` closed
    the task as approved, failed the run and left the thread failed for every retry."""
    op, rv = _client(server, personas["operator"].token), _client(server, personas["reviewer"].token)
    thread = op.threads.create(metadata={"case": "unreadable-resume"})
    op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input(amount=20000, income=40000))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        rv.runs.wait(thread["thread_id"], "loan_approval", command={"resume": resume})
    assert refused.value.response.status_code == 422
    assert refused.value.response.json()["error"]["field"] == "command.resume.decision"
    assert not Decision.objects.filter(task__thread_id=thread["thread_id"]).exists()
    assert op.threads.get(thread["thread_id"])["status"] == "interrupted"


def test_a_gate_can_require_a_reason_its_graph_does_not(operator, reviewer):
    thread = thread_start(operator, "gate_policy_review", {"subject": "per-gate"})
    tasks = {t["node"]: t for t in pending_tasks(reviewer, thread["id"], count=2)}
    # "risk" follows the graph (no rule): approving without a reason is fine.
    assert api_decide(reviewer, tasks["risk"]).status_code == 201
    # "legal" overrides it: approve needs a reason there.
    refused = api_decide(reviewer, tasks["legal"])
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert (error["field"], error["message"]) == ("reason", "a reason is required to approve")
    assert not Decision.objects.filter(task_id=tasks["legal"]["id"]).exists()
    body = {"decision": "approve", "reason": "memo attached"}
    assert api_decide(reviewer, tasks["legal"], None, **body).status_code == 201
    assert thread_settled(reviewer, thread["id"])["status"] == "completed"


def test_a_reason_longer_than_the_native_apis_is_refused_not_cut(server, personas):  # noqa: F811
    """/lg/ cut a 5,000-character reason to 4,000 and signed that; the native API refuses it."""
    op, rv = _client(server, personas["operator"].token), _client(server, personas["reviewer"].token)
    thread = op.threads.create(metadata={"case": "long-reason"})
    op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input(amount=20000, income=40000))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        rv.runs.wait(
            thread["thread_id"], "loan_approval", command={"resume": {"decision": "reject", "reason": "x" * 5000}}
        )
    assert refused.value.response.status_code == 422
    assert refused.value.response.json()["error"]["field"] == "command.resume.reason"
    assert not Decision.objects.filter(task__thread_id=thread["thread_id"]).exists()
