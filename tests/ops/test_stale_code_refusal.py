"""A web process still running code from before a migration that changed what the database accepts (0032: the
audit hash covers the actor's user id) is refused by the database on every audited write. The API answered
that as a 500 ``internal``, a defect; it is a 503 ``restart_required`` naming the cure (restart this process),
since our functions raise their own SQLSTATE for it (migration 0034, ``approvals.api_common.stale_code``).

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
