"""``runs.cancel_many`` (``POST /lg/runs/cancel``) was a 404: the SDK's way to stop several runs, or every pending
or running one (a runaway agent). Each run is cancelled as ``runs.cancel`` cancels it (permission, audit);
runs named by id are all checked first, so a bad one cancels none."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from approvals.models import AuditAction, AuditEvent
from runtime.models import Run, RunStatus
from tests.conftest import Persona
from tests.security.test_bad_input_edges import error_of

# dispatched: no worker is sent the runs (left queued ones are cancelled at each test's end)
pytestmark = pytest.mark.usefixtures("live_db", "dispatched")


def _queued(persona: Persona, count: int) -> list[tuple[str, str]]:
    """``count`` threads, each with a queued start run: (thread id, run id). Recorded as dispatched a minute
    from now, so the session worker's sweeper does not send them on (and a worker end them) under the test."""
    made = []
    for n in range(count):
        thread = persona.client.post("/lg/threads", {}).json()["thread_id"]
        run = persona.client.post(f"/lg/threads/{thread}/runs", {"assistant_id": "three_steps", "input": {"x": n}})
        assert run.status_code == 200, run.content
        made.append((thread, run.json()["run_id"]))
    Run.objects.filter(pk__in=[r for _, r in made]).update(dispatched_at=timezone.now() + timedelta(minutes=1))
    return made


def _status(run_id: str) -> str:
    return str(Run.objects.get(pk=run_id).status)


def _cancel_many(persona: Persona, body: dict[str, Any], action: str = "") -> Any:
    query = f"?action={action}" if action else ""
    return persona.client.post(f"/lg/runs/cancel{query}", body)


def test_runs_named_on_a_thread_are_cancelled_and_audited(operator):
    [(thread, first)] = _queued(operator, 1)
    second_thread, other = _queued(operator, 1)[0]
    answer = _cancel_many(operator, {"thread_id": thread, "run_ids": [first]})
    assert answer.status_code == 204, answer.content
    assert _status(first) == RunStatus.CANCELLED and _status(other) == RunStatus.QUEUED
    event = AuditEvent.objects.get(subject_id=first, action=AuditAction.RUN_CANCELLED)
    assert event.actor_id == operator.user.pk and event.details["action"] == "interrupt"
    assert _cancel_many(operator, {"thread_id": second_thread, "run_ids": [other]}, "rollback").status_code == 204
    assert AuditEvent.objects.get(subject_id=other, action=AuditAction.RUN_CANCELLED).details["action"] == "rollback"


@pytest.mark.parametrize("status", ["pending", "all"])
def test_every_pending_run_one_may_cancel_is_cancelled_by_status(operator, status):
    made = _queued(operator, 3)
    assert _cancel_many(operator, {"status": status}).status_code == 204
    assert [_status(run) for _, run in made] == [RunStatus.CANCELLED] * 3


def test_by_status_an_operator_cancels_only_its_own_graphs_runs(operator, loan_operator):
    """``three_steps`` runs are not the loan operator's to see: "all" is every run it may cancel, not every run."""
    [(thread, run)] = _queued(operator, 1)
    assert _cancel_many(loan_operator, {"status": "all"}).status_code == 204
    assert _status(run) == RunStatus.QUEUED
    assert error_of(_cancel_many(loan_operator, {"thread_id": thread, "run_ids": [run]}), 404)["field"] == "thread_id"
    assert _status(run) == RunStatus.QUEUED


def test_running_leaves_pending_runs_alone(operator):
    [(_, run)] = _queued(operator, 1)
    assert _cancel_many(operator, {"status": "running"}).status_code == 204
    assert _status(run) == RunStatus.QUEUED


def test_one_bad_run_among_those_named_cancels_none(operator):
    [(thread, run)] = _queued(operator, 1)
    unknown = "00000000-0000-0000-0000-000000000000"
    error = error_of(_cancel_many(operator, {"thread_id": thread, "run_ids": [run, unknown]}), 404)
    assert error["field"] == "run_ids[1]"
    ended = Run.objects.create(thread_id=thread, kind="start", status=RunStatus.SUCCEEDED)
    error = error_of(_cancel_many(operator, {"thread_id": thread, "run_ids": [run, str(ended.pk)]}), 409)
    assert error["field"] == "run_ids[1]" and "nothing was cancelled" in error["message"]
    assert _status(run) == RunStatus.QUEUED


def test_a_reviewer_may_not_cancel_and_nothing_is(operator, reviewer):
    [(thread, run)] = _queued(operator, 1)
    error_of(_cancel_many(reviewer, {"thread_id": thread, "run_ids": [run]}), 403)
    error_of(_cancel_many(reviewer, {"status": "all"}), 403)
    assert _status(run) == RunStatus.QUEUED


@pytest.mark.parametrize(
    "body,action,field",
    [
        ({"status": "pending", "thread_id": "00000000-0000-0000-0000-000000000000"}, "", "status"),
        ({"status": "done"}, "", "status"),
        ({"thread_id": "00000000-0000-0000-0000-000000000000"}, "", "run_ids"),
        ({"run_ids": ["00000000-0000-0000-0000-000000000000"]}, "", "thread_id"),
        ({"thread_id": "00000000-0000-0000-0000-000000000000", "run_ids": ["x"]}, "", "run_ids[0]"),
        ({"status": "pending"}, "stop", "action"),
        ({}, "", "thread_id"),
    ],
)
def test_a_malformed_request_names_the_field(operator, body, action, field):
    assert error_of(_cancel_many(operator, body, action), 422)["field"] == field
