"""The web process's CPU per request, through daphne, for a few paths: what serving a request costs.

    .venv/bin/python bench/request_cost.py [--requests 1500] [PATH ...]

Recreates ``gatehouse_bench_requests``, migrates, makes the bench's users, starts daphne with the
production settings on a free port, and sends each path (default: ``/api/graphs``, an API 404 and an
unknown path) ``--requests`` times from one keep-alive client, as the bench's reviewer. It prints
daphne's CPU per request (from ``/proc``: all its threads) and the client's wall time per request.
One client and nothing else running: the cost of a request, not the server's throughput.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import (  # noqa: E402
    OUT_DIR,
    bench_env,
    bench_users,
    db_drop,
    db_recreate,
    free_port,
    manage,
    wait_until,
)

PATHS = ["/api/graphs", f"/api/threads/{uuid.UUID(int=0)}", "/no-such-page"]


def process_cpu(pid: int) -> float:
    """Seconds of CPU ``pid`` has used (user + system, all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=PATHS)
    parser.add_argument("--requests", type=int, default=1500, help="measured requests per path (default 1500)")
    parser.add_argument("--db", default="gatehouse_bench_requests")
    args = parser.parse_args()

    import httpx

    run_dir = OUT_DIR / "run" / "requests"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = bench_env(args.db, f"gatehouse-requests-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9", run_dir)
    db_recreate(args.db)
    web = None
    try:
        manage(env, "migrate", "--noinput", "-v", "0")
        tokens = bench_users(env)
        port = free_port()
        with open(run_dir / "web.log", "wb") as web_log:
            web = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
                cwd=ROOT,
                env=env,
                stdout=web_log,
                stderr=subprocess.STDOUT,
            )
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{base}/api/docs", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=60, interval=0.1, what="daphne up")
        headers = {"Authorization": f"Bearer {tokens['reviewer']}"}
        with httpx.Client(base_url=base, headers=headers) as client:
            for path in args.paths:
                for _ in range(100):  # warm: imports, plans, the kept request threads
                    client.get(path)
                cpu0, wall0 = process_cpu(web.pid), time.perf_counter()
                for _ in range(args.requests):
                    status = client.get(path).status_code
                cpu = (process_cpu(web.pid) - cpu0) / args.requests * 1000
                wall = (time.perf_counter() - wall0) / args.requests * 1000
                print(f"{path}: {status}, daphne CPU {cpu:.3f} ms per request, client wall {wall:.3f} ms")
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=30)
        db_drop(args.db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
