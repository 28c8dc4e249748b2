"""The Temporal example's activity, run by temporalio's ActivityEnvironment against a real Gatehouse.

No Temporal server runs here: ``WorkflowEnvironment.start_local()`` and
``start_time_skipping()`` download a server binary at run time, and the
temporalio wheel bundles none. The activity is where the protocol lives
(idempotent create keyed by workflow and activity id, heartbeats, the
long-poll, the signature check); ActivityEnvironment is temporalio's own
harness for it (heartbeats, cancellation, activity info), not a fake of ours.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
from temporalio.exceptions import CancelledError
from temporalio.testing import ActivityEnvironment

from approvals.models import ExternalTask
from examples.temporal import approval_workflow as example
from tests.conftest import api_decide, scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


@pytest.fixture
def configured(gatehouse_url, engine, source, monkeypatch):
    monkeypatch.setattr(example, "settings", example.Settings(gatehouse_url, engine.token, source))
    monkeypatch.setattr(example, "POLL_SECONDS", 1.0)


def _environment(workflow_id: str) -> tuple[ActivityEnvironment, list[Any]]:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=workflow_id, activity_id="1")
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    return env, beats


def test_the_activity_waits_for_the_signed_decision(configured, source, personas):
    env, beats = _environment("wire-42")
    request = example.ApprovalRequest(title="Release wire 42", payload={"id": "42", "beneficiary": {"iban": "DE89"}})
    results: list[Any] = []
    runner = threading.Thread(target=lambda: results.append(env.run(example.gatehouse_decision, request)))
    runner.start()
    external = wait_for(
        lambda: ExternalTask.objects.filter(source__name=source, key="wire-42:1").first(), what="the task to open"
    )
    wait_for(lambda: len(beats) >= 2, what="the activity to heartbeat between long-polls")
    decided = api_decide(personas["reviewer"], external.task_id, reason="checked")
    assert decided.status_code == 201
    runner.join(scaled(30))
    assert results and results[0]["decision"] == "approve"
    assert example.outcome(results[0]) == "released"
    assert results[0]["signers"] == [personas["reviewer"].username]
    assert beats[0] == (str(external.task_id),)

    # A retried attempt (a worker died after the decision) gets the same decision, not a new task.
    again = _environment("wire-42")[0].run(example.gatehouse_decision, request)
    assert again == results[0]
    assert ExternalTask.objects.filter(source__name=source, key="wire-42:1").count() == 1


def test_a_cancelled_activity_stops_waiting(configured):
    env, beats = _environment("wire-43")
    request = example.ApprovalRequest(title="Release wire 43", payload={})
    errors: list[BaseException] = []

    def run() -> None:
        try:
            env.run(example.gatehouse_decision, request)
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    wait_for(lambda: beats, what="the first heartbeat")
    env.cancel()
    runner.join(scaled(30))
    assert not runner.is_alive() and errors and isinstance(errors[0], CancelledError)
