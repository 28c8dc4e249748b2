"""The sweeper's guard conditions, one by one: what it re-sends, what it leaves alone, what it dead-letters.

In-process: ``run_dispatch`` is replaced by a recorder, so nothing reaches
Celery and the test sees exactly which runs a sweep would send. The database
holds other tests' runs too, so each test looks only at its own. And the session's
worker, once a test has started it, sweeps the same database from its beat every
0.5 s: a run made due outside a transaction could be re-sent by that sweeper
before the test's own sweep saw it, so tests that expect a run sent make it due
and sweep in one transaction (``_sweep``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.db.models.functions import Now
from django.test.utils import override_settings
from django.utils import timezone

from runtime import runs
from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.runs import _run_dead_letter, run_claim, run_fail, run_retry_due, runs_sweep

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    dispatched: list[Any] = []
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: dispatched.append(run_id))
    return dispatched


def _run(**fields: Any) -> Run:
    thread = Thread.objects.create(graph="zombie_pay", status=ThreadStatus.BUSY)
    return Run.objects.create(thread=thread, kind=RunKind.START, input={}, **fields)


def _ago(seconds: float) -> Any:
    return Now() - timedelta(seconds=seconds)


def _set(run: Run, **fields: Any) -> None:
    Run.objects.filter(pk=run.pk).update(**fields)


def _sweep(*due: tuple[Run, dict[str, Any]]) -> int:
    """Set ``due``'s fields and sweep in one transaction: no other sweeper sees those runs due before this one."""
    with transaction.atomic():
        for run, fields in due:
            _set(run, **fields)
        return runs_sweep()


def test_it_resends_a_lapsed_run_once_its_backoff_passed_and_counts_what_it_sent(sent):
    run = _run()
    claimed = run_claim(run_id=str(run.id), worker="host:1:a")
    assert claimed is not None
    count = _sweep((run, {"lease_expires_at": _ago(600)}))
    assert run.id in sent
    assert count == len(sent)


@override_settings(GATEHOUSE_RETRY_BACKOFF_SECONDS=60)
def test_it_waits_out_the_backoff_of_a_lapsed_run(sent):
    run = _run()
    assert run_claim(run_id=str(run.id), worker="host:1:a") is not None
    _set(run, lease_expires_at=_ago(1))
    runs_sweep()
    assert run.id not in sent
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING


def test_it_leaves_a_live_lease_alone(sent):
    run = _run()
    assert run_claim(run_id=str(run.id), worker="host:1:a") is not None
    runs_sweep()
    assert run.id not in sent


@override_settings(GATEHOUSE_MAX_RUN_ATTEMPTS=2)
def test_a_lapsed_run_with_attempts_left_is_resent_and_one_without_is_dead_lettered(sent):
    retry, spent = _run(), _run()
    for run in (retry, spent):
        assert run_claim(run_id=str(run.id), worker="host:1:a") is not None
    _sweep(
        (retry, {"lease_expires_at": _ago(600), "attempts": 1}), (spent, {"lease_expires_at": _ago(600), "attempts": 2})
    )
    assert retry.id in sent and spent.id not in sent
    assert Run.objects.get(pk=retry.pk).status == RunStatus.RUNNING
    dead = Run.objects.get(pk=spent.pk)
    assert dead.status == RunStatus.FAILED and "gave up after 2 attempts" in dead.error


@override_settings(GATEHOUSE_REDISPATCH_AFTER_SECONDS=30)
def test_it_resends_a_queued_run_whose_dispatch_was_lost_and_not_one_just_sent(sent):
    never_sent_old, never_sent_new = _run(), _run()
    sent_old, sent_new = _run(), _run()
    _sweep(
        (never_sent_old, {"created_at": _ago(600)}),
        (sent_old, {"created_at": _ago(600), "dispatched_at": _ago(600)}),
        (sent_new, {"created_at": _ago(600), "dispatched_at": Now()}),
    )
    assert never_sent_old.id in sent and sent_old.id in sent
    assert never_sent_new.id not in sent and sent_new.id not in sent


