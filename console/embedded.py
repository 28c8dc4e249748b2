"""``make run``: the whole console on one machine with no servers, supervised.

Setup first, in one process while nothing else runs: migrate the SQLite database, import the
registered graphs (a broken one stops here, named), then either create the
demo users and threads (demo mode) or say how to create the first admin. Only
then start the long-lived children, each in its own process group: the fake
bank (for the demo's graphs, which call it, unless ``GATEHOUSE_FAKE_BANK_URL`` names one),
``GATEHOUSE_WORKERS`` Celery workers (the first runs beat) and daphne on ``PORT``.

A child that dies is started again after a backoff (1 s, doubling to 30 s;
reset once it has run for a minute), with a log line. Ctrl-C or SIGTERM stops
every child's process group: SIGTERM, then SIGKILL after a few seconds. A
failed start stops whatever had been started. Ports and files: docs/embedded.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from console.env import env_bool

ROOT = Path(__file__).resolve().parent.parent
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
STABLE_AFTER = 60.0  # a child up this long has its backoff reset
# Celery's warm shutdown lets runs finish this long before handing them back (set
# GATEHOUSE_SHUTDOWN_GRACE_SECONDS to change it); the launcher SIGKILLs what is left
# STOP_MARGIN_SECONDS after that, so a longer grace is honoured, not cut short.
SHUTDOWN_GRACE_SECONDS = "3"
STOP_MARGIN_SECONDS = 2.0
STOP_SECONDS = float(SHUTDOWN_GRACE_SECONDS) + STOP_MARGIN_SECONDS  # SIGTERM → SIGKILL, by default
# Setup runs these commands in order in one process (manage.py embedded_setup); the one that
# fails exits with SETUP_EXIT_FIRST + its index.
SETUP_STEPS = ("migrate", "graphs_check", "demo_setup")
SETUP_EXIT_FIRST = 10


class StartError(Exception):
    """A setup step failed; nothing long-lived is left running."""


def log(message: str) -> None:
    print(f"[gatehouse] {message}", flush=True)


@dataclass
class Child:
    name: str
    args: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff: float = BACKOFF_FIRST
    restart_at: float | None = None
    restarts: int = 0
    pass_fds: tuple[int, ...] = ()  # the var dir's lock: held while any process of the stack lives

    def start(self) -> None:
        log(f"starting {self.name}: {' '.join(self.args)}")
        self.proc = subprocess.Popen(
            self.args,
            cwd=ROOT,
            env=self.env,
            start_new_session=True,
            pass_fds=self.pass_fds,
            preexec_fn=die_with_parent(),  # safe between fork and exec: the launcher runs one thread
        )
        self.started_at = time.monotonic()
        self.restart_at = None

    def signal_group(self, sig: int) -> None:
        # The group outlives its leader when the leader dies first (Celery's beat, pool threads).
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def group_alive(self) -> bool:
        if self.proc is None:
            return False
        if self.proc.poll() is None:
            return True
        try:
            os.killpg(self.proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True


@dataclass
class Supervisor:
    children: list[Child] = field(default_factory=list)
    clock: Callable[[], float] = time.monotonic
    pass_fds: tuple[int, ...] = ()

    def start(self, child: Child) -> None:
        self.children.append(child)
        child.pass_fds = self.pass_fds
        child.start()

    def tend(self) -> None:
        """Restart children that died, each after its backoff."""
        self.orphans_reap()
        now = self.clock()
        for child in self.children:
            proc = child.proc
            if proc is None:
                continue
            if child.restart_at is None and proc.poll() is not None:
                child.signal_group(signal.SIGKILL)  # whatever it left behind in its group
                if now - child.started_at >= STABLE_AFTER:
                    child.backoff = BACKOFF_FIRST
                child.restart_at = now + child.backoff
                log(f"{child.name} exited with code {proc.returncode}; restarting in {child.backoff:g}s")
                child.backoff = min(child.backoff * 2, BACKOFF_MAX)
            elif child.restart_at is not None and now >= child.restart_at:
                child.restarts += 1
                child.start()

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        for child in self.children:
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(c.group_alive() for c in self.children) and time.monotonic() < deadline:
            self.orphans_reap()  # the children's exits and whatever they left behind
            time.sleep(0.05)
        for child in self.children:
            if child.group_alive():
                log(f"{child.name} did not stop within {timeout:g}s; killing it")
                child.signal_group(signal.SIGKILL)
                if child.proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.proc.wait(timeout=5)

    def orphans_reap(self) -> None:
        """Reap the exited processes this launcher inherited (see ``reaper_become``); a direct child is
        left to its ``Popen``, which keeps its exit code."""
        ours = {child.proc.pid: child.proc for child in self.children if child.proc is not None}
        for _ in range(1000):  # bounded: each pass reaps one process
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return  # no children at all
            if info is None:
                return  # none has exited
            proc = ours.get(info.si_pid)
            if proc is not None:
                proc.poll()
            else:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(info.si_pid, os.WNOHANG)


def reaper_become() -> bool:
    """Adopt the stack's orphans (Linux): a worker's beat outlives a worker that died or stopped
    first, and its exit must be reaped before the worker's process group is gone. Reparented to
    PID 1 it lingers as a zombie until PID 1 reaps it: ~2 s on some machines, never where PID 1 is
    this launcher (a container without an init). True if this process is now the reaper."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    pr_set_child_subreaper = 36  # <linux/prctl.h>
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child sent SIGTERM when the launcher dies (Linux: PR_SET_PDEATHSIG).

    A SIGKILLed launcher cannot stop its children: daphne, the workers and the bank went on, re-parented to
    PID 1, holding the port, and the next ``make run`` said only "port 8000 is in use". SIGTERM, not
    SIGKILL: a worker then hands its runs back and stops its beat, as on Ctrl-C. libc is loaded here, in
    the launcher, not between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    pr_set_pdeathsig = 1  # <linux/prctl.h>
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before the prctl: nobody will send it
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


