"""An external task (another engine's) on the console's task page: its answer is the edited response, sent
as the API's edit sends it, and every refusal is shown next to the input it concerns or atop the form."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from approvals.models import ApprovalTask, Decision
from console.decision_panel import DecisionPanel
from tests.conftest import Persona
from tests.console.conftest import console_client, console_decide
from tests.external.conftest import create, engine_persona, task_body

pytestmark = pytest.mark.usefixtures("live_db")

SCHEMA = {
    "type": "object",
    "properties": {"limit": {"type": "integer", "minimum": 0}, "note": {"type": "string"}},
    "required": ["limit"],
    "additionalProperties": False,
}


@pytest.fixture
def engine() -> Persona:
    return engine_persona(f"pay-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def external_task(engine: Persona) -> dict[str, Any]:
    source = engine.username.removeprefix("engine-")
    body = task_body(source, response_schema=SCHEMA, decisions=["approve", "reject", "edit"])
    created = create(engine.client, body)
    assert created.status_code == 201, created.content
    task = ApprovalTask.objects.get(pk=created.json()["id"])
    return {"id": str(task.pk), "checkpoint_id": task.checkpoint_id}


def _result(engine: Persona, task: dict[str, Any]) -> Any:
    answer = engine.client.get(f"/api/external-tasks/{task['id']}/decision")
    assert answer.status_code == 200, answer.content
    return answer.json()


@pytest.mark.parametrize(
    "answer", ['{"limit": 5}', '{"decision": "edit", "action_args": {"limit": 5}}'], ids=["plain", "wrapped"]
)
def test_edit_and_approve_records_the_answer_as_the_response(personas, engine, external_task, answer):
    response = console_decide(
        console_client(personas["reviewer"]), external_task, decision="edit", reason="lower it", resume=answer
    )
    assert response.status_code == 201, response.content.decode()[:2000]
    result = _result(engine, external_task)
    assert result["decision"] == "edit" and result["response"] == {"limit": 5}
    decision = Decision.objects.get(task_id=external_task["id"])
    assert decision.outcome == "edit" and decision.resume_value["action_args"] == {"limit": 5}


def test_an_answer_given_with_approve_is_an_edit(personas, engine, external_task):
    response = console_decide(
        console_client(personas["reviewer"]), external_task, decision="approve", reason="ok", resume='{"limit": 7}'
    )
    assert response.status_code == 201, response.content.decode()[:2000]
    assert _result(engine, external_task)["response"] == {"limit": 7}


@pytest.mark.parametrize("outcome", ["approve", "reject"])
def test_approve_and_reject_need_no_answer(personas, engine, external_task, outcome):
    response = console_decide(console_client(personas["reviewer"]), external_task, decision=outcome, reason="r")
    assert response.status_code == 201, response.content.decode()[:2000]
    assert _result(engine, external_task)["decision"] == outcome


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"decision": "edit", "resume": '{"limit": -5}'}, "-5 is less than the minimum of 0"),
        ({"decision": "edit", "resume": '{"limit": 1, "zz": 2}'}, "Additional properties are not allowed"),
        ({"decision": "edit", "resume": '{"limit": '}, "not valid JSON"),
        ({"decision": "edit", "resume": ""}, "Edit and approve needs your answer"),
        ({"decision": "edit", "resume": "[1]"}, "Your answer as JSON: must be a JSON object matching the schema"),
        ({"decision": "reject", "resume": '{"limit": 1}'}, "an answer goes with Edit and approve"),
        ({"decision": "edit", "resume": '{"decision": "reject", "action_args": {"limit": 1}}'}, "the answer says"),
    ],
    ids=["below-minimum", "extra-property", "bad-json", "no-answer", "not-an-object", "with-reject", "contradicts"],
)
def test_a_refused_answer_is_shown_next_to_the_answer_input(personas, external_task, fields, message):
    response = console_decide(console_client(personas["reviewer"]), external_task, reason="r", **fields)
    assert response.status_code == 422
    html = response.content.decode()
    error = html.split('id="f-resume-err"', 1)[1].split("</p>", 1)[0] if 'id="f-resume-err"' in html else ""
    assert message in error, html[:3000]
    assert fields["resume"].replace('"', "&quot;") in html  # what the reviewer typed is kept
    assert not Decision.objects.filter(task_id=external_task["id"]).exists()


# --- the generic fallback: an error never lands on an input the page does not show -------------


def _panel(**kwargs: Any) -> DecisionPanel:
    fields: dict[str, Any] = {"kind": "gatehouse", "allowed": ["approve", "reject"]}
    return DecisionPanel(**{**fields, "state_fields": [], "arg_fields": [], **kwargs})


@pytest.mark.parametrize(
    "field", ["edits", "action_args", "action_args.limit", "resume.decision", "message", "evidence_digest", None]
)
def test_an_error_for_a_field_without_an_input_goes_to_the_top_of_the_form(field):
    panel = _panel()
    panel.attach(field, "refused")
    assert panel.errors == {"__all__": "refused"}


def test_an_error_for_a_shown_input_goes_next_to_it():
    panel = _panel(allowed=["approve", "reject", "respond"], response_schema={"type": "object"})
    panel.attach("message", "say something")
    panel.attach("resume.limit", "too big")
    panel.attach("decision", "pick one")
    assert panel.errors == {"message": "say something", "resume": "too big", "decision": "pick one"}


def test_a_form_level_error_is_rendered(personas, external_task, monkeypatch):
    from approvals import services
    from approvals.errors import InvalidInput

    def refuse(**kwargs: Any) -> Any:
        raise InvalidInput("refused for a reason the page has no input for", field="evidence_digest")

    monkeypatch.setattr(services, "task_decide", refuse)
    response = console_decide(console_client(personas["reviewer"]), external_task, decision="approve", reason="r")
    assert response.status_code == 422
    html = response.content.decode()
    assert 'id="form-error"' in html and "refused for a reason the page has no input for" in html


# --- the page: what applies to another engine's task, and nothing that does not ----------------


def test_the_page_names_the_engine_and_hides_graph_only_panels(personas, engine, external_task):
    html = console_client(personas["reviewer"]).get(f"/tasks/{external_task['id']}/").content.decode()
    source = engine.username.removeprefix("engine-")
    assert f"What <strong>{source}</strong> asks" in html and "What the agent asks" not in html
    for absent in ("State at this checkpoint", "Changed since the previous checkpoint", "Proposed action"):
        assert absent not in html, absent
    assert external_task["checkpoint_id"] not in html.replace(f'value="{external_task["checkpoint_id"]}"', "")
    assert "Your answer as JSON" in html


def test_a_graphs_task_page_still_shows_its_state_and_checkpoint(personas):
    from tests.factories import task_make

    task = task_make()
    html = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    assert "What the agent asks" in html and "State at this checkpoint" in html
    assert 'id="seen-checkpoint"' in html
