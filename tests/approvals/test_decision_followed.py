"""Which signed decision an executed effect followed (``follows_decision`` in its audit event).

``approvals.intent.decision_followed`` binds an effect to the last carried decision of the newest
gate decided before it that proposed an action of the effect's name; the effect's audit event
records it, and an auditor reads the trail by it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.intent import decision_followed
from approvals.models import Decision
from runtime.models import Effect
from tests.approvals.handoffs import person
from tests.factories import decision_make, task_make, triggers_off

pytestmark = pytest.mark.usefixtures("live_db")


def _effect(thread_id, name: str = "disburse", *, at=None) -> Effect:
    effect = Effect.objects.create(
        key=f"test:{thread_id}:{name}:{timezone.now().timestamp()}", name=name, thread_id=thread_id, args={}
    )
    if at is not None:
        Effect.objects.filter(pk=effect.pk).update(created_at=at)
        effect.refresh_from_db()
    return effect


def test_an_effect_follows_the_carried_decision_of_the_gate_that_proposed_it():
    task = task_make()  # its gate proposes "disburse"
    decision = decision_make(task, person())
    assert decision.run_id is not None  # carried by the resume run
    assert decision_followed(effect=_effect(task.thread_id)) == str(decision.pk)


def test_an_effect_of_another_name_or_before_the_decision_follows_nothing():
    task = task_make()
    decision = decision_make(task, person())
    assert decision_followed(effect=_effect(task.thread_id, "notify")) is None
    before = _effect(task.thread_id, at=decision.created_at - timedelta(seconds=5))
    assert decision_followed(effect=before) is None


def test_a_decision_no_run_carried_is_not_followed():
    task = task_make()
    decision = decision_make(task, person())
    with triggers_off():  # the run a decision was carried by is set once (migration 0035)
        Decision.objects.filter(pk=decision.pk).update(run=None)
    assert decision_followed(effect=_effect(task.thread_id)) is None


def test_a_plain_interrupt_proposes_no_action():
    task = task_make(payload={"question": "ok to disburse?", "proposed_action": {"name": "disburse", "args": {}}})
    decision_make(task, person(), "respond", resume="yes")
    assert decision_followed(effect=_effect(task.thread_id)) is None


def test_an_effect_outside_a_thread_follows_nothing():
    effect = Effect.objects.create(key=f"test:none:{timezone.now().timestamp()}", name="disburse", args={})
    assert decision_followed(effect=effect) is None
