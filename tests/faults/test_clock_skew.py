"""Clock skew: a worker or sweeper whose clock is off neither steals a live run nor keeps a dead one.

Leases are measured against the database's clock, never a process's own. A
worker here gets a skewed clock from ``tests/faults/skewed_clock/sitecustomize.py``
(``time.time`` and ``django.utils.timezone.now`` shifted by
GATEHOUSE_TEST_CLOCK_SKEW seconds); PostgreSQL's clock is the machine's.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from runtime.models import Run, RunStatus
from tests.conftest import thread_settled, thread_start, wait_for
from tests.faults.conftest import FaultWorker
from tests.faults.holds import hold_reached, hold_release, pay_input

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.usefixtures("live_db")]

# The sweeps are counted by their lines in the worker's log, which are off by default (console.logs).
ENV = {"GATEHOUSE_RETRY_BACKOFF_SECONDS": "0.2", "GATEHOUSE_LOG_HOUSEKEEPING": "true"}
SKEW_DIR = Path(__file__).resolve().parent / "skewed_clock"


def _skewed(seconds: int) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(SKEW_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {**ENV, "PYTHONPATH": path, "GATEHOUSE_TEST_CLOCK_SKEW": str(seconds)}


def _sweeps(worker: FaultWorker) -> int:
    text = worker.log_path.read_text(errors="replace")
    return len(re.findall(r"Task runtime\.sweep_runs\[[^\]]+\] succeeded", text))


@pytest.fixture
def hold_dir(tmp_path: Path) -> Path:
    path = tmp_path / "holds"
    path.mkdir()
    return path


def _held_by_first_worker(fault_worker: Any, operator: Any, hold_dir: Path, **env: str) -> tuple[FaultWorker, Run, int]:
    first = fault_worker(**{**ENV, **env})
    thread = thread_start(operator, "zombie_pay", pay_input(hold_dir, "before_effect"))
    pid = wait_for(lambda: hold_reached(hold_dir, "before_effect"), timeout=40, what="the first worker to hold the run")
    assert first.proc is not None and pid == first.proc.pid
    return first, Run.objects.get(thread_id=thread["id"]), pid


def test_a_worker_whose_clock_runs_30s_ahead_does_not_steal_a_live_run(fault_worker, operator, hold_dir):
    _first, run, first_pid = _held_by_first_worker(fault_worker, operator, hold_dir)
    ahead = fault_worker(**_skewed(30))
    # Its sweeper sees the run (it would re-send it each time, and its claim would
    # take it, if it measured the lease with its own clock): give it ten sweeps.
    wait_for(lambda: _sweeps(ahead) >= 10, timeout=40, what="ten sweeps by the skewed worker")

    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.attempts == 1
    assert int(run.lease_owner.split(":")[1]) == first_pid
    assert hold_reached(hold_dir, "before_effect", besides=first_pid) is None
    hold_release(hold_dir, "before_effect", first_pid)
    done = thread_settled(operator, str(run.thread_id), timeout=30)
    assert done["values"]["paid_by"] == first_pid


def test_a_dead_worker_whose_clock_ran_10min_ahead_leaves_a_lease_that_lapses_on_time(fault_worker, operator, hold_dir):
    first, run, first_pid = _held_by_first_worker(fault_worker, operator, hold_dir, **_skewed(600))
    first.kill()
    fault_worker(**ENV)
    second_pid = wait_for(
        lambda: hold_reached(hold_dir, "before_effect", besides=first_pid), timeout=40, what="the takeover"
    )
    hold_release(hold_dir, "before_effect", second_pid)
    done = thread_settled(operator, str(run.thread_id), timeout=30)
    assert done["status"] == "completed" and done["values"]["paid_by"] == second_pid


def test_a_sweeper_whose_clock_runs_10min_behind_still_recovers_a_dead_run(fault_worker, operator, hold_dir):
    first, run, first_pid = _held_by_first_worker(fault_worker, operator, hold_dir)
    first.kill()
    fault_worker(**_skewed(-600))
    second_pid = wait_for(
        lambda: hold_reached(hold_dir, "before_effect", besides=first_pid), timeout=40, what="the takeover"
    )
    hold_release(hold_dir, "before_effect", second_pid)
    done = thread_settled(operator, str(run.thread_id), timeout=30)
    assert done["status"] == "completed" and done["values"]["paid_by"] == second_pid
    run.refresh_from_db()
    assert run.attempts == 2
