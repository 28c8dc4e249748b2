"""A run's heartbeat renews its lease from its first due renewal on, and only then takes a thread.

In-process, against the real database: a claimed run, its ``Heartbeat``, and the lease row it renews.
The lease is shortened so that renewals come a fifth of a second apart; every wait is on a condition.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db.models.functions import Now
from django.test.utils import override_settings

from runtime.fencing import LeaseLost
from runtime.heartbeat import Heartbeat
from runtime.models import Run, RunKind, ThreadStatus
from runtime.models import Thread as GraphThread
from runtime.runs import run_claim
from tests.conftest import scaled, wait_for

pytestmark = pytest.mark.usefixtures("live_db")


def _claimed(worker: str = "host:1:a") -> Run:
    thread = GraphThread.objects.create(graph="zombie_pay", status=ThreadStatus.BUSY)
    run = Run.objects.create(thread=thread, kind=RunKind.START, input={})
    claimed = run_claim(run_id=str(run.id), worker=worker)
    assert claimed is not None
    return claimed


def _expiry(run: Run):
    return Run.objects.values_list("lease_expires_at", flat=True).get(pk=run.pk)


def _lease_threads_started(monkeypatch) -> list[str]:
    names: list[str] = []
    start = threading.Thread.start

    def recorded(self):
        if self.name.startswith("lease-") and self.name != "lease-starter":
            names.append(self.name)
        return start(self)

    monkeypatch.setattr(threading.Thread, "start", recorded)
    return names


@override_settings(GATEHOUSE_LEASE_SECONDS=3600)  # its first renewal due in 20 minutes: a busy machine cannot reach it
def test_a_run_that_ends_before_its_first_renewal_takes_no_thread_and_renews_nothing(monkeypatch):
    run = _claimed()
    before = _expiry(run)
    started = _lease_threads_started(monkeypatch)
    beat = Heartbeat(run)
    beat.start()
    beat.stop()
    assert started == []
    assert _expiry(run) == before


@override_settings(GATEHOUSE_LEASE_SECONDS=0.6)
def test_a_run_that_outlives_its_first_renewal_renews_its_lease_until_it_stops(monkeypatch):
    run = _claimed()
    started = _lease_threads_started(monkeypatch)
    beat = Heartbeat(run)
    beat.start()
    try:
        first = _expiry(run)
        second = wait_for(lambda: (e := _expiry(run)) > first and e, what="a first renewal")
        wait_for(lambda: _expiry(run) > second, what="a second renewal")
    finally:
        beat.stop()
    assert started == [f"lease-{run.id}"]  # one thread for the run, however many renewals
    assert beat._thread is not None and not beat._thread.is_alive()  # stopped: nothing renews after
    beat.check()  # nothing was lost


@override_settings(GATEHOUSE_LEASE_SECONDS=0.6)
def test_a_renewal_refused_because_another_worker_took_the_run_stops_the_heartbeat_and_is_raised():
    stale = _claimed()
    beat = Heartbeat(stale)
    beat.start()
    try:
        Run.objects.filter(pk=stale.pk).update(lease_expires_at=Now() - timedelta(seconds=1))
        taken = run_claim(run_id=str(stale.id), worker="host:2:b")
        assert taken is not None and taken.fence == stale.fence + 1
        wait_for(lambda: beat.lost is not None, what="the refused renewal")
        with pytest.raises(LeaseLost):
            beat.check()
        assert beat._thread is not None
        beat._thread.join(timeout=scaled(5))
        assert not beat._thread.is_alive()
        assert Run.objects.values_list("lease_owner", flat=True).get(pk=stale.pk) == "host:2:b"
    finally:
        beat.stop()


@override_settings(GATEHOUSE_LEASE_SECONDS=0.6)
def test_heartbeats_waiting_at_the_same_time_each_begin_when_due_and_a_stopped_one_never_does(monkeypatch):
    started = _lease_threads_started(monkeypatch)
    kept, dropped = _claimed(f"host:1:{uuid.uuid4().hex[:6]}"), _claimed(f"host:1:{uuid.uuid4().hex[:6]}")
    kept_beat = Heartbeat(kept)  # due in a fifth of a second
    with override_settings(GATEHOUSE_LEASE_SECONDS=3600):  # due in 20 minutes: stopped long before
        dropped_beat = Heartbeat(dropped)
    dropped_before = _expiry(dropped)
    kept_beat.start()
    dropped_beat.start()
    dropped_beat.stop()
    try:
        first = _expiry(kept)
        wait_for(lambda: _expiry(kept) > first, what="the kept run's renewal")
    finally:
        kept_beat.stop()
    assert started == [f"lease-{kept.id}"]
    assert _expiry(dropped) == dropped_before
