"""A graph whose state and input are Pydantic models (tests/graphs/models.py): every write surface checks its
``Field`` bounds and refuses with a 422 naming the field, writing nothing; the schemas served carry them.

The bare annotation of a model's field (``float``) was all that was checked: ``amount: -5`` was signed as an
edit, the resume run failed in LangGraph's own validation, and a retry re-applied the signed edit.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime.models import Branch, Thread
from tests.api.test_bad_input import error_of, snapshot
from tests.conftest import api_decide, pending_tasks, thread_settled, thread_start
from tests.console.conftest import console_client

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

GRAPH = "budget_review"


def budget(amount: Any = 900, **extra: Any) -> dict[str, Any]:
    return {"subject": "laptops", "amount": amount, **extra}


@pytest.fixture
def budget_task(live_worker, operator, reviewer) -> dict[str, Any]:
    thread = thread_start(operator, GRAPH, budget())
    [task] = pending_tasks(reviewer, thread["id"])
    return reviewer.client.get(f"/api/tasks/{task['id']}").json()


@pytest.mark.parametrize("amount", [-5, 0, 500_000])
def test_an_edit_out_of_the_models_bounds_is_refused_and_nothing_is_signed(reviewer, budget_task, amount):
    before = snapshot(budget_task["id"])
    error = error_of(api_decide(reviewer, budget_task, "edit", reason="cap", edits={"amount": amount}), 422)
    assert error["field"] == "edits.amount"
    assert error["message"].startswith("Amount must be")
    command = {"resume": {"decision": "edit", "reason": "cap"}, "update": {"amount": amount}}
    lg = reviewer.client.post(
        f"/lg/threads/{budget_task['thread_id']}/runs", {"assistant_id": GRAPH, "command": command}
    )
    assert lg.status_code == 422, lg.content
    assert lg.json()["error"]["field"] == "command.update.amount"
    assert snapshot(budget_task["id"]) == before


def test_an_edit_within_the_bounds_resumes_the_run_to_completion(operator, reviewer, budget_task):
    response = api_decide(reviewer, budget_task, "edit", reason="cap", edits={"amount": 50})
    assert response.status_code == 201, response.content
    done = thread_settled(operator, budget_task["thread_id"])
    assert done["status"] == "completed", done
    assert done["values"]["outcome"] == "edit:50"


@pytest.mark.parametrize(
    "graph_input,field",
    [
        (budget(500_000), "input.amount"),
        (budget(-3), "input.amount"),
        (budget(subject=""), "input.subject"),
        (budget(lines=[{"sku": "a", "quantity": 0}]), "input.lines[0].quantity"),  # a nested model's bounds
        ({"subject": "laptops"}, "input.amount"),  # required by the input model
    ],
)
def test_a_start_out_of_the_input_models_bounds_is_refused(operator, graph_input, field):
    before = Thread.objects.count()
    error = error_of(operator.client.post("/api/threads", {"graph": GRAPH, "input": graph_input}), 422)
    assert error["field"] == field
    lg_thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    lg = operator.client.post(f"/lg/threads/{lg_thread}/runs", {"assistant_id": GRAPH, "input": graph_input})
    assert lg.status_code == 422, lg.content
    assert lg.json()["error"]["field"] == field
    assert Thread.objects.count() == before + 1  # only the /lg/ thread created empty beforehand
    assert not Thread.objects.get(pk=lg_thread).runs.exists()


def test_update_state_and_a_fork_out_of_the_bounds_are_refused(operator, reviewer, budget_task):
    thread_id = budget_task["thread_id"]
    assert api_decide(reviewer, budget_task).status_code == 201  # update_state waits for no pending decision
    assert thread_settled(operator, thread_id)["status"] == "completed"
    head = Thread.objects.get(pk=thread_id).checkpoint_id
    response = operator.client.post(f"/lg/threads/{thread_id}/state", {"values": {"amount": -5}})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "values.amount"
    fork = {"checkpoint_id": budget_task["checkpoint_id"], "values": {"amount": -5}, "reason": "try less"}
    assert error_of(operator.client.post(f"/api/threads/{thread_id}/fork", fork), 422)["field"] == "values.amount"
    assert Thread.objects.get(pk=thread_id).checkpoint_id == head
    assert not Branch.objects.filter(thread_id=thread_id).exists()


def test_the_console_start_form_refuses_an_amount_out_of_bounds(personas):
    client = console_client(personas["operator"])
    before = Thread.objects.count()
    response = client.post("/threads/new", {"graph": GRAPH, "input.subject": "laptops", "input.amount": "-3"})
    assert response.status_code == 422
    assert "Amount must be more than 0" in response.content.decode()
    assert Thread.objects.count() == before


def test_the_schemas_served_carry_the_models_bounds(operator):
    [graph] = [g for g in operator.client.get("/api/graphs").json() if g["name"] == GRAPH]
    amount = {"exclusiveMinimum": 0, "maximum": 100_000, "type": "number", "description": "What is spent, in euros."}
    assert graph["state_schema"]["properties"]["amount"] == amount
    schemas = operator.client.get(f"/lg/assistants/{GRAPH}/schemas").json()
    bounds = {"exclusiveMinimum": 0, "maximum": 100_000, "type": "number"}
    assert schemas["input_schema"]["properties"]["amount"] == bounds
    assert schemas["state_schema"]["properties"]["amount"] == amount
    # A nested model's definition is where its reference points: the document's own $defs.
    lines = schemas["input_schema"]["properties"]["lines"]
    assert lines["items"] == {"$ref": "#/$defs/Line"}
    assert schemas["input_schema"]["$defs"]["Line"]["properties"]["quantity"]["minimum"] == 1
