"""The demo loan graph refuses what it cannot pay: a start without the loan, a fork or state write outside
the bank's bounds, and (defence in depth) a disbursement of a non-positive amount."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction

from approvals import time_travel
from approvals.errors import InvalidInput
from approvals.models import ApprovalTask, TaskStatus
from runtime import runs
from runtime.executor import run_execute
from runtime.models import Branch, Run, RunKind, RunStatus, Thread
from runtime.registry import graph_get, graphs_read
from runtime.state_schema import FieldError, values_validate
from tests.conftest import loan_input

pytestmark = pytest.mark.usefixtures("live_db")


def _module() -> Any:
    graph_get("loan_approval")  # the registry imports the graph file as its own module
    return sys.modules["gatehouse_graphs.loan_approval"]


def _run(thread: Thread, graph_input: dict[str, Any]) -> Run:
    with transaction.atomic():
        run = runs.run_enqueue(thread=thread, kind=RunKind.START, input=graph_input)
    run_execute(run_id=str(run.id))
    run.refresh_from_db()
    thread.refresh_from_db()
    return run


@pytest.mark.parametrize(
    ("graph_input", "field"),
    [
        ({}, "input.amount"),
        ({"applicant": "A", "income": 40000}, "input.amount"),
        ({"amount": 20000, "income": 40000}, "input.applicant"),
        ({"amount": 20000, "applicant": "A"}, "input.income"),
    ],
)
def test_it_refuses_a_start_without_the_loan_naming_the_missing_key(operator, graph_input, field):
    before = Thread.objects.count()
    response = operator.client.post("/api/threads", {"graph": "loan_approval", "input": graph_input})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field
    assert "required" in response.json()["error"]["message"]
    assert Thread.objects.count() == before


@pytest.mark.parametrize("applicant", ["", "   ", "x" * 201])
def test_it_refuses_a_start_without_an_applicant_to_pay(operator, applicant):
    """An empty applicant was accepted: the task read "Loan of 18000 for", its memory kept under "unknown"."""
    before = Thread.objects.count()
    body = {"graph": "loan_approval", "input": {**loan_input(), "applicant": applicant}}
    response = operator.client.post("/api/threads", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "input.applicant"
    assert Thread.objects.count() == before


def test_it_refuses_a_start_without_input_at_all(operator):
    response = operator.client.post("/api/threads", {"graph": "loan_approval"})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "input.amount"


def test_a_start_on_the_platform_api_requires_the_loan_too(operator):
    thread = operator.client.post("/lg/threads", {}).json()
    response = operator.client.post(
        f"/lg/threads/{thread['thread_id']}/runs", {"assistant_id": "loan_approval", "input": {"applicant": "A"}}
    )
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "input.amount"


@pytest.mark.parametrize("amount", [-500, 0, 10_000_001])
def test_the_state_schema_carries_the_inputs_bounds(amount):
    with pytest.raises(FieldError) as raised:
        values_validate(graph_get("loan_approval").state_schema, {"amount": amount}, prefix="values")
    assert raised.value.field == "values.amount"


def test_a_fork_at_the_review_cannot_write_a_negative_amount(dispatched, personas):
    thread = Thread.objects.create(graph="loan_approval")
    assert _run(thread, loan_input(amount=20000, income=40000)).status == RunStatus.INTERRUPTED
    [task] = ApprovalTask.objects.filter(thread=thread, status=TaskStatus.PENDING)
    with pytest.raises(InvalidInput) as raised:
        time_travel.thread_fork(
            actor=personas["operator"].user,
            thread_id=thread.id,
            checkpoint_id=task.checkpoint_id,
            values={"amount": -500},
            reason="pay less",
        )
    assert raised.value.field == "values.amount"
    assert not Branch.objects.filter(thread=thread).exists()


def test_update_state_cannot_write_a_negative_amount(dispatched, operator):
    thread = Thread.objects.create(graph="loan_approval")
    # Far beyond the income: declined without review or payment, so the thread completes with no bank.
    assert _run(thread, loan_input(amount=1_000_000, income=40000)).status == RunStatus.SUCCEEDED
    head = thread.checkpoint_id
    response = operator.client.post(f"/lg/threads/{thread.id}/state", {"values": {"amount": -500}})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "values.amount"
    thread.refresh_from_db()
    assert thread.checkpoint_id == head


@pytest.mark.parametrize("amount", [0, -500, None])
def test_disburse_refuses_a_non_positive_amount_rather_than_pay_it(monkeypatch, amount):
    module = _module()
    paid: list[Any] = []
    monkeypatch.setattr(module, "perform_effect", lambda *a, **k: paid.append((a, k)))
    state = {"loan_id": "L-0", "applicant": "A"} | ({} if amount is None else {"amount": amount})
    result = module.disburse(state)
    assert result == {"status": "refused_non_positive_amount"}
    assert paid == []


@pytest.mark.parametrize(
    ("loan", "title"),
    [
        ({}, "Loan of EUR 20,000 for Évariste 🦊"),
        ({"loan_id": ""}, "Loan of EUR 20,000 for Évariste 🦊"),
        ({"loan_id": "L-77"}, "Loan L-77: EUR 20,000 for Évariste 🦊"),
    ],
)
def test_the_review_s_title_reads_well_with_or_without_a_loan_id(dispatched, loan, title):
    """Without loan_id the inbox read "Loan : 20000 for Évariste 🦊"; the amount is money, not a bare 20000."""
    thread = Thread.objects.create(graph="loan_approval")
    graph_input = {"applicant": "Évariste 🦊", "amount": 20000, "income": 40000, "term_months": 24, **loan}
    assert _run(thread, graph_input).status == RunStatus.INTERRUPTED
    [task] = ApprovalTask.objects.filter(thread=thread, status=TaskStatus.PENDING)
    assert task.title == title


def test_the_demo_inbox_shows_the_review_s_amount_and_risk(dispatched):
    """A fresh ``make run`` listed "Loan L-3158: 39417 for Grace Hopper" and no columns: the demo's configuration
    gives its gate Amount (money, in the bank's euros) and Risk columns, read from the review's payload."""
    demo = graphs_read(Path(settings.BASE_DIR) / "demo" / "langgraph.json")
    columns = demo["loan_approval"].options["columns"]["human_review"]
    assert [(c.key, c.label, c.type, c.currency) for c in columns] == [
        ("amount", "Amount", "money", "EUR"),
        ("risk", "Risk", "risk", ""),
    ]
    thread = Thread.objects.create(graph="loan_approval")
    assert _run(thread, loan_input(amount=20000, income=40000)).status == RunStatus.INTERRUPTED
    [task] = ApprovalTask.objects.filter(thread=thread, status=TaskStatus.PENDING)
    shown = {}
    for column in columns:
        value = task.payload
        for key in column.path:
            value = value[key]
        shown[column.key] = value
    assert shown == {"amount": 20000, "risk": 0.625}
    assert task.payload["summary"] == "Borderline risk score 0.625; income EUR 40,000."
