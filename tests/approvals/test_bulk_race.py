"""A bulk and a single decision on the same task at once: exactly one decides, the other is told why.

The race is controlled, not timed: one side holds the task's row lock (a single decision
not yet committed, or the bulk stopped inside its step by a decision guard) until the
database shows the other side waiting for that lock; only then is the first released.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from approvals import bulk, services
from approvals.errors import Conflict
from approvals.models import ApprovalTask, Decision
from approvals.payloads import DecisionRequest
from tests.approvals.races import Side
from tests.conftest import scaled
from tests.factories import task_make
from tests.fake_resumes import fake_resumes_closed  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("live_db", "fake_resumes_closed")


@pytest.fixture(autouse=True)
def no_worker_dispatch(monkeypatch):
    monkeypatch.setattr(bulk, "bulk_dispatch", lambda *, bulk_id: None)


def _fresh() -> services.Signer:
    return services.Signer(authenticated_at=timezone.now())


def _tasks(tag: str) -> tuple[ApprovalTask, ApprovalTask]:
    return task_make(title=f"{tag} contested", metadata={"case": tag}), task_make(title=f"{tag} free")


def test_a_task_decided_by_someone_else_while_the_bulk_waits_is_skipped_not_decided_twice(personas):
    approver, approver2 = personas["approver"].user, personas["approver2"].user
    contested, free = _tasks(f"RACE-{uuid.uuid4().hex[:6]}")
    started = bulk.bulk_decide(
        actor=approver, outcome="approve", reason="", task_ids=[str(contested.pk), str(free.pk)], signer=_fresh()
    )
    decided, release = threading.Event(), threading.Event()

    def single() -> Any:
        with transaction.atomic():  # the single decision holds the task's lock until release
            decision = services.task_decide(
                actor=approver2, task_id=contested.pk, request=DecisionRequest(outcome="approve"), signer=_fresh()
            )
            decided.set()
            assert release.wait(scaled(30))
        return decision

    first = Side(single)
    first.start()
    assert decided.wait(scaled(30)), first.error
    second = Side(lambda: bulk.bulk_run(bulk_id=started.pk))
    second.start()
    second.queued("the bulk to wait for the task's lock")
    release.set()
    first.join(scaled(30))
    second.join(scaled(30))
    assert first.error is None and second.error is None, (first.error, second.error)

    assert list(Decision.objects.filter(task=contested).values_list("actor", flat=True)) == [approver2.pk]
    done = second.result
    assert [s["task"] for s in done.skipped] == [str(contested.pk)]
    assert done.skipped[0]["code"] == bulk.SkipCode.ALREADY_DECIDED
    assert [d["task"] for d in done.decided] == [str(free.pk)]


def test_a_single_decision_arriving_while_the_bulk_decides_that_task_gets_a_conflict(personas, monkeypatch):
    approver, approver2 = personas["approver"].user, personas["approver2"].user
    contested, free = _tasks(f"RACE-{uuid.uuid4().hex[:6]}")
    started = bulk.bulk_decide(
        actor=approver, outcome="approve", reason="", task_ids=[str(contested.pk), str(free.pk)], signer=_fresh()
    )
    inside, release = threading.Event(), threading.Event()

    decision_grounds = services.decision_grounds

    def hold(task: ApprovalTask) -> Any:
        # The decision's grounds are read under the task's row lock: the bulk stops here, holding it.
        # (The single decision never gets here: it finds the task decided once it has the lock.)
        if task.pk == contested.pk:
            inside.set()
            assert release.wait(scaled(30))
        return decision_grounds(task)

    monkeypatch.setattr(services, "decision_grounds", hold)
    first = Side(lambda: bulk.bulk_run(bulk_id=started.pk))
    first.start()
    assert inside.wait(scaled(30)), first.error

    def single() -> Any:
        return services.task_decide(
            actor=approver2, task_id=contested.pk, request=DecisionRequest(outcome="approve"), signer=_fresh()
        )

    second = Side(single)
    second.start()
    second.queued("the single decision to wait for the lock")
    release.set()
    first.join(scaled(30))
    second.join(scaled(30))
    assert first.error is None, first.error
    assert isinstance(second.error, Conflict) and "decided" in second.error.message

    assert list(Decision.objects.filter(task=contested).values_list("actor", flat=True)) == [approver.pk]
    assert [d["task"] for d in first.result.decided] == [str(contested.pk), str(free.pk)]
