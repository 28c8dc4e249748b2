"""A web process still running code from before a migration that changed what the database accepts (0032: the
audit hash covers the actor's user id) is refused by the database on every audited write. The API answered
that as a 500 ``internal``, a defect; it is a 503 ``restart_required`` naming the cure (restart this process),
since our functions raise their own SQLSTATE for it (migration 0034, ``runtime.retry.stale_code``).

The refusal is real: the audited write sends ``gatehouse_audit_append`` the hashed text in the form the code
from before 0032 built (no ``actor_id``), and PostgreSQL refuses it.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from approvals import audit
from approvals.models import AuditEvent, Comment
from tests.api.test_bad_input import error_of
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def _fields_from_before_0032(event: AuditEvent) -> dict[str, Any]:
    """What the code from before migration 0032 hashed: today's fields without the actor's user id."""
    fields = _event_fields(event)
    del fields[audit.ACTOR_ID]
    return fields


_event_fields = audit.event_fields


def test_an_audited_write_from_code_older_than_the_database_is_a_503_naming_the_restart(personas, monkeypatch, caplog):
    task = task_make()
    monkeypatch.setattr(audit, "event_fields", _fields_from_before_0032)
    with caplog.at_level(logging.WARNING):
        response = personas["reviewer"].client.post(f"/api/tasks/{task.pk}/comments", {"body": "income?"})
    error = error_of(response, 503)
    assert error["code"] == "restart_required" and "restart this process" in error["message"]
    assert response["Retry-After"]
    assert not Comment.objects.filter(task=task).exists()  # refused whole: the comment rolled back with its event
    [logged] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert logged.levelno == logging.WARNING and "older than the database" in logged.getMessage()
    assert logged.exc_info is None  # one line, no traceback: not a defect


def test_a_console_page_refused_for_code_older_than_the_database_is_a_503_naming_the_upgrade(
    personas, monkeypatch, caplog
):
    """The console answered the same refusal with Django's "Server Error (500)" and a traceback at ERROR."""
    from tests.console.conftest import console_client

    task = task_make()
    client = console_client(personas["reviewer"])
    monkeypatch.setattr(audit, "event_fields", _fields_from_before_0032)
    with caplog.at_level(logging.WARNING):
        response = client.post(f"/tasks/{task.pk}/comments", {"body": "income?"})
    assert response.status_code == 503 and response["Retry-After"]
    assert "has not been restarted on the new release" in response.content.decode()
    assert not Comment.objects.filter(task=task).exists()
    [logged] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "older than the database" in logged.getMessage() and logged.exc_info is None


def test_a_worker_older_than_the_database_leaves_the_run_queued_in_one_line(monkeypatch, caplog):
    """An old worker beside a migrated database failed each claim with an ERROR traceback (the task raised),
    once per dispatch, until someone restarted it. It says why in one line and leaves the run to a worker on
    the new release: the claim rolled back whole (no attempt spent, no fence moved)."""
    from runtime.executor import run_execute
    from runtime.models import Run, RunKind, RunStatus, Thread
    from tests.conftest import loan_input, runs_settle

    thread = Thread.objects.create(graph="loan_approval")
    run = Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.QUEUED, input=loan_input())
    monkeypatch.setattr(audit, "event_fields", _fields_from_before_0032)
    try:
        with caplog.at_level(logging.WARNING):
            run_execute(run_id=str(run.id))  # returns: the Celery task does not fail
        run.refresh_from_db()
        thread.refresh_from_db()
        assert (run.status, run.attempts, run.lease_owner, thread.fence) == (RunStatus.QUEUED, 0, "", 0)
        [logged] = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert "older than the database" in logged.getMessage() and logged.exc_info is None
    finally:
        runs_settle([run.pk])


def test_a_worker_refused_mid_run_hands_the_run_back_in_one_line(monkeypatch, caplog):
    """Refused at an audited write after its claim (the upgrade's migrate ran while it worked): the run is
    handed back (its lease released, why on the run) for a worker on the new release, not failed."""
    from runtime import executor
    from runtime.models import Run, RunKind, RunStatus, Thread
    from tests.conftest import loan_input, runs_settle

    claim = executor.run_claim

    def claimed_then_migrated(**kwargs: Any) -> Any:
        run = claim(**kwargs)
        monkeypatch.setattr(audit, "event_fields", _fields_from_before_0032)
        return run

    monkeypatch.setattr(executor, "run_claim", claimed_then_migrated)
    thread = Thread.objects.create(graph="loan_approval")
    run = Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.QUEUED, input=loan_input())
    try:
        with caplog.at_level(logging.WARNING):
            executor.run_execute(run_id=str(run.id))
        run.refresh_from_db()
        assert (run.status, run.attempts, run.lease_owner, run.error) == (
            RunStatus.RUNNING,
            1,
            "",
            executor.STALE_WORKER,
        )
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert any("handed back" in r.getMessage() for r in warnings)
        assert all(r.exc_info is None for r in warnings)
    finally:
        runs_settle([run.pk])
