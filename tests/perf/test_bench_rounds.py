"""The benchmark's alternating rounds: the work split evenly, the order alternated, rounds pooled over
their own wall times, and the side not measured really stopped (with its children) and resumed; a
process's CPU counted with its children's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.full_cycle import (
    CpuMeter,
    Proc,
    Result,
    _proc_cpu_seconds,
    _tree_cpu_seconds,
    alternate,
    merged,
    paused,
    split,
)
from tests.conftest import wait_for


def test_the_work_is_split_evenly_and_none_is_lost():
    assert split(200, 3) == [67, 67, 66]
    assert split(50, 3) == [17, 17, 16]
    assert split(2, 3) == [1, 1]  # never an empty round
    assert split(5, 0) == [5]
    assert all(sum(split(n, r)) == n for n in range(1, 40) for r in range(1, 6))


def test_rounds_alternate_which_system_goes_first():
    order: list[tuple[str, int]] = []
    alternate([3, 2, 1], lambda n: order.append(("a", n)), lambda n: order.append(("b", n)))
    assert order == [("a", 3), ("b", 3), ("b", 2), ("a", 2), ("a", 1), ("b", 1)]


def test_pooled_rounds_count_only_their_own_wall_time():
    first = Result.of("s", "gatehouse", 4, [(0.0, 0.1), (0.0, 0.3)])  # 2 threads in 0.3 s
    second = Result.of("s", "gatehouse", 4, [(10.0, 10.2)])  # 1 thread in 0.2 s, ten seconds later
    pooled = merged([first, second])
    assert pooled.n == 3
    assert pooled.wall_s == pytest.approx(0.5)  # not the 10.2 s from the first start to the last end
    assert pooled.throughput == pytest.approx(6.0)
    assert sorted(pooled.latencies_ms) == pytest.approx([100.0, 200.0, 300.0])
    assert pooled.median_ms == pytest.approx(200.0)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _pids(proc: Proc) -> list[int]:
    children = Path(f"/proc/{proc.proc.pid}/task/{proc.proc.pid}/children").read_text().split()
    return [proc.proc.pid, *map(int, children)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states from /proc")
def test_a_paused_side_is_stopped_with_its_children_and_resumed(tmp_path):
    # A process with a child of its own, as a prefork worker has: the whole group must stop.
    code = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    proc = Proc("side", [sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, tmp_path)
    try:
        pids = wait_for(lambda: len(_pids(proc)) == 2 and _pids(proc), what="the side and its child")
        with paused([proc]):
            wait_for(lambda: all(_state(pid) == "T" for pid in pids), what="both stopped")
        wait_for(lambda: all(_state(pid) != "T" for pid in pids), what="both running again")
        assert proc.alive
    finally:
        proc.stop(grace=5)


# A child that burns 0.3 s of CPU (by its own clock: a slow machine only takes longer), says so, and
# then waits (a pool's child) or ends.
_BURN = "import sys, time, pathlib\nwhile time.process_time() < 0.3: pass\npathlib.Path(sys.argv[1]).touch()\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads CPU times from /proc")
@pytest.mark.parametrize("reaped", [False, True], ids=["live child", "reaped child"])
def test_a_process_s_cpu_includes_its_children_s(tmp_path, reaped):
    # A prefork worker's children do its work: measuring the parent alone read 4 ms per thread.
    done = tmp_path / "burnt"
    burn = _BURN if reaped else _BURN + "time.sleep(60)\n"
    # reaped: subprocess.run waits for the child, whose CPU then moves to the parent's cutime/cstime
    start = "subprocess.run" if reaped else "subprocess.Popen"
    code = f"import subprocess, sys, time; {start}([sys.executable, '-c', {burn!r}, {str(done)!r}]); time.sleep(60)"
    proc = Proc("side", [sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, tmp_path)
    try:
        wait_for(done.exists, what="the child's CPU burnt")
        wait_for(lambda: len(_pids(proc)) == (1 if reaped else 2), what="the child reaped, or still there")
        assert _tree_cpu_seconds(proc.proc.pid) >= 0.29  # clock ticks are 10 ms
        assert _proc_cpu_seconds(proc.proc.pid) < 0.2  # the parent itself only waited
    finally:
        proc.stop(grace=5)


def test_a_backend_that_ends_in_the_window_is_counted_once_for_the_window():
    # pid 2 had used 2.0 s, used 0.5 s more and ended: the postmaster's reaped total grew by its 2.5 s.
    reaped = CpuMeter.REAPED
    before = {"postgres": {1: 1.0, 2: 2.0, reaped: 10.0}}
    after = {"postgres": {1: 1.5, 3: 0.25, reaped: 12.5}}  # pid 3: a backend opened in the window
    assert CpuMeter.used(before, after)["postgres"] == pytest.approx(0.5 + 0.5 + 0.25)


def test_a_snapshot_without_the_postmaster_s_cpu_is_an_error_not_a_negative_figure():
    # Subtracting the postmaster's whole reaped total read -521 ms of PostgreSQL CPU per thread.
    before = {"postgres": {1: 1.0, CpuMeter.REAPED: 500.0}}
    after = {"postgres": {1: 1.5}}
    with pytest.raises(RuntimeError, match="postmaster"):
        CpuMeter.used(before, after)
