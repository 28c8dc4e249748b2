"""The worker's embedded beat always stops with the worker (``console.celery.beat_stop_ensure``).

A beat process that missed its SIGTERM (it arrived while the process was starting, before it reset the
handlers it inherited) ran on, and the worker waited at exit to join it. Here a child that ignores SIGTERM
stands for it: the worker's shutdown handler must still leave no beat behind.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from types import SimpleNamespace
from typing import Any

from console import celery as worker_app
from tests.conftest import scaled, wait_for


def _beat_that_missed_its_sigterm(ready: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    while True:
        time.sleep(1)


def _beat_that_stops(ready: Any) -> None:
    ready.set()
    while True:
        time.sleep(1)


def _started(target: Any) -> multiprocessing.Process:
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    process = context.Process(target=target, args=(ready,), daemon=True)
    process.start()
    assert ready.wait(scaled(30)), "the child did not start"
    return process


def test_a_beat_that_missed_its_sigterm_is_killed_at_the_workers_shutdown(monkeypatch):
    monkeypatch.setattr(worker_app, "BEAT_STOP_SECONDS", 0.2)  # the handler's own waits, not the test's
    beat = _started(_beat_that_missed_its_sigterm)
    try:
        os.kill(beat.pid, signal.SIGTERM)  # Celery's one request: lost
        worker_app.beat_stop_ensure(sender=SimpleNamespace(beat=beat))
        assert not beat.is_alive()
        assert beat.exitcode == -signal.SIGKILL, "asked again (ignored), then killed"
    finally:
        if beat.is_alive():
            beat.kill()  # never leave a child that ignores SIGTERM: the interpreter's exit would wait for it


def test_a_beat_that_stops_when_asked_again_is_not_killed(monkeypatch):
    monkeypatch.setattr(worker_app, "BEAT_STOP_SECONDS", 0.2)
    beat = _started(_beat_that_stops)
    worker_app.beat_stop_ensure(sender=SimpleNamespace(beat=beat))
    wait_for(lambda: not beat.is_alive(), what="the beat to stop")
    assert beat.exitcode == -signal.SIGTERM


def test_celerys_own_beat_process_is_one_the_handler_acts_on():
    """Celery embeds beat as billiard's Process, which has no kill(): the handler must not take it for none."""
    from celery.beat import _Process

    assert all(hasattr(_Process, m) for m in ("join", "is_alive", "terminate", "pid"))


def test_a_worker_without_a_beat_process_is_left_alone():
    worker_app.beat_stop_ensure(sender=SimpleNamespace(beat=None))
    worker_app.beat_stop_ensure(sender=object())
