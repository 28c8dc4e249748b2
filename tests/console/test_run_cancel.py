"""The thread page's "Cancel the run" form: operators and admins, a reason, CSRF, htmx."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import AuditEvent
from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from tests.console.conftest import console_client

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def running() -> Iterator[Run]:
    """A run some worker holds under a long lease: no worker of the test session touches it."""
    thread = Thread.objects.create(graph="zombie_pay", status=ThreadStatus.BUSY)
    run = Run.objects.create(
        thread=thread,
        kind=RunKind.START,
        status=RunStatus.RUNNING,
        input={},
        lease_owner="elsewhere:1:1",
        lease_expires_at=timezone.now() + timedelta(hours=1),
    )
    yield run
    Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(status=RunStatus.FAILED, lease_expires_at=None)


def _token(page: str) -> str:
    return page.split('hx-headers=\'{"X-CSRFToken": "', 1)[1].split('"', 1)[0]


@pytest.mark.parametrize("role,shown", [("operator", True), ("admin", True), ("reviewer", False), ("auditor", False)])
def test_the_cancel_form_is_shown_to_operators_and_admins_only(personas, running, role, shown):
    page = console_client(personas[role]).get(f"/threads/{running.thread_id}/").content.decode()
    assert ('id="run-cancel"' in page) is shown


def test_a_cancel_without_a_csrf_token_is_refused(personas, running):
    client = console_client(personas["operator"], enforce_csrf=True)
    response = client.post(f"/threads/{running.thread_id}/cancel-run", {"reason": "x", "action": "interrupt"})
    assert response.status_code == 403
    assert Run.objects.get(pk=running.pk).status == RunStatus.RUNNING


def test_a_cancel_without_a_reason_is_refused_naming_the_field(personas, running):
    client = console_client(personas["operator"])
    response = client.post(f"/threads/{running.thread_id}/cancel-run", {"reason": " ", "action": "interrupt"})
    assert response.status_code == 422 and b"say why" in response.content
    assert Run.objects.get(pk=running.pk).status == RunStatus.RUNNING
    assert not AuditEvent.objects.filter(thread_id=running.thread_id, action="run.cancelled").exists()


def test_an_operator_cancels_the_running_run_with_htmx(personas, running):
    operator = personas["operator"]
    client = console_client(operator, enforce_csrf=True)
    token = _token(client.get(f"/threads/{running.thread_id}/").content.decode())
    response = client.post(
        f"/threads/{running.thread_id}/cancel-run",
        {"reason": "customer withdrew", "action": "rollback"},
        headers={"HX-Request": "true", "X-CSRFToken": token},
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="thread-live"' in html and "Run cancelled" in html
    assert f"cancelled by {operator.username} (rollback): customer withdrew" in html
    assert 'id="run-cancel"' not in html  # nothing left to cancel
    run = Run.objects.get(pk=running.pk)
    assert run.status == RunStatus.CANCELLED and run.cancelled_by == operator.username
    [event] = AuditEvent.objects.filter(thread_id=running.thread_id, action="run.cancelled")
    assert event.details["via"] == "console" and event.details["reason"] == "customer withdrew"
    assert AuditEvent.objects.filter(thread_id=running.thread_id, action="run.rolled_back").exists()
