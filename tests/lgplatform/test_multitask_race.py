"""Two run creates with ``multitask_strategy="interrupt"`` sent at once (a chat UI that sends twice): LangGraph
Server takes both, each interrupting the one before. Gatehouse answered the second 409, about the run the first
had cancelled, which its client never named. The race is forced, not hoped for: the first create is held
after its cancel, before its commit, until the second is seen waiting in PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lgplatform import services as platform
from runtime.models import Run, RunStatus
from tests.approvals.races import Side
from tests.conftest import loan_input, scaled

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_two_creates_at_once_each_interrupt_the_run_before(operator, monkeypatch, dispatched, strategy):
    # dispatched: no worker takes them, the runs stay queued (cancelled at the test's end)
    thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    body: dict[str, Any] = {"assistant_id": "loan_approval", "input": loan_input()}
    first = operator.client.post(f"/lg/threads/{thread}/runs", body)
    assert first.status_code == 200, first.content

    held, release = threading.Event(), threading.Event()
    mine = threading.local()
    start = platform._run_start

    def start_held(*args: Any, **kwargs: Any) -> Run:
        if getattr(mine, "hold", False):  # the first create: its cancel done, its transaction still open
            held.set()
            assert release.wait(scaled(60))
        return start(*args, **kwargs)

    monkeypatch.setattr(platform, "_run_start", start_held)

    def create(hold: bool) -> Any:
        mine.hold = hold
        return operator.client.post(f"/lg/threads/{thread}/runs", {**body, "multitask_strategy": strategy})

    a = Side(lambda: create(True))
    a.start()
    assert held.wait(scaled(60))
    b = Side(lambda: create(False))
    b.start()
    b.queued("the second create waiting for the first")
    release.set()
    answers = {"a": a.outcome(), "b": b.outcome()}

    assert answers["a"].status_code == 200, answers["a"].content
    assert answers["b"].status_code == 200, answers["b"].content
    a_run, b_run = answers["a"].json()["run_id"], answers["b"].json()["run_id"]
    statuses = dict(Run.objects.filter(thread_id=thread).values_list("id", "status"))
    assert {str(k): v for k, v in statuses.items()} == {
        first.json()["run_id"]: RunStatus.CANCELLED,
        a_run: RunStatus.CANCELLED,  # interrupted by the second create, as LangGraph Server does
        b_run: RunStatus.QUEUED,
    }
