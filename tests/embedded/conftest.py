"""The embedded stack as ``make run`` starts it: ``python -m console.embedded`` in a process of its own.

Each stack gets its own var dir, web port and bank port. Its processes are
found by the var dir in their environment (``/proc/<pid>/environ``), so a test
can tell that none is left behind, whoever started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, free_port, scaled, wait_for
from tests.sqlite_probe import sqlite_migrated_copy

SOAK_GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
# Log lines that mean a process crashed (the launcher's output carries every child's).
CRASH_MARKERS = ("CRITICAL", "Unrecoverable", "Traceback")


def embedded_env(var: Path, **extra: str) -> dict[str, str]:
    """The environment of a shell that runs ``make run``: none of the test session's server settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST", "GATEHOUSE_", "DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_"))
    }
    env.update(GATEHOUSE_VAR_DIR=str(var), PYTHONUNBUFFERED="1", **extra)
    return env


def processes_of(var: Path) -> list[int]:
    """Live processes whose environment names this var dir (zombies have none and are skipped)."""
    marker = f"GATEHOUSE_VAR_DIR={var}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Stack:
    var: Path
    env: dict[str, str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Stack:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "console.embedded"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def wait_serving(self, timeout: float = 90.0) -> Stack:
        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"the launcher exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            return "console on http://" in self.log()

        wait_for(up, timeout=timeout, interval=0.2, what="the embedded console to come up")
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def manage(self, *args: str) -> str:
        env = {**self.env, "DJANGO_SETTINGS_MODULE": "console.settings"}
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=scaled(120),
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def client(self, username: str, **kwargs: Any) -> httpx.Client:
        if username not in self.tokens:
            self.tokens[username] = self.manage("issue_token", username).strip()
        headers = {"Authorization": f"Bearer {self.tokens[username]}"}
        return httpx.Client(base_url=self.base, headers=headers, timeout=scaled(30), **kwargs)

    def processes(self) -> list[int]:
        return processes_of(self.var)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        """Ctrl-C the launcher; if anything of this stack is still alive afterwards, kill it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=scaled(20))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=scaled(10))
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def stack_new(tmp_path: Path, name: str = "stack", *, migrated: bool = False, **extra: str) -> Stack:
    """A stack of its own var dir and ports (not started).

    ``migrated``: its database starts as a copy of one migrated once per test process
    (``tests.sqlite_probe.sqlite_migrated``), for a stack whose subject is not its first start: its launcher's
    migrate then finds nothing to do, where migrating from nothing costs a loaded machine ~6 s of CPU. The
    first start itself (migrate from nothing, the demo data) is still tested from empty var dirs:
    ``test_embedded_flow``, ``test_graph_loading``, the launcher's refusals and first-admin hint."""
    var = tmp_path / name / "var"
    var.mkdir(parents=True)
    if migrated:
        sqlite_migrated_copy(var)
    port = free_port()
    env = embedded_env(var, PORT=str(port), **extra)
    return Stack(var=var, env=env, port=port, log_path=tmp_path / name / "launcher.log")


@pytest.fixture
def stacks(tmp_path: Path) -> Iterator[list[Stack]]:
    """Stacks a test starts; every one is stopped (and its processes killed) afterwards."""
    started: list[Stack] = []
    yield started
    for stack in started:
        stack.stop()
