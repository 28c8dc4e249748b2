"""``make run``: the whole console on one machine with no servers.

Migrates the SQLite database, creates demo users and threads, then runs the
fake bank, a Celery worker (with beat, over kombu's filesystem transport) and
daphne on http://127.0.0.1:8000, until Ctrl-C stops them all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _spawn(name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    print(f"[gatehouse] starting {name}: {' '.join(args)}", flush=True)
    return subprocess.Popen(args, cwd=ROOT, env=env, start_new_session=True)


def main() -> int:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    env.setdefault("DEBUG", "true")
    env.setdefault("GATEHOUSE_FAKE_BANK_URL", "http://127.0.0.1:8765")
    port = env.get("PORT", "8000")
    python = sys.executable
    var = Path(env.get("GATEHOUSE_VAR_DIR", ROOT / "var"))
    var.mkdir(parents=True, exist_ok=True)

    subprocess.run([python, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True)
    procs = [
        _spawn("fake bank", [python, "-m", "demo.fakebank", "--port", "8765"], env),
        _spawn(
            "worker",
            [
                python,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "--beat",
                "--pool=threads",
                "--concurrency=4",
                "--loglevel=INFO",
                "--schedule",
                str(var / "celerybeat-schedule"),
            ],
            env,
        ),
    ]
    subprocess.run([python, "manage.py", "demo_setup"], cwd=ROOT, env=env, check=True)
    procs.append(
        _spawn("web", [python, "-m", "daphne", "-b", "127.0.0.1", "-p", port, "console.asgi:application"], env)
    )
    print(f"[gatehouse] console on http://127.0.0.1:{port}/  (API docs: /api/docs) — Ctrl-C stops", flush=True)

    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        while not stopping and all(p.poll() is None for p in procs):
            time.sleep(0.3)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        print("[gatehouse] stopped", flush=True)
    return 0 if stopping else 1


if __name__ == "__main__":
    sys.exit(main())
