"""A resume value that names its decision in a word Gatehouse does not know is refused, never recorded as an
approval (``lgplatform.services._outcome_of``): the graph would act on the word, the audit on "approve", and
a "reason required to reject" policy would be sidestepped. The words are the native API's, case and all."""

from __future__ import annotations

from typing import Any

import pytest

from approvals.models import ApprovalTask, Decision, TaskStatus
from tests.lgplatform.conftest import lg_run_wait
from tests.security.test_bad_input_edges import error_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


@pytest.fixture
def gated(operator) -> str:
    """A ``travel_pay`` thread paused at its generic gate (a payload with no decisions of its own)."""
    thread, paused = lg_run_wait(operator, "travel_pay", {"amount": 5})
    assert len(paused["__interrupt__"]) == 1
    return thread


def _resume(persona: Any, thread: str, resume: Any, graph: str = "travel_pay") -> Any:
    body = {"assistant_id": graph, "command": {"resume": resume}}
    return persona.client.post(f"/lg/threads/{thread}/runs/wait", body)


def _untouched(thread: str) -> bool:
    tasks = ApprovalTask.objects.filter(thread_id=thread)
    return tasks.filter(status=TaskStatus.PENDING).exists() and not Decision.objects.filter(task__in=tasks).exists()


@pytest.mark.parametrize(
    "resume,field",
    [
        ({"decision": "Reject"}, "command.resume.decision"),
        ({"decision": "maybe", "reason": "not sure"}, "command.resume.decision"),
        ({"decision": None}, "command.resume.decision"),
        ({"type": "yes"}, "command.resume.type"),
        ({"decisions": [{"type": "Reject"}]}, "command.resume.decisions[0].type"),
    ],
)
def test_a_decision_word_gatehouse_does_not_know_is_a_422_naming_it(reviewer, gated, resume, field):
    error = error_of(_resume(reviewer, gated, resume), 422)
    assert error["field"] == field
    assert "approve, reject, edit, respond" in error["message"]
    assert _untouched(gated)


def test_an_unknown_word_under_an_interrupt_id_is_named_under_it(reviewer, fanned_out):
    thread, paused = fanned_out
    first, second = (i["id"] for i in paused["__interrupt__"])
    resume = {first: {"decision": "approve"}, second: {"decision": "ok"}}
    error = error_of(_resume(reviewer, thread, resume, "fan_out_review"), 422)
    assert error["field"] == f"command.resume.{second}.decision"
    assert _untouched(thread)


def test_a_known_word_is_recorded_as_that_decision(reviewer, gated):
    assert _resume(reviewer, gated, {"decision": "reject", "reason": "no"}).status_code == 200
    assert list(Decision.objects.filter(task__thread_id=gated).values_list("outcome", flat=True)) == ["reject"]


def test_a_value_that_names_no_decision_still_answers_as_an_approval(reviewer, gated):
    assert _resume(reviewer, gated, {"note": "looks fine"}).status_code == 200
    assert list(Decision.objects.filter(task__thread_id=gated).values_list("outcome", flat=True)) == ["approve"]


def test_a_resume_sent_again_is_told_its_own_decision_went_through(gated, reviewer, operator):
    """The native decision's 409 names the caller's own decision; /lg/ answered a repeated resume with
    "there is nothing to resume" alone, which did not say whether the first had gone through."""
    assert _resume(reviewer, gated, {"decision": "approve"}).status_code == 200
    [decision] = Decision.objects.filter(task__thread_id=gated)
    again = error_of(_resume(reviewer, gated, {"decision": "approve"}), 409)
    assert f"your decision {decision.pk}, approve, resumed it: run {decision.run_id}" in again["message"]
    assert "your decision" not in error_of(_resume(operator, gated, {"decision": "approve"}), 409)["message"]


# --- Agent Inbox's list form: [{"type": ...}] -------------------------------------------------------


@pytest.mark.parametrize("route", ["runs/wait", "runs", "runs/stream"])
@pytest.mark.parametrize(
    "resume,field",
    [
        ([{"type": "bogus"}], "command.resume[0].type"),
        ([{"type": "Accept"}], "command.resume[0].type"),
        ([{"type": None, "args": None}], "command.resume[0].type"),
        ([{"decision": "maybe"}], "command.resume[0].decision"),
        ([{"decisions": [{"type": "bogus"}]}], "command.resume[0].decisions[0].type"),
        ([{"type": "accept"}, {"type": "ignore"}], "command.resume[1]"),
    ],
)
def test_a_list_naming_a_decision_gatehouse_does_not_know_is_a_422_naming_it(reviewer, gated, route, resume, field):
    """``[{"type": "bogus"}]`` was read as an approval and signed: only dict values were checked."""
    body = {"assistant_id": "travel_pay", "command": {"resume": resume}}
    response = reviewer.client.post(f"/lg/threads/{gated}/{route}", body)
    error = error_of(response, 422)
    assert error["field"] == field
    assert _untouched(gated)


def test_a_list_under_an_interrupt_id_is_named_under_it(reviewer, fanned_out):
    thread, paused = fanned_out
    first, second = (i["id"] for i in paused["__interrupt__"])
    resume = {first: [{"type": "accept"}], second: [{"type": "bogus"}]}
    error = error_of(_resume(reviewer, thread, resume, "fan_out_review"), 422)
    assert error["field"] == f"command.resume.{second}[0].type"
    assert "accept, edit, response, ignore" in error["message"]
    assert _untouched(thread)


@pytest.mark.parametrize(
    "resume,outcome",
    [
        ([{"type": "accept", "args": None}], "approve"),
        ([{"type": "ignore", "args": None}], "reject"),
        ([{"decision": "reject"}], "reject"),  # stated in its item: recorded as stated, not as an approval
        (["a note"], "approve"),  # names no decision: a generic answer
    ],
)
def test_a_list_naming_a_known_decision_is_recorded_as_that_decision(reviewer, gated, resume, outcome):
    body = {"assistant_id": "travel_pay", "command": {"resume": resume}, "metadata": {"reason": "checked"}}
    response = reviewer.client.post(f"/lg/threads/{gated}/runs/wait", body)
    assert response.status_code == 200, response.content
    assert list(Decision.objects.filter(task__thread_id=gated).values_list("outcome", flat=True)) == [outcome]
