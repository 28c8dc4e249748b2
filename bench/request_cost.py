"""The web process's CPU per request, through daphne, for a few paths: what serving a request costs.

    .venv/bin/python bench/request_cost.py [--requests 1500] [PATH ...]

Recreates ``gatehouse_bench_requests``, migrates, makes the bench's users, starts daphne with the
production settings on a free port, and sends each path (default: ``/api/graphs``, an API 404 and an
unknown path) ``--requests`` times from one keep-alive client, as the bench's reviewer. It prints
daphne's CPU per request (from ``/proc``: all its threads) and the client's wall time per request.
One client and nothing else running: the cost of a request, not the server's throughput. Results in
``var/bench/request_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import (  # noqa: E402
    OUT_DIR,
    Proc,
    _proc_cpu_seconds,
    bench_env,
    bench_users,
    db_drop,
    db_recreate,
    free_port,
    manage,
    web_wait_up,
)

PATHS = ["/api/graphs", f"/api/threads/{uuid.UUID(int=0)}", "/no-such-page"]


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
        daphne = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"]
        web = Proc("web", daphne, env, run_dir)
        base = f"http://127.0.0.1:{port}"

        web_wait_up(web, f"{base}/api/docs")
        headers = {"Authorization": f"Bearer {tokens['reviewer']}"}
        results = []
        with httpx.Client(base_url=base, headers=headers) as client:
            for path in args.paths:
                for _ in range(100):  # warm: imports, plans, the kept request threads
                    client.get(path)
                cpu0, wall0 = _proc_cpu_seconds(web.proc.pid), time.perf_counter()
                for _ in range(args.requests):
                    status = client.get(path).status_code
                cpu = (_proc_cpu_seconds(web.proc.pid) - cpu0) / args.requests * 1000
                wall = (time.perf_counter() - wall0) / args.requests * 1000
                print(f"{path}: {status}, daphne CPU {cpu:.3f} ms per request, client wall {wall:.3f} ms")
                results.append(
                    {"path": path, "status": status, "daphne_cpu_ms": round(cpu, 3), "wall_ms": round(wall, 3)}
                )
        out = OUT_DIR / "request_cost.json"
        out.write_text(json.dumps({"requests_per_path": args.requests, "paths": results}, indent=2))
        print(f"results written to {out}")
    finally:
        if web is not None:
            web.stop()
        db_drop(args.db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
