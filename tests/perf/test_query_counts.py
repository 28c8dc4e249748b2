"""SQL query counts of the hot paths, pinned as upper bounds.

A change that adds queries to start, decision, claim, finish or the inbox
fails here; lower a pin when you remove queries. The inbox must not grow with
the number of tasks it lists (no N+1).

Claim and finish are called in this process on runs written here (no worker),
with an interrupt outcome as the executor would report it; start and decision
go through the API with a real worker in between.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from runtime.gatekeeper import gate_payload
from runtime.models import Run, RunKind, RunStatus
from runtime.runs import Outcome, PendingInterrupt, run_claim, run_finish, thread_create
from tests.conftest import Persona, api_decide, loan_input, pending_tasks, thread_start

pytestmark = pytest.mark.usefixtures("live_db")

# Upper bounds (queries per call). Lower them when a change removes queries.
START_QUERIES = 17
DECISION_QUERIES = 28
CLAIM_QUERIES = 10  # the lease is set on the database clock and read back (fencing, 57b13a9)
# Includes the pg_notify that wakes waiters and the outbox's subscription lookup for the event.
FINISH_QUERIES = 16
# A graph no test subscribes webhooks to: matching subscriptions (other tests') would add outbox rows.
QUIET_GRAPH = "nested_review"
INBOX_QUERIES = 12  # hand-offs +1 (the header's own out-of-office), comments +1 (rows' open questions, mentions)


def _sql(ctx: CaptureQueriesContext) -> str:
    return "\n".join(f"{i + 1}. {q['sql'][:300]}" for i, q in enumerate(ctx.captured_queries))


def _claimed_run(operator: Persona, graph: str = "loan_approval", **metadata: Any) -> Run:
    thread = thread_create(graph=graph, metadata=metadata, created_by=operator.user)
    run = Run.objects.create(thread=thread, kind=RunKind.START, input=loan_input(), created_by=operator.user)
    claimed = run_claim(run_id=str(run.id), worker="perf-test")
    assert claimed is not None
    return claimed


def _interrupt_outcome(tag: str) -> Outcome:
    checkpoint_id = f"cp-{uuid.uuid4()}"
    payload = gate_payload(
        title=f"Loan {tag}",
        summary="Borderline risk",
        proposed_action={"name": "disburse", "args": {"amount": 20000, "term_months": 24}},
        editable=["amount", "term_months"],
        sla_seconds=3600,
        details={"risk_score": 0.5},
    )
    interrupt = PendingInterrupt(
        interrupt_id=uuid.uuid4().hex, value=payload, node="human_review", checkpoint_id=checkpoint_id
    )
    return Outcome(RunStatus.INTERRUPTED, checkpoint_id, {"amount": 20000, "applicant": tag}, [interrupt])


def test_claim_queries_are_bounded(operator):
    thread = thread_create(graph="loan_approval", metadata={}, created_by=operator.user)
    run = Run.objects.create(thread=thread, kind=RunKind.START, input=loan_input(), created_by=operator.user)
    with CaptureQueriesContext(connection) as ctx:
        claimed = run_claim(run_id=str(run.id), worker="perf-test")
    assert claimed is not None
    assert len(ctx) <= CLAIM_QUERIES, _sql(ctx)


def test_finish_with_an_interrupt_queries_are_bounded(operator):
    run = _claimed_run(operator, graph=QUIET_GRAPH)
    outcome = _interrupt_outcome("finish")
    with CaptureQueriesContext(connection) as ctx:
        run_finish(run=run, outcome=outcome)
    run.refresh_from_db()
    assert run.status == RunStatus.INTERRUPTED
    assert run.thread.tasks.filter(status="pending").count() == 1
    assert len(ctx) <= FINISH_QUERIES, _sql(ctx)


def _inbox_with(operator: Persona, reviewer_client: Client, count: int) -> int:
    tag = f"perf-{uuid.uuid4().hex[:8]}"
    for _ in range(count):
        run_finish(run=_claimed_run(operator, case=tag), outcome=_interrupt_outcome(tag))
    reviewer_client.get("/", {"q": tag})  # warm caches (facets) so both counts see the same state
    with CaptureQueriesContext(connection) as ctx:
        response = reviewer_client.get("/", {"q": tag})
    assert response.status_code == 200
    assert response.content.count(b"Loan " + tag.encode()) >= count
    assert len(ctx) <= INBOX_QUERIES, _sql(ctx)
    return len(ctx)


def test_the_inbox_query_count_does_not_grow_with_its_tasks(operator, reviewer):
    client = Client()
    client.force_login(reviewer.user)
    few = _inbox_with(operator, client, 5)
    many = _inbox_with(operator, client, 50)
    assert many == few


@pytest.mark.integration
@pytest.mark.usefixtures("live_worker")
def test_start_and_decision_queries_are_bounded(operator, reviewer):
    operator.client.get("/api/graphs")  # the token's throttled last-used update happens here, not below
    with CaptureQueriesContext(connection) as ctx:
        thread = thread_start(operator, "loan_approval", loan_input())
    assert len(ctx) <= START_QUERIES, _sql(ctx)

    [task] = pending_tasks(reviewer, thread["id"])
    reviewer.client.get("/api/graphs")
    with CaptureQueriesContext(connection) as ctx:
        response = api_decide(reviewer, task, reason="ok")
    assert response.status_code == 201, response.content
    assert len(ctx) <= DECISION_QUERIES, _sql(ctx)