@override_settings(GATEHOUSE_REDISPATCH_AFTER_SECONDS=30)
@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.INTERRUPTED])
def test_it_never_resends_a_finished_run(sent, status):
    run, claimed_before_its_dispatch_was_stamped = _run(), _run()
    _set(run, status=status, created_at=_ago(600), dispatched_at=_ago(600), lease_expires_at=_ago(600))
    _set(claimed_before_its_dispatch_was_stamped, status=status, created_at=_ago(600), lease_expires_at=_ago(600))
    runs_sweep()
    assert run.id not in sent and claimed_before_its_dispatch_was_stamped.id not in sent


def test_the_retry_backoff_counts_from_the_lapse():
    run = Run(attempts=1, lease_expires_at=None)
    now = timezone.now()
    assert run_retry_due(run=run, now=now)  # handed back with no lease: due at once
    with override_settings(GATEHOUSE_RETRY_BACKOFF_SECONDS=10):
        run.lease_expires_at = now - timedelta(seconds=5)
        assert not run_retry_due(run=run, now=now)
        run.lease_expires_at = now - timedelta(seconds=10)
        assert run_retry_due(run=run, now=now)  # exactly the backoff: due
        run.lease_expires_at = now - timedelta(seconds=11)
        assert run_retry_due(run=run, now=now)


def test_the_dead_letter_leaves_a_run_that_was_claimed_again_meanwhile():
    run = _run()
    assert run_claim(run_id=str(run.id), worker="host:1:a") is not None  # a live lease
    _run_dead_letter(run_id=run.id)
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING


def test_the_dead_letter_leaves_a_run_that_is_no_longer_running():
    run = _run()
    _set(run, status=RunStatus.SUCCEEDED, lease_expires_at=_ago(600))
    _run_dead_letter(run_id=run.id)
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED


def test_the_dead_letter_fails_a_lapsed_running_run():
    run = _run()
    assert run_claim(run_id=str(run.id), worker="host:1:a") is not None
    _set(run, lease_expires_at=_ago(600))
    _run_dead_letter(run_id=run.id)
    failed = Run.objects.select_related("thread").get(pk=run.pk)
    assert failed.status == RunStatus.FAILED and failed.thread.status == ThreadStatus.FAILED


def _failure_actors(run: Run) -> list[tuple[Any, str]]:
    from approvals.models import AuditAction, AuditEvent

    failed = AuditEvent.objects.filter(thread_id=run.thread_id, action=AuditAction.RUN_FAILED)
    return list(failed.values_list("actor_id", "actor_label"))


def test_a_dead_letter_is_audited_as_the_runtimes_decision_not_the_lost_workers():
    # The lease still names the worker that was lost; it decided nothing.
    run = _run()
    assert run_claim(run_id=str(run.id), worker="host:1:lost") is not None
    _set(run, lease_expires_at=_ago(600))
    _run_dead_letter(run_id=run.id)  # the sweeper's, once the attempts are spent
    assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED
    assert _failure_actors(run) == [(None, "runtime")]


@override_settings(GATEHOUSE_MAX_RUN_ATTEMPTS=1)
def test_a_claim_past_the_last_attempt_audits_the_runtimes_decision_not_the_lost_workers():
    run = _run()
    assert run_claim(run_id=str(run.id), worker="host:1:lost") is not None
    _set(run, lease_expires_at=_ago(600))
    assert run_claim(run_id=str(run.id), worker="host:2:b") is None
    assert _failure_actors(run) == [(None, "runtime")]


def test_a_worker_failing_the_run_it_holds_is_audited_as_that_worker():
    run = _run()
    claimed = run_claim(run_id=str(run.id), worker="host:1:a")
    assert claimed is not None
    run_fail(run=claimed, error="ValueError: the graph raised")
    assert _failure_actors(run) == [(None, "worker:host:1:a")]


