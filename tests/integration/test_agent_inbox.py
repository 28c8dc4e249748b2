"""The Agent Inbox HumanInterrupt shape: reviewed with the decisions its config allows, resumed with a HumanResponse."""

from __future__ import annotations

from typing import Any

import pytest

from approvals.models import Decision
from tests.conftest import api_decide, pending_tasks, thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _start(operator: Any, reviewer: Any) -> tuple[str, dict[str, Any]]:
    thread = thread_start(operator, "agent_inbox", {"to": "ops@example.com", "subject": "Q3 report"})
    [task] = pending_tasks(reviewer, thread["id"])
    return thread["id"], task


def test_the_interrupt_is_shown_as_an_inbox_request(operator, reviewer):
    _, task = _start(operator, reviewer)
    detail = reviewer.client.get(f"/api/tasks/{task['id']}").json()
    assert detail["payload_kind"] == "agent_inbox"
    assert detail["title"] == "Send 'Q3 report' to ops@example.com?"
    assert detail["allowed_decisions"] == ["approve", "edit", "respond", "reject"]


@pytest.mark.parametrize(
    "body,resume,outcome,sent",
    [
        ({"decision": "approve"}, {"type": "accept", "args": None}, "accepted", {"to": "ops@example.com"}),
        (
            {"decision": "edit", "reason": "fix", "action_args": {"to": "cfo@example.com", "subject": "Q3", "n": 2}},
            {
                "type": "edit",
                "args": {"action": "send_email", "args": {"to": "cfo@example.com", "subject": "Q3", "n": 2}},
            },
            "edited",
            {"to": "cfo@example.com", "n": 2},
        ),
        (
            {"decision": "respond", "message": "hold it"},
            {"type": "response", "args": "hold it"},
            "answered: hold it",
            None,
        ),
        ({"decision": "reject", "reason": "spam"}, {"type": "ignore", "args": None}, "ignored", None),
    ],
)
def test_each_decision_becomes_a_human_response(operator, reviewer, body, resume, outcome, sent):
    thread_id, task = _start(operator, reviewer)
    response = api_decide(reviewer, task, None, **body)
    assert response.status_code == 201, response.content
    assert response.json()["resume_value"] == [resume]
    done = thread_settled(reviewer, thread_id)
    assert done["values"]["outcome"] == outcome
    for key, value in (sent or {}).items():
        assert done["values"]["sent"][key] == value  # JSON types kept (n stays an int)


def test_a_response_without_a_message_is_refused(operator, reviewer):
    _, task = _start(operator, reviewer)
    response = api_decide(reviewer, task, "respond")
    assert response.status_code == 422
    assert not Decision.objects.filter(task_id=task["id"]).exists()
