"""Bulk approval benchmark: one bulk decision over N tasks, end to end (decisions done, every thread resumed).

    .venv/bin/python bench/bulk.py [--threads 500] [--concurrency 4]

Self-contained like bench/full_cycle.py (whose helpers it uses): a fresh PostgreSQL
database, the fake bank, a Celery worker (threads pool) and daphne. It starts N
``loan_approval`` threads (they pause at ``human_review``), waits until every one
is interrupted, then as the reviewer sends one ``POST /api/bulk-decisions`` with
the inbox filter that selects exactly them ("select all matching"), and measures:

- accepted: the POST's response time (selection fixed, signature checked, bulk.started);
- decided: until ``GET /api/bulk-decisions/{id}`` says finished (every task decided,
  each through task_decide: its own decision, audit row and queued resume);
- resumed: until every thread is completed (each resume run executed by the worker,
  the action node's effect done through the ledger).

Results: stdout and ``var/bench/bulk.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import (  # noqa: E402
    OUT_DIR,
    Proc,
    bench_env,
    bench_users,
    db_drop,
    db_recreate,
    free_port,
    loan_input,
    log,
    manage,
    redis_forget,
    wait_until,
    worker_proc,
)


def measure(base: str, tokens: dict[str, str], n: int, clients: int) -> dict[str, Any]:
    import httpx

    operator = {"Authorization": f"Bearer {tokens['operator']}"}
    reviewer = {"Authorization": f"Bearer {tokens['reviewer']}"}
    tag = f"bench-bulk-{uuid.uuid4().hex[:6]}"

    def start(_: int) -> str:
        with httpx.Client(base_url=base, timeout=60) as http:
            body = {"graph": "loan_approval", "input": loan_input(), "metadata": {"case": tag}}
            response = http.post("/api/threads", json=body, headers=operator)
            response.raise_for_status()
            return str(response.json()["id"])

    def settled(thread_id: str, statuses: str) -> str:
        with httpx.Client(base_url=base, timeout=120) as http:
            while True:
                response = http.get(
                    f"/api/threads/{thread_id}", params={"wait_for": statuses, "timeout": 25}, headers=reviewer
                )
                status = str(response.json()["status"])
                if status in statuses.split(","):
                    return status

    log(f"starting {n} threads")
    t = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        threads = list(pool.map(start, range(n)))
        statuses = list(pool.map(lambda tid: settled(tid, "interrupted,failed"), threads))
    if set(statuses) != {"interrupted"}:
        raise RuntimeError(f"not every thread paused at its gate: {sorted(set(statuses))}")
    log(f"{n} threads paused in {time.monotonic() - t:.1f} s; bulk approval of all of them")

    with httpx.Client(base_url=base, timeout=120) as http:
        t0 = time.monotonic()
        response = http.post(
            "/api/bulk-decisions",
            json={"outcome": "approve", "reason": "bench", "filter": {"graph": "loan_approval", "q": tag}},
            headers=reviewer,
        )
        accepted = time.monotonic() - t0
        if response.status_code != 202:
            raise RuntimeError(f"bulk refused: {response.status_code} {response.text[:500]}")
        bulk_id = response.json()["id"]

        def finished() -> dict[str, Any] | None:
            body = http.get(f"/api/bulk-decisions/{bulk_id}", headers=reviewer).json()
            return body if body["status"] == "finished" else None

        body = wait_until(finished, timeout=3600, interval=0.2, what="the bulk to finish")
        decided = time.monotonic() - t0
    with ThreadPoolExecutor(clients) as pool:
        ends = list(pool.map(lambda tid: settled(tid, "completed,failed,cancelled"), threads))
    resumed = time.monotonic() - t0
    result = {
        "tasks": n,
        "selected": body["total"],
        "decided": len(body["decided"]),
        "skipped": len(body["skipped"]),
        "completed_threads": ends.count("completed"),
        "accepted_s": round(accepted, 3),
        "decisions_done_s": round(decided, 2),
        "all_resumed_s": round(resumed, 2),
        "decisions_per_s": round(len(body["decided"]) / decided, 1),
        "threads_resumed_per_s": round(ends.count("completed") / resumed, 1),
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=4, help="the worker's threads")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--db", default="gatehouse_bench_bulk")
    args = parser.parse_args()
    from demo.fakebank import serve_in_thread

    run_dir = OUT_DIR / "run-bulk"
    run_dir.mkdir(parents=True, exist_ok=True)
    queue = f"gatehouse-bulk-{uuid.uuid4().hex[:8]}"
    bank = serve_in_thread(latency_ms=0.0)
    env = bench_env(args.db, queue, bank.url, run_dir / "var")
    procs: list[Proc] = []
    db_recreate(args.db)
    try:
        manage(env, "migrate", "--noinput", "-v", "0")
        tokens = bench_users(env)
        worker, ready = worker_proc(env, queue, run_dir, concurrency=args.concurrency)
        procs.append(worker)
        port = free_port()
        procs.append(
            Proc(
                "web",
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
                env,
                run_dir,
            )
        )
        wait_until(lambda: ready.exists() or not worker.alive, timeout=90, interval=0.1, what="worker ready")
        import httpx

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/api/graphs", timeout=2).status_code == 401
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=90, interval=0.2, what="daphne up")
        result = measure(f"http://127.0.0.1:{port}", tokens, args.threads, args.clients)
    except BaseException:
        for proc in procs:
            print(f"--- {proc.name} ---\n{proc.tail()}", file=sys.stderr)
        raise
    finally:
        for proc in reversed(procs):
            proc.stop()
        bank.shutdown()
        redis_forget(queue)
        db_drop(args.db)
    result["worker_concurrency"] = args.concurrency
    print(json.dumps(result, indent=2))
    (OUT_DIR / "bulk.json").write_text(json.dumps(result, indent=2))
    print(f"results written to {OUT_DIR / 'bulk.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
