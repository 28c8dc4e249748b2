"""A run's heartbeat: its lease renewed in the background, so a long node keeps its claim.

A claim holds the run for ``GATEHOUSE_LEASE_SECONDS``; its heartbeat renews the lease every third
of that, on a thread of its own, so that one renewal held up (a lock, a slow database) delays no
other run's. Most runs finish long before their first renewal is due, and starting and joining a
thread for each of them was ~0.4 ms of a run's wall time and ~0.1 ms of its CPU (round 23 of
docs/performance.md). So a run's thread starts only when its first renewal is due: until then the
run waits in its process's ``_Starter``, one thread that starts heartbeats and touches nothing else.

A renewal refused because the fence moved on (another claim took the run, or an operator
cancelled it) stops the heartbeat and is raised by ``check()`` at the run's next step.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection

from runtime.models import Run
from runtime.retry import is_transient
from runtime.runs import LeaseLost, lease_renew

log = logging.getLogger(__name__)


def renewal_interval() -> float:
    return max(float(settings.GATEHOUSE_LEASE_SECONDS) / 3, 0.1)


class Heartbeat:
    """Renews ``run``'s lease from its first due renewal until ``stop()``."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.lost: LeaseLost | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._interval = renewal_interval()

    def start(self) -> None:
        _starter().schedule(self, time.monotonic() + self._interval)

    def stop(self) -> None:
        """No renewal starts after this returns (one under way is waited for, up to 5 s)."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        _starter().cancel(self)
        if thread is not None:
            thread.join(timeout=5)

    def check(self) -> None:
        if self.lost is not None:
            raise self.lost

    def begin(self) -> None:
        """The first renewal is due: renew from now on, on the run's own thread (by ``_Starter``)."""
        with self._lock:
            if self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._loop, name=f"lease-{self.run.id}", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    lease_renew(run=self.run)
                except LeaseLost as exc:
                    log.warning("run %s: heartbeat refused, the lease is lost (fence %s)", self.run.id, self.run.fence)
                    self.lost = exc
                    return
                except Exception as exc:
                    if not is_transient(exc):
                        log.exception("lease renewal for run %s failed; will retry", self.run.id)
                    else:  # the database is down: one line, not a traceback every interval
                        log.warning(
                            "lease renewal for run %s failed, the database is unavailable: %s", self.run.id, exc
                        )
                    close_old_connections()
                if self._stop.wait(self._interval):
                    return
        finally:
            connection.close()


class _Starter:
    """Starts each waiting heartbeat when its first renewal is due; never touches the database."""

    def __init__(self) -> None:
        self._due: dict[Heartbeat, float] = {}  # at most the process's runs in progress
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="lease-starter", daemon=True)
        self._thread.start()

    def schedule(self, beat: Heartbeat, at: float) -> None:
        with self._changed:
            self._due[beat] = at
            self._changed.notify()

    def cancel(self, beat: Heartbeat) -> None:
        with self._changed:
            self._due.pop(beat, None)  # the loop wakes at the earliest due time and looks again

    def _loop(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                due = [beat for beat, at in self._due.items() if at <= now]
                for beat in due:
                    del self._due[beat]
                if not due:
                    self._changed.wait(min(self._due.values()) - now if self._due else None)
                    continue
            for beat in due:
                try:
                    beat.begin()
                except Exception:  # a thread that could not start: its run's lease lapses, as a dead worker's
                    log.exception("could not start the heartbeat of run %s", beat.run.id)


_starters: dict[int, _Starter] = {}  # by process: a prefork pool's child starts its own thread
_starters_lock = threading.Lock()


def _starter() -> _Starter:
    pid = os.getpid()
    starter = _starters.get(pid)
    if starter is None:
        with _starters_lock:
            starter = _starters.get(pid)
            if starter is None:
                starter = _starters[pid] = _Starter()
    return starter
