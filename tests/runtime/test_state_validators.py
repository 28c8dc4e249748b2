"""A Pydantic state's ``@field_validator`` / ``@model_validator`` run before a write, on every surface that writes.

Only types and ``Field`` bounds were checked: an edit a validator refuses was signed, and the resume failed
inside LangGraph when the gate read the state. Now a write the state's validators refuse is a 422 naming the
field, with nothing signed, queued or written (tests/graphs/validated.py: ``subject`` may not be
``"forbidden"``; ``approved`` may not exceed ``requested``).

In-process: runs are executed here by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

from typing import Any

import pytest

from approvals.models import ApprovalTask, TaskStatus
from runtime.executor import run_execute
from runtime.models import Thread, ThreadStatus
from tests.api.test_bad_input import error_of, snapshot
from tests.conftest import api_decide, thread_start

pytestmark = pytest.mark.usefixtures("live_db")

GRAPH = "validated_spend"
SUBJECT_REFUSED = "Subject: this subject is not allowed"
SPAN_REFUSED = "the approved amount exceeds the requested one"


@pytest.fixture
def paused(dispatched, operator) -> ApprovalTask:
    thread = thread_start(operator, GRAPH, {"subject": "laptops", "requested": 900, "approved": 800})
    run_execute(run_id=dispatched[-1])
    return ApprovalTask.objects.get(thread_id=thread["id"], status=TaskStatus.PENDING)


def _lg_command(persona, task: ApprovalTask, update: dict[str, Any]) -> Any:
    command = {"resume": {"decision": "edit", "reason": "r"}, "update": update}
    return persona.client.post(f"/lg/threads/{task.thread_id}/runs", {"assistant_id": GRAPH, "command": command})


def test_an_edit_a_field_validator_refuses_is_a_422_and_nothing_is_signed(paused, reviewer):
    before = snapshot(paused.pk)
    error = error_of(api_decide(reviewer, paused, "edit", reason="r", edits={"subject": "forbidden"}), 422)
    assert error["field"] == "edits.subject" and error["message"] == SUBJECT_REFUSED
    lg = _lg_command(reviewer, paused, {"subject": "forbidden"})
    assert lg.status_code == 422, lg.content
    assert lg.json()["error"]["field"] == "command.update.subject"
    assert snapshot(paused.pk) == before


def test_an_edit_of_both_fields_a_model_validator_spans_is_refused_naming_the_edits(paused, reviewer):
    before = snapshot(paused.pk)
    edits = {"approved": 5000, "requested": 1000}
    error = error_of(api_decide(reviewer, paused, "edit", reason="r", edits=edits), 422)
    assert error["field"] == "edits" and error["message"] == f"State: {SPAN_REFUSED}"
    assert snapshot(paused.pk) == before


def test_an_edit_the_validators_accept_resumes_to_completion(paused, reviewer, dispatched):
    response = api_decide(reviewer, paused, "edit", reason="r", edits={"subject": "desks", "approved": 500})
    assert response.status_code == 201, response.content
    run_execute(run_id=dispatched[-1])
    thread = Thread.objects.get(pk=paused.thread_id)
    assert thread.status == ThreadStatus.COMPLETED and thread.values["outcome"] == "edit:500"


@pytest.mark.parametrize(
    "graph_input,field,message",
    [
        ({"subject": "forbidden", "requested": 10}, "input.subject", SUBJECT_REFUSED),
        ({"subject": "desks", "requested": 10, "approved": 50}, "input", f"State: {SPAN_REFUSED}"),
    ],
)
def test_a_start_its_validators_refuse_is_a_422_on_both_apis(operator, graph_input, field, message):
    before = Thread.objects.count()
    error = error_of(operator.client.post("/api/threads", {"graph": GRAPH, "input": graph_input}), 422)
    assert (error["field"], error["message"]) == (field, message)
    lg_thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    lg = operator.client.post(f"/lg/threads/{lg_thread}/runs", {"assistant_id": GRAPH, "input": graph_input})
    assert lg.status_code == 422, lg.content
    assert lg.json()["error"]["field"] == field
    assert Thread.objects.count() == before + 1  # only the /lg/ thread created empty beforehand
    assert not Thread.objects.get(pk=lg_thread).runs.exists()


def test_update_state_its_validators_refuse_is_a_422_and_writes_nothing(paused, reviewer, operator, dispatched):
    assert api_decide(reviewer, paused, "approve").status_code == 201  # update_state waits for no pending decision
    run_execute(run_id=dispatched[-1])
    thread = Thread.objects.get(pk=paused.thread_id)
    assert thread.status == ThreadStatus.COMPLETED
    for values, field in (({"subject": "forbidden"}, "values.subject"), ({"approved": 50, "requested": 10}, "values")):
        response = operator.client.post(f"/lg/threads/{thread.pk}/state", {"values": values})
        assert response.status_code == 422, response.content
        assert response.json()["error"]["field"] == field
    assert Thread.objects.get(pk=thread.pk).checkpoint_id == thread.checkpoint_id
    accepted = operator.client.post(f"/lg/threads/{thread.pk}/state", {"values": {"subject": "chairs"}})
    assert accepted.status_code == 200, accepted.content


def test_a_fork_writing_one_field_is_judged_with_the_checkpoints_other_values(paused, operator):
    """A fork writes over a past checkpoint's values: ``approved: 5000`` alone is refused by the model's
    validator read with that checkpoint's ``requested: 900``. Without them the validator could not judge the
    write and let it through: the fork, and any run of it, then failed inside LangGraph."""
    thread = Thread.objects.get(pk=paused.thread_id)
    body = {"checkpoint_id": thread.checkpoint_id, "values": {"approved": 5000}, "reason": "try more"}
    error = error_of(operator.client.post(f"/api/threads/{thread.pk}/fork", body), 422)
    assert error["field"] == "values.approved" and SPAN_REFUSED in error["message"], error
    ok = {**body, "values": {"approved": 850}}
    assert operator.client.post(f"/api/threads/{thread.pk}/fork", ok).status_code == 201
