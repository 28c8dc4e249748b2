"""Profile the decision POST in-process: Django test client, real PostgreSQL, cProfile.

    .venv/bin/python bench/decision_profile.py [--samples 30] [--top 25]

Recreates ``gatehouse_bench_profile``, migrates, makes an operator and a
reviewer, then per sample: starts a ``loan_approval`` thread, runs it to its
interrupt in this process (``run_execute``), and times one
``POST /api/tasks/{id}/decision`` (median ms, SQL queries). The last samples
run under cProfile; the top functions by cumulative time are printed and the
stats saved to ``var/bench/decision_profile.prof``. Runs are executed here, so
no worker or web process is needed (the resume is left queued).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import (  # noqa: E402
    GRAPH,
    OUT_DIR,
    bench_env,
    bench_users,
    db_drop,
    db_recreate,
    loan_input,
    manage,
    redis_forget,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--profiled", type=int, default=10, help="of which the last N run under cProfile")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--db", default="gatehouse_bench_profile")
    args = parser.parse_args()

    queue = f"gatehouse-profile-{uuid.uuid4().hex[:8]}"
    env = bench_env(args.db, queue, "http://127.0.0.1:9", OUT_DIR / "run" / "var")
    os.environ.clear()
    os.environ.update(env)
    db_recreate(args.db)
    try:
        manage(env, "migrate", "--noinput", "-v", "0")
        tokens = bench_users(env)
        return _measure(args, tokens)
    finally:
        from django.db import connections

        connections.close_all()
        redis_forget(queue)
        db_drop(args.db)


def _measure(args: argparse.Namespace, tokens: dict[str, str]) -> int:
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from runtime.executor import run_execute
    from runtime.models import Run

    client = Client(SERVER_NAME="127.0.0.1")
    operator = {"Authorization": f"Bearer {tokens['operator']}"}
    reviewer = {"Authorization": f"Bearer {tokens['reviewer']}"}
    client.get("/api/graphs", headers=operator)
    client.get("/api/graphs", headers=reviewer)

    def paused_task() -> str:
        thread_id = client.post(
            "/api/threads",
            {"graph": GRAPH, "input": loan_input(), "metadata": {}},
            content_type="application/json",
            headers=operator,
        ).json()["id"]
        run_id = Run.objects.filter(thread_id=thread_id).values_list("id", flat=True).get()
        run_execute(run_id=str(run_id))
        items = client.get("/api/tasks", {"status": "pending", "thread": thread_id}, headers=reviewer).json()["items"]
        return str(items[0]["id"])

    profiler = cProfile.Profile()
    times, queries = [], []
    for i in range(args.samples):
        task_id = paused_task()
        profiled = i >= args.samples - args.profiled
        with CaptureQueriesContext(connection) as ctx:
            if profiled:
                profiler.enable()
            t0 = time.perf_counter()
            response = client.post(
                f"/api/tasks/{task_id}/decision",
                {"decision": "approve", "reason": "profile"},
                content_type="application/json",
                headers=reviewer,
            )
            elapsed = (time.perf_counter() - t0) * 1000
            if profiled:
                profiler.disable()
        if response.status_code != 201:
            raise RuntimeError(f"decision failed: {response.status_code} {response.content[:300]!r}")
        times.append(elapsed)
        queries.append(len(ctx))
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).sort_stats("cumulative")
    stats.print_stats(args.top)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stats.dump_stats(str(OUT_DIR / "decision_profile.prof"))
    print(out.getvalue())
    summary = {
        "samples": args.samples,
        "median_ms": round(statistics.median(times), 2),
        "min_ms": round(min(times), 2),
        "queries_median": statistics.median(queries),
    }
    (OUT_DIR / "decision_profile.json").write_text(json.dumps(summary, indent=2))
    print(
        f"decision POST in-process: median {summary['median_ms']} ms (min {summary['min_ms']}), "
        f"SQL queries {summary['queries_median']} (median of {args.samples}, Django test client, live PostgreSQL)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