LOCK_NAME = "launcher.lock"


def var_dir_lock(var: Path) -> int:
    """Lock the var dir for this stack (``flock`` on ``var/launcher.lock``); returns the descriptor.

    Children inherit it (``pass_fds``), so the lock lasts while any process of the stack does, not only
    the launcher: a second launcher on the same var dir (two stacks writing one SQLite database and
    broker) is refused, naming what holds it. Raises StartError."""
    path = var / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise StartError(_lock_holders_describe(var, path, owner)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _lock_holders_describe(var: Path, path: Path, owner: str) -> str:
    holders = sorted(pid for pid in _pids_holding(path) if pid != os.getpid())
    launcher = int(owner) if owner.isdigit() else None
    if launcher is not None and launcher in holders:
        return (
            f"another launcher (pid {launcher}) runs on the var dir {var}: stop it (Ctrl-C, or kill {launcher}), "
            "or give this one its own GATEHOUSE_VAR_DIR and PORT"
        )
    listed = ", ".join(map(str, holders)) or "unknown (see `fuser " + str(path) + "`)"
    return (
        f"the var dir {var} is still held by processes of a stack whose launcher (pid {owner or '?'}) is gone: "
        f"pids {listed}. They stop by themselves within seconds if it was just killed; otherwise kill them"
    )


def _pids_holding(path: Path) -> list[int]:
    """Processes with ``path`` open (Linux /proc; empty elsewhere or where /proc is not readable)."""
    found = []
    target = str(path.resolve())
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == target for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
    return found


def port_free(port: int) -> bool:
    """Whether the servers can listen on ``port``. They bind with SO_REUSEADDR (daphne through Twisted,
    the fake bank through http.server), and so does this check: a port whose connections from the
    last run still wait in TIME_WAIT is free to them, only one someone listens on is not."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_pick() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def worker_args(python: str, var: Path, *, index: int) -> list[str]:
    # No -Q: a worker consumes every queue in CELERY_TASK_QUEUES (runs and outbound webhooks).
    args = [python, "-m", "celery", "-A", "console", "worker", "--pool=threads", "--concurrency=4"]
    args += ["--loglevel=INFO", "-n", f"worker{index}@%h", "--without-mingle", "--without-gossip"]
    if index == 1:  # one beat for the whole stack
        args += ["--beat", "--schedule", str(var / "celerybeat-schedule")]
    return args


def _setup(python: str, env: dict[str, str], *, demo: bool) -> None:
    args = ["embedded_setup", "--demo"] if demo else ["embedded_setup"]
    done = subprocess.run([python, "manage.py", *args], cwd=ROOT, env=env)
    if done.returncode == 0:
        return
    step = done.returncode - SETUP_EXIT_FIRST
    failed = SETUP_STEPS[step] if 0 <= step < len(SETUP_STEPS) else " ".join(args)
    raise StartError(f"manage.py {failed} failed (exit {done.returncode})")


def _users_exist(var: Path, env: dict[str, str]) -> bool:
    if env.get("DATABASE_URL"):
        return True  # not ours to inspect: a server database has its own administration
    with sqlite3.connect(f"file:{var / 'gatehouse.sqlite3'}?mode=ro", uri=True) as db:
        return bool(db.execute("SELECT EXISTS (SELECT 1 FROM auth_user)").fetchone()[0])


# What decides the database and the graphs a command sees; printed with a command to paste when not the default.
_INSTANCE_VARIABLES = {
    "GATEHOUSE_VAR_DIR": str(ROOT / "var"),
    "GATEHOUSE_GRAPHS": str(ROOT / "demo" / "langgraph.json"),
}


def _absolute(value: str) -> str:
    return str(Path(value).resolve()) if Path(value).exists() else value


def fake_bank_needed(env: dict[str, str]) -> bool:
    """Whether a registered graph is one of the demo's (``demo/graphs/``), the only graphs that call the fake
    bank (``demo/bank_client.py``). Read from the graphs file without importing anything; setup's
    ``graphs_check`` has refused a file that cannot be read. One's own graphs need no bank holding a port."""
    config = ROOT / (env.get("GATEHOUSE_GRAPHS") or _INSTANCE_VARIABLES["GATEHOUSE_GRAPHS"])  # children's cwd
    demo_graphs = (ROOT / "demo" / "graphs").resolve()
    try:
        graphs = json.loads(config.read_text())["graphs"]
        specs = [value.get("path") if isinstance(value, dict) else value for value in graphs.values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return True  # unreadable here: as before, the bank starts
    files = [(config.parent / spec.rpartition(":")[0]).resolve() for spec in specs if isinstance(spec, str)]
    return any(file.is_relative_to(demo_graphs) for file in files)


def first_admin_command(python: str, env: dict[str, str]) -> str:
    """``user_create`` with the variables this instance runs with: pasted without them, the admin was
    created in ``./var``, not in this instance's database."""
    prefix = [
        f"{name}={shlex.quote(_absolute(env[name]))}"  # pasted in another directory, a relative path breaks
        for name, default in _INSTANCE_VARIABLES.items()
        if env.get(name) and Path(env[name]).resolve() != Path(default).resolve()
    ]
    command = [shlex.quote(python), shlex.quote(str(ROOT / "manage.py")), "user_create --role admin <username>"]
    return " ".join([*prefix, *command])


def stop_seconds(env: dict[str, str]) -> float:
    """How long the children get between SIGTERM and SIGKILL: the workers' shutdown grace, and a margin.

    A grace that is not a finite number leaves the default (the worker's own settings refuse it).
    """
    try:
        grace = float(env.get("GATEHOUSE_SHUTDOWN_GRACE_SECONDS", SHUTDOWN_GRACE_SECONDS))
    except ValueError:
        grace = math.nan
    return max(grace, 0.0) + STOP_MARGIN_SECONDS if math.isfinite(grace) else STOP_SECONDS


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("GATEHOUSE_SHUTDOWN_GRACE_SECONDS", SHUTDOWN_GRACE_SECONDS)
    env["GATEHOUSE_VAR_DIR"] = str(Path(env.get("GATEHOUSE_VAR_DIR") or ROOT / "var").resolve())
    return env


def public_url_default(env: dict[str, str], port: int) -> None:
    """Where links the console sends out (deadline e-mails under var/mail/) point: unset, they were
    relative ("/tasks/<id>/"), which no mail reader can open. Embedded, the console is here."""
    env.setdefault("GATEHOUSE_PUBLIC_URL", f"http://127.0.0.1:{port}")


PORT_MAX = 65535


@dataclass(frozen=True)
class LaunchSettings:
    """What the launcher itself reads from the environment, checked before anything starts."""

    var: Path
    port: int
    bank_port: int | None  # None: GATEHOUSE_FAKE_BANK_URL names a bank; 0: pick a free port
    workers: int
    demo: bool


def _env_int(
    env: dict[str, str], name: str, default: int, *, minimum: int, maximum: int | None = None, what: str
) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise StartError(f"{name}={raw!r} is not an integer: {what}") from None
    if value < minimum or (maximum is not None and value > maximum):
        raise StartError(f"{name}={value} is out of range: {what}")
    return value


def settings_read(env: dict[str, str]) -> LaunchSettings:
    """Every variable the launcher reads, checked at once: a bad one is a StartError naming it and what it
    takes, before the var dir is locked, migrate runs or any child starts (``PORT=abc`` was a traceback, and
    ``GATEHOUSE_WORKERS=0`` one that came only after setup and the fake bank had started)."""
    from django.core.exceptions import ImproperlyConfigured

    var = Path(env["GATEHOUSE_VAR_DIR"])
    if var.exists() and not var.is_dir():
        raise StartError(f"GATEHOUSE_VAR_DIR={str(var)!r} is not a directory: name a directory (created if missing)")
    port = _env_int(env, "PORT", 8000, minimum=1, maximum=PORT_MAX, what=f"the web port, 1 to {PORT_MAX}")
    bank_port = None
    if not env.get("GATEHOUSE_FAKE_BANK_URL"):
        what = f"the fake bank's port, 1 to {PORT_MAX} (0 or unset: a free one)"
        bank_port = _env_int(env, "BANK_PORT", 0, minimum=0, maximum=PORT_MAX, what=what)
    workers = _env_int(env, "GATEHOUSE_WORKERS", 1, minimum=1, what="how many Celery workers, 1 or more")
    try:
        demo = env_bool("GATEHOUSE_DEMO", not env.get("DATABASE_URL"))
    except ImproperlyConfigured as exc:
        raise StartError(str(exc)) from None
    return LaunchSettings(var=var, port=port, bank_port=bank_port, workers=workers, demo=demo)


def start(supervisor: Supervisor, env: dict[str, str]) -> int:
    """Set up, then start the children; returns the web port. Raises StartError."""
    python = sys.executable
    launch = settings_read(env)  # first: a bad value is refused with nothing created or started
    var = launch.var
    try:
        var.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartError(f"GATEHOUSE_VAR_DIR={str(var)!r} cannot be created: {exc.strerror or exc}") from None
    supervisor.pass_fds = (var_dir_lock(var),)  # before anything else: refused, nothing has started
    port = launch.port
    if not port_free(port):
        raise StartError(f"port {port} is in use: set PORT to another port (and GATEHOUSE_VAR_DIR for a 2nd instance)")
    env["PORT"] = str(port)
    public_url_default(env, port)
    bank_port: int | None = None
    if launch.bank_port is not None and fake_bank_needed(env):
        bank_port = launch.bank_port or port_pick()
        if not port_free(bank_port):
            raise StartError(f"BANK_PORT {bank_port} is in use: pick another (or leave it unset for a free one)")
        env["GATEHOUSE_FAKE_BANK_URL"] = f"http://127.0.0.1:{bank_port}"

    demo = launch.demo
    _setup(python, env, demo=demo)
    if not demo and not _users_exist(var, env):
        log("demo mode is off and there are no users yet. Create the first admin, then sign in:")
        log(f"    {first_admin_command(python, env)}")

    if bank_port is not None:
        supervisor.start(Child("fake bank", [python, "-m", "demo.fakebank", "--port", str(bank_port)], env))
    for index in range(1, launch.workers + 1):
        name = "worker" if index == 1 else f"worker {index}"
        supervisor.start(Child(name, worker_args(python, var, index=index), env))
    # daphne, without the live relay's POSTs (several per run) in its access log (console/serve.py)
    web = [python, "-m", "console.serve", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"]
    supervisor.start(Child("web", web, env))
    return port


def main() -> int:
    env = environment()
    reaper_become()
    supervisor = Supervisor()
    stopping: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        port = start(supervisor, env)
        announced = False
        while not stopping:
            supervisor.tend()
            if not announced and port_listening(port):
                log(f"console on http://127.0.0.1:{port}/  (API docs: /api/docs) — Ctrl-C stops")
                announced = True
            time.sleep(0.2)
    except StartError as exc:
        log(f"cannot start: {exc}")
        return 1
    except KeyboardInterrupt:  # a Ctrl-C before the handler was installed
        pass
    finally:
        if supervisor.children:  # a start refused before any child is its one "cannot start" line
            supervisor.stop(stop_seconds(env))
            log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
