"""Fault-injection fixtures: dedicated worker processes that tests may kill, stop and restart.

The faults tests never touch the shared session worker's process: it is stopped
for the duration of the package (both would consume the same queue, and a
fault test must know which process holds a run) and restarted afterwards if
it was running. Every worker started here is stopped in a finally.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings

from tests.conftest import WorkerProcess, scaled, worker_env

FAULTS_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the fault tests after everything else: they stop and restart workers and kill connections."""
    faults = [item for item in items if FAULTS_DIR in Path(str(item.fspath)).parents]
    others = [item for item in items if item not in faults]
    items[:] = others + faults


class FaultWorker(WorkerProcess):
    """A worker a test may SIGKILL, SIGTERM or let die on its own; its whole process group is reaped."""

    def reap(self) -> None:
        """Kill what is left of the process group (an embedded beat outlives a self-killed worker)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=scaled(10))

    def terminate(self) -> None:
        """SIGTERM to the process group, as a supervisor (systemd, docker stop) sends it."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)

    def wait_exit(self, timeout: float) -> float:
        """Seconds until the worker process exited; fail (after reaping) past ``timeout``."""
        assert self.proc is not None
        started = time.monotonic()
        deadline = started + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.reap()
                raise AssertionError(f"worker did not exit within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)
        return time.monotonic() - started

    def logged(self, text: str) -> bool:
        """Has the worker written ``text`` to its log?"""
        try:
            return text in self.log_path.read_text(errors="replace")
        except OSError:
            return False

    def restart(self) -> None:
        self.reap()
        self.start()


@pytest.fixture(scope="package")
def session_worker_paused(worker: WorkerProcess) -> Iterator[None]:
    was_alive = worker.alive
    worker.stop()
    try:
        yield
    finally:
        if was_alive and not worker.alive:
            worker.start()


WorkerFactory = Callable[..., FaultWorker]


@pytest.fixture
def fault_worker(
    session_worker_paused: None, bank: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerFactory]:
    """``fault_worker(start=True, **env)`` → a dedicated worker process with extra environment."""
    started: list[FaultWorker] = []

    def make(*, start: bool = True, **env: str) -> FaultWorker:
        process = FaultWorker({**worker_env(bank), **env}, tmp_path_factory.mktemp("fault-worker"))
        started.append(process)
        if start:
            process.start()
        return process

    try:
        yield make
    finally:
        for process in started:
            process.stop()
            process.reap()


def app_name() -> str:
    """A libpq application_name (PGAPPNAME) marking one worker's connections, Django's and the pool's."""
    return f"gh-fault-{uuid.uuid4().hex[:8]}"


def broker_client() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5)


def queue_flush() -> int:
    """Delete the test queue's keys in Redis: what a broker restart without persistence does to them."""
    client = broker_client()
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    try:
        keys = list(itertools.islice(client.scan_iter(match=f"{queue}*", count=100), 100))
        return int(client.delete(*keys)) if keys else 0
    finally:
        client.close()


def queue_length() -> int:
    client = broker_client()
    try:
        return int(client.llen(settings.CELERY_TASK_DEFAULT_QUEUE))
    finally:
        client.close()
