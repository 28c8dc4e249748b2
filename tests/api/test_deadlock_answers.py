"""A request PostgreSQL ends as a deadlock (SQLSTATE 40P01) is answered 409 ``conflict``, "nothing was written:
send it again", on every surface: the APIs' error handler (``approvals.api_common``, the native API and
``/lg/``) and the console's middleware (``console.middleware.DatabaseUnavailableMiddleware``). Before those
answers it was a 503 "the database cannot be reached" (the API) or a bare 500 page (the console).

The deadlock is real, and forced: a decision locks its task, then the task's thread (one statement,
``permissions._task_by_key``); a second connection, standing in for a replay of the thread (which locks the
thread, then its tasks), holds the thread's row first, waits until PostgreSQL shows the request waiting for
it, then asks for the task's row, which the request holds. PostgreSQL ends one of the two; the request is made
the one it ends by checking for deadlocks sooner in its session than the holder does in its own
(``deadlock_timeout``: PostgreSQL checks once per wait, when it passes; the holder's check is set far off).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from html import unescape
from typing import Any

import psycopg
import pytest
from django.db import connection

from approvals.api_common import CONCURRENT_CHANGE
from approvals.models import ApprovalTask, AuditEvent, Decision, TaskStatus
from runtime.models import Run, Thread, ThreadStatus
from tests.approvals.races import Side
from tests.conftest import Persona, scaled
from tests.console.conftest import console_client, console_decide
from tests.factories import task_make
from tests.security.test_bad_input_edges import error_of

pytestmark = pytest.mark.usefixtures("live_db", "dispatched")


@pytest.fixture
def task() -> ApprovalTask:
    """A loan task pending at its gate, its thread interrupted (no worker: nothing runs)."""
    return task_make(metadata={"case": f"deadlock-{uuid.uuid4().hex[:8]}"})


def _milliseconds(seconds: float) -> str:
    return f"{int(seconds * 1000)}ms"


def _deadlocked(task: ApprovalTask, send: Callable[[], Any]) -> Any:
    """``send()``'s response: a request that decides ``task``, run on its own connection into a deadlock with
    a holder that takes the task's thread, then the task (the opposite order); PostgreSQL ends the request."""
    # The holder waits on the request's deadlock check within this, and far less than its own.
    racer = Side(send, settings={"deadlock_timeout": _milliseconds(scaled(3))})
    db = connection.settings_dict
    with psycopg.connect(f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}") as holder:
        holder.execute("SELECT set_config('deadlock_timeout', '10min', true)")
        # Never a hang: a holder that PostgreSQL does not free within this fails the test.
        holder.execute("SELECT set_config('statement_timeout', %s, true)", [_milliseconds(scaled(60))])
        holder.execute(f"SELECT 1 FROM {Thread._meta.db_table} WHERE id = %s FOR UPDATE", [task.thread_id])
        racer.start()
        racer.queued("the request waiting for the thread's row")
        # The request holds the task's row: this closes the cycle, and PostgreSQL ends the request.
        holder.execute(f"SELECT 1 FROM {ApprovalTask._meta.db_table} WHERE id = %s FOR UPDATE", [task.pk])
        holder.rollback()
    return racer.outcome()


def _written(task: ApprovalTask) -> tuple[Any, ...]:
    """What a decision on ``task`` writes: the task's status, its decisions, the thread's status, runs, audit."""
    thread = Thread.objects.get(pk=task.thread_id)
    return (
        ApprovalTask.objects.get(pk=task.pk).status,
        Decision.objects.filter(task=task).count(),
        thread.status,
        Run.objects.filter(thread=thread).count(),
        AuditEvent.objects.filter(thread_id=thread.pk).count(),
    )


def _api_conflict(response: Any) -> None:
    error = error_of(response, 409)
    assert error == {"code": "conflict", "message": CONCURRENT_CHANGE, "field": None}
    assert response["Retry-After"] == "1"


def test_a_native_api_decision_ended_by_a_deadlock_is_a_409_conflict_and_writes_nothing(reviewer: Persona, task):
    before = _written(task)
    assert before[0] == TaskStatus.PENDING and before[2] == ThreadStatus.INTERRUPTED
    body = {"decision": "approve", "reason": "deadlock", "checkpoint_id": task.checkpoint_id}
    response = _deadlocked(task, lambda: reviewer.client.post(f"/api/tasks/{task.pk}/decision", body))
    _api_conflict(response)
    assert _written(task) == before
    # Nothing was written, so the same request sent again goes through.
    again = reviewer.client.post(f"/api/tasks/{task.pk}/decision", body)
    assert again.status_code == 201, again.content


def test_an_lg_resume_ended_by_a_deadlock_is_a_409_conflict_and_writes_nothing(reviewer: Persona, task):
    before = _written(task)
    body = {"assistant_id": task.graph, "command": {"resume": {"decision": "approve", "reason": "deadlock"}}}
    response = _deadlocked(task, lambda: reviewer.client.post(f"/lg/threads/{task.thread_id}/runs", body))
    _api_conflict(response)
    assert response.json()["detail"] == CONCURRENT_CHANGE  # where the LangGraph SDK reads the message
    assert _written(task) == before


@pytest.mark.parametrize("htmx", [True, False], ids=["htmx", "plain"])
def test_a_console_decision_ended_by_a_deadlock_is_a_409_page_and_writes_nothing(reviewer: Persona, task, htmx):
    browser = console_client(reviewer)
    before = _written(task)
    response = _deadlocked(
        task, lambda: console_decide(browser, task, htmx=htmx, decision="approve", reason="deadlock decision")
    )
    assert response.status_code == 409, response.content[:500]
    assert CONCURRENT_CHANGE in unescape(response.content.decode())
    assert _written(task) == before
