"""SQL query counts of the hot paths, pinned as upper bounds.

A change that adds queries to start, decision, claim, finish or the inbox
fails here; lower a pin when you remove queries. The inbox must not grow with
the number of tasks it lists (no N+1).

Claim, finish and a resume run are called in this process on runs written here (no worker),
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

from runtime.executor import run_execute
from runtime.gatekeeper import gate_payload
from runtime.models import Run, RunKind, RunStatus, Thread
from runtime.runs import PendingInterrupt, RunOutcome, run_claim, run_finish
from runtime.threads import thread_create
from tests.conftest import Persona, api_decide, loan_input, pending_tasks, thread_start

pytestmark = pytest.mark.usefixtures("live_db")

# Upper bounds (queries per call, BEGIN/COMMIT included). Lower them when a change removes queries.
# Start and decision read the principal's permissions and graph assignments in one query (was three).
# Start: the thread is created busy with its run (no savepoint, no status update); the response shows the
# thread as created (no pending-task read) and does not read the thread back to re-check its visibility.
# Start and decision: a run is inserted stamped as dispatched, so its send after commit writes nothing;
# both pinned at what they send since then (start 7 and decision 15 before, under bounds of 10 and 18).
START_QUERIES = 6
# Decision: no savepoint around the run insert; the decision is inserted naming its resume run; one
# read of the task's siblings answers both "does another task wait" and "which decisions resume";
# the response's re-check of the task's visibility reads nothing; the audit chain's lock and
# head are read once per transaction; the webhook subscriptions are read once for its task.signed and
# task.decided (was twice). 13 since the outbox keeps the subscriptions it read while their generation (read
# with each audit append) stands: the decision's task.signed/task.decided no longer read them (was 14).
# 9 since the decision's folds: after the locking read, one statement reads the claim, the earlier
# decisions and the siblings (was three); the deciding signature's insert closes its task, and the resume
# run's insert marks its thread busy (data-modifying WITHs, was four).
# 8 since the deciding signature's event and its resume's run.queued are appended by one statement.
DECISION_QUERIES = 8
# Claim: one locking read (run, thread, the database clock, the current branch), one update (run and
# thread fence in one statement on PostgreSQL), the audit row.
CLAIM_QUERIES = 7
# Finish: the thread is not read back; the run's update, the thread's and the pg_notify that wakes
# waiters are one statement (PostgreSQL); the outbox's subscription lookup for the event is included,
# its task.opened no longer reads the task back; the audit chain's lock and head are read once. 8 since
# round 13 (was 10 as a bound with room): a graph no test subscribes webhooks to, so nothing else varies.
# 7 with the webhook subscriptions kept (their generation comes with the audit append): the test finishes a
# first run to warm the process's list, as every finish but a process's first finds it.
# 6 since the run's pause and the task it opens are appended by one statement.
FINISH_QUERIES = 6
# A resume run that completes, executed in this process: every statement psycopg sends (the
# checkpointer's included). The state is read once before streaming (the resume guard) and not after
# (the outcome comes from the stream); 47 before that and the claim/finish trims; 39 before this round:
# the checkpoint pool no longer checks every connection it hands out with an empty query, the claim's
# and the finish's writes are one statement each (the notify joined the finish's), and the audit
# chain's lock and head are read once per transaction. 20 measured since round 13 (bound 24 before).
# 19 since thread.completed's outbox entry uses the subscriptions kept from the start run's task.opened.
# 18 since run.succeeded and thread.completed are appended by one statement.
RESUME_RUN_STATEMENTS = 18
# A graph no test subscribes webhooks to: matching subscriptions (other tests') would add outbox rows.
QUIET_GRAPH = "nested_review"
# A live inbox pushing a new task's row (console.consumers.InboxConsumer): the session and the user
# re-checked in one statement, what the user may see in a second (re-read on every push since access
# withdrawn from an open socket went on streaming), the row with its thread's has-comments flag in a
# third; each prepared (was four ORM queries).
LIVE_ROW_QUERIES = 3
# Inbox: hand-offs +1 (the header's own out-of-office), comments +1 (rows' open questions, mentions);
# 10 measured when the pin came down from 12.
INBOX_QUERIES = 10


class _Compiled:
    """The statements the ORM composes and compiles meanwhile (every one on the hot paths is written
    out once per process and prepared since round 13: a new ORM query there shows here)."""

    def __enter__(self) -> _Compiled:
        from django.db.models.sql import compiler

        self.sql: list[str] = []
        self._originals = {cls: cls.execute_sql for cls in (compiler.SQLCompiler, compiler.SQLInsertCompiler)}

        def counted(original: Any) -> Any:
            def execute_sql(this: Any, *args: Any, **kwargs: Any) -> Any:
                self.sql.append(str(this.as_sql()[0])[:200])
                return original(this, *args, **kwargs)

            return execute_sql

        for cls, original in self._originals.items():
            cls.execute_sql = counted(original)  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, original in self._originals.items():
            cls.execute_sql = original  # type: ignore[method-assign]


def _sql(ctx: CaptureQueriesContext) -> str:
    return "\n".join(f"{i + 1}. {q['sql'][:300]}" for i, q in enumerate(ctx.captured_queries))


def _claimed_run(operator: Persona, graph: str = "loan_approval", **metadata: Any) -> Run:
    thread = thread_create(graph=graph, metadata=metadata, created_by=operator.user)
    run = Run.objects.create(thread=thread, kind=RunKind.START, input=loan_input(), created_by=operator.user)
    claimed = run_claim(run_id=str(run.id), worker="perf-test")
    assert claimed is not None
    return claimed


def _interrupt_outcome(tag: str) -> RunOutcome:
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
    return RunOutcome(RunStatus.INTERRUPTED, checkpoint_id, {"amount": 20000, "applicant": tag}, [interrupt])


def test_claim_queries_are_bounded(operator):
    thread = thread_create(graph="loan_approval", metadata={}, created_by=operator.user)
    run = Run.objects.create(thread=thread, kind=RunKind.START, input=loan_input(), created_by=operator.user)
    with CaptureQueriesContext(connection) as ctx:
        claimed = run_claim(run_id=str(run.id), worker="perf-test")
    assert claimed is not None
    assert len(ctx) <= CLAIM_QUERIES, _sql(ctx)


def test_finish_with_an_interrupt_queries_are_bounded(operator):
    run_finish(run=_claimed_run(operator, graph=QUIET_GRAPH), outcome=_interrupt_outcome("warm-up"))
    run = _claimed_run(operator, graph=QUIET_GRAPH)
    outcome = _interrupt_outcome("finish")
    with CaptureQueriesContext(connection) as ctx:
        run_finish(run=run, outcome=outcome)
    run.refresh_from_db()
    assert run.status == RunStatus.INTERRUPTED
    assert run.thread.tasks.filter(status="pending").count() == 1
    assert len(ctx) <= FINISH_QUERIES, _sql(ctx)


class _Statements:
    """Counts every statement psycopg sends from this process (Django's and the checkpointer's pools)."""

    def __enter__(self) -> _Statements:
        import psycopg

        self.sql: list[str] = []
        self._original = psycopg.Cursor.execute

        def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self.sql.append(query if isinstance(query, str) else repr(query))
            return self._original(cursor, query, *args, **kwargs)

        psycopg.Cursor.execute = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        import psycopg

        psycopg.Cursor.execute = self._original  # type: ignore[method-assign]


def test_a_completed_resume_run_sends_a_bounded_number_of_statements(operator):
    # Runs are created here and never dispatched, so no worker can take them from this process.
    thread = thread_create(graph=QUIET_GRAPH, metadata={}, created_by=operator.user)
    start = Run.objects.create(thread=thread, kind=RunKind.START, input={"subject": "perf"}, created_by=operator.user)
    run_execute(run_id=str(start.id))
    thread.refresh_from_db()
    [task] = thread.tasks.filter(status="pending")
    resume = Run.objects.create(
        thread=thread,
        kind=RunKind.RESUME,
        command={"resume": {task.interrupt_id: {"decision": "approve"}}, "checkpoint_id": thread.checkpoint_id},
        created_by=operator.user,
    )
    with _Statements() as statements, _Compiled() as compiled:
        run_execute(run_id=str(resume.id))
    resume.refresh_from_db()
    assert resume.status == RunStatus.SUCCEEDED
    assert Thread.objects.get(pk=thread.pk).values["answers"] == ["inner_gate:approve"]
    listing = "\n".join(f"{i + 1}. {q[:200]}" for i, q in enumerate(statements.sql))
    assert len(statements.sql) <= RESUME_RUN_STATEMENTS, listing
    assert compiled.sql == [], "the run composes no ORM query"


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
    with CaptureQueriesContext(connection) as ctx, _Compiled() as compiled:
        thread = thread_start(operator, "loan_approval", loan_input())
    assert len(ctx) <= START_QUERIES, _sql(ctx)
    assert compiled.sql == [], "the start composes no ORM query"

    [task] = pending_tasks(reviewer, thread["id"])
    reviewer.client.get("/api/graphs")
    with CaptureQueriesContext(connection) as ctx, _Compiled() as compiled:
        response = api_decide(reviewer, task, reason="ok")
    assert response.status_code == 201, response.content
    assert len(ctx) <= DECISION_QUERIES, _sql(ctx)
    assert compiled.sql == [], "the decision composes no ORM query"


def test_a_live_inbox_pushes_a_new_tasks_row_in_two_statements(operator, reviewer):
    from importlib import import_module

    from django.conf import settings

    from approvals.models import ApprovalTask
    from console.consumers import InboxConsumer

    client = Client()
    client.force_login(reviewer.user)
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key=client.cookies["sessionid"].value)
    consumer = InboxConsumer()
    consumer.scope = {"user": reviewer.user, "session": session, "query_string": b""}
    tag = f"perf-{uuid.uuid4().hex[:8]}"
    tasks = []
    for _ in range(2):
        run = _claimed_run(operator, case=tag)
        run_finish(run=run, outcome=_interrupt_outcome(tag))
        tasks.append(ApprovalTask.objects.get(thread_id=run.thread_id, status="pending"))
    events = [{"action": "task.opened", "subject_type": "task", "subject_id": str(t.pk)} for t in tasks]
    assert consumer._fragment(events[0])  # the first push prepares the statements
    with CaptureQueriesContext(connection) as ctx:
        row = consumer._fragment(events[1])
    assert row is not None and f'data-task-id="{tasks[1].pk}"' in row
    assert len(ctx) <= LIVE_ROW_QUERIES, _sql(ctx)
