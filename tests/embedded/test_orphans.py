"""The launcher adopts and reaps what its children leave behind.

Celery's beat runs in the worker's process group and can outlive the worker: on Ctrl-C, or when
a crashed worker is replaced. Reparented to PID 1, its exit stays a zombie until PID 1 reaps it,
and the launcher waited for the group to be gone (~2 s on machines whose PID 1 reaps lazily,
until the kill deadline where PID 1 is the launcher itself, as in a container without an init).
The launcher is now the orphans' reaper (``reaper_become``), and ``Supervisor`` reaps them.

Run in a process of its own: becoming a subreaper is for the rest of a process's life.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, scaled

pytestmark = pytest.mark.slow  # starts processes

LEADER = textwrap.dedent(
    """
    import os, signal, sys, time
    grandchild = os.fork()
    if grandchild == 0:  # like beat: same process group, outlives the leader
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        while True:
            time.sleep(0.05)
    with open(sys.argv[1], "w") as out:
        out.write(str(grandchild))
    while True:
        time.sleep(0.05)
    """
)

LAUNCHER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path
    from console.embedded import Child, Supervisor, reaper_become

    pid_file, timeout, mode = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[4]
    adopted = reaper_become()
    supervisor = Supervisor()
    supervisor.start(Child("leader", [sys.executable, "-c", sys.argv[3], str(pid_file)], dict(os.environ)))
    leader = supervisor.children[0].proc
    deadline = time.monotonic() + timeout
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline, "the leader never wrote its grandchild's pid"
        time.sleep(0.02)
    grandchild = int(pid_file.read_text())
    os.kill(leader.pid, signal.SIGKILL)  # the leader dies first, as a crashed worker does
    leader.wait()
    parent = int(Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[1])
    reaped_while_tending = None
    if mode == "tend":  # while running: tend kills what the dead leader left, and must reap it too
        supervisor.tend()
        while Path(f"/proc/{grandchild}").exists() and time.monotonic() < deadline:
            supervisor.tend()
            time.sleep(0.02)
        reaped_while_tending = not Path(f"/proc/{grandchild}").exists()
    started = time.monotonic()
    supervisor.stop(timeout)
    print(json.dumps({
        "adopted": adopted,
        "me": os.getpid(),
        "grandchild_parent": parent,
        "grandchild_left": Path(f"/proc/{grandchild}").exists(),
        "group_alive": supervisor.children[0].group_alive(),
        "stop_seconds": time.monotonic() - started,
        "reaped_while_tending": reaped_while_tending,
    }))
    """
)


def _launch(tmp_path: Path, mode: str) -> tuple[dict, str]:
    timeout = scaled(30)
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "grandchild.pid"), str(timeout), LEADER, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout * 2,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout


def test_a_grandchild_outliving_its_leader_is_adopted_and_reaped_by_the_launcher(tmp_path: Path) -> None:
    timeout = scaled(30)
    result, stdout = _launch(tmp_path, "stop")
    assert result["adopted"]
    assert result["grandchild_parent"] == result["me"]  # not PID 1
    assert not result["grandchild_left"]  # reaped: not even a zombie
    assert not result["group_alive"]
    assert "did not stop within" not in stdout  # the group ended before the kill deadline
    assert result["stop_seconds"] < timeout


def test_what_a_dead_child_left_behind_is_reaped_while_the_stack_runs(tmp_path: Path) -> None:
    # A crashed worker's beat, killed with the rest of its group before the worker is restarted:
    # its exit is the launcher's to reap, or zombies pile up for as long as the stack runs.
    result, _ = _launch(tmp_path, "tend")
    assert result["grandchild_parent"] == result["me"]
    assert result["reaped_while_tending"] is True