# --- a busy worker is not a lost dispatch: no re-dispatch storm ---------------------------------


@override_settings(GATEHOUSE_REDISPATCH_AFTER_SECONDS=3)
def test_a_queued_run_is_resent_at_doubling_intervals_as_it_waits(sent):
    # Waited 60 s before its last dispatch: it is re-sent only 60 s after that dispatch, not every 3 s.
    run = _run()
    _sweep((run, {"created_at": _ago(100), "dispatched_at": _ago(40)}))
    assert run.id not in sent
    _sweep((run, {"created_at": _ago(130), "dispatched_at": _ago(70)}))
    assert run.id in sent


@override_settings(GATEHOUSE_REDISPATCH_AFTER_SECONDS=3)
def test_a_lost_dispatch_is_still_resent_after_the_delay(sent):
    run = _run()
    _sweep((run, {"created_at": _ago(10), "dispatched_at": _ago(9)}))
    assert run.id in sent


@override_settings(GATEHOUSE_REDISPATCH_AFTER_SECONDS=3)
def test_overlapping_sweeps_resend_a_run_once(sent):
    # Two sweeps read the same candidate before either sent it: the conditional UPDATE picks one.
    # Made due and claimed in one transaction: the session worker's sweeper, which runs every 0.5 s, could
    # otherwise re-send the run between the two (a loaded CI machine saw the first claim lose to it).
    run = _run()
    with transaction.atomic():
        _set(run, created_at=_ago(10), dispatched_at=_ago(9))
        first, second = Run.objects.get(pk=run.pk), Run.objects.get(pk=run.pk)
        assert runs._redispatch_claim(first, timezone.now()) is True
    assert runs._redispatch_claim(second, timezone.now()) is False


@override_settings(GATEHOUSE_REDISPATCH_AFTER_SECONDS=3)
def test_a_lapsed_run_resent_after_its_lease_ended_is_given_time_to_be_claimed(sent):
    run = _run()
    assert run_claim(run_id=str(run.id), worker="host:1:a") is not None
    _sweep((run, {"lease_expires_at": _ago(600), "dispatched_at": _ago(1)}))
    assert run.id not in sent
    _sweep((run, {"dispatched_at": _ago(5)}))
    assert run.id in sent


# --- a run whose worker is lost again and again: re-sent each time, then dead-lettered ----------


def worker_lost_each_time(sent: list[Any]) -> list[tuple[bool, str]]:
    """A worker claims a run and is lost (its lease lapses), then a sweep; again while the sweep re-sends it.

    Each round: whether the sweep re-sent the run, and the run's status after it. The run starts
    stamped as dispatched by the process (as ``run_enqueue`` does); every later stamp is the sweeper's
    own, which its next compare-and-set must match. Also run on SQLite (tests/runtime/test_sweeper_sqlite.py).
    """
    run = _run(dispatched_at=timezone.now())
    rounds: list[tuple[bool, str]] = []
    with override_settings(GATEHOUSE_REDISPATCH_AFTER_SECONDS=0, GATEHOUSE_RETRY_BACKOFF_SECONDS=0):
        resent = True
        while resent:
            assert run_claim(run_id=str(run.id), worker=f"host:{len(rounds)}:lost") is not None
            sent.clear()
            _sweep((run, {"lease_expires_at": timezone.now() - timedelta(seconds=600)}))
            resent = run.id in sent
            rounds.append((resent, Run.objects.get(pk=run.pk).status))
    return rounds


@override_settings(GATEHOUSE_MAX_RUN_ATTEMPTS=4)
def test_a_run_whose_worker_is_lost_three_times_is_resent_each_time_then_dead_lettered(sent):
    running, failed = RunStatus.RUNNING.value, RunStatus.FAILED.value
    assert worker_lost_each_time(sent) == [(True, running)] * 3 + [(False, failed)]
