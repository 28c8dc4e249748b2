"""langgraph-sdk scenario: ``runs.wait`` to the interrupt, then a resume, one thread at a time.

    .venv/bin/python bench/sdk_wait.py [--threads 30] [--langgraph-dev-python PATH]

Gatehouse side: a fresh database, a Celery worker and daphne (as in
full_cycle.py); the official ``langgraph_sdk`` sync client against ``/lg/``:
``threads.create``, ``runs.wait(input=…)`` until the gate's interrupt, then
``runs.wait(command={"resume": …})`` as a reviewer until the loan is disbursed.

Beside it, the same script against ``langgraph dev`` serving the same graph
(bench/lgdev/langgraph.json), when a Python with ``langgraph-cli[inmem]`` is
given (``--langgraph-dev-python``; the ``bench`` extra cannot hold it, see
docs/performance.md). Targets: each ``runs.wait`` ≤ 100 ms (median), and
Gatehouse's threads/s against ``langgraph dev``'s. Results:
``var/bench/sdk_wait.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import uuid
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

RESUME = {"decision": "approve", "reason": "bench", "reviewer": "bench"}
TARGET_MS = 100.0
TARGET_RATIO = 10.0  # threads/s against langgraph dev on the same script


def sequential(url: str, operator_key: str | None, reviewer_key: str | None, n: int) -> dict[str, Any]:
    """n threads one after another; per-call latency of both runs.wait and threads/s."""
    from langgraph_sdk import get_sync_client

    op = get_sync_client(url=url, api_key=operator_key, timeout=120)
    rv = get_sync_client(url=url, api_key=reviewer_key, timeout=120) if reviewer_key else op
    assistant = op.assistants.search(graph_id="loan_approval")[0]["assistant_id"]
    to_interrupt, resumes = [], []
    t_start = time.perf_counter()
    for _ in range(n):
        thread = op.threads.create()
        t0 = time.perf_counter()
        paused: Any = op.runs.wait(thread["thread_id"], assistant, input=loan_input())
        t1 = time.perf_counter()
        if not paused.get("__interrupt__"):
            raise RuntimeError(f"thread did not pause: {str(paused)[:300]}")
        final: Any = rv.runs.wait(thread["thread_id"], assistant, command={"resume": RESUME})
        t2 = time.perf_counter()
        if final.get("status") != "disbursed":
            raise RuntimeError(f"thread ended with {final.get('status')!r}")
        to_interrupt.append((t1 - t0) * 1000)
        resumes.append((t2 - t1) * 1000)
    wall = time.perf_counter() - t_start
    calls = to_interrupt + resumes
    return {
        "n": n,
        "wait_to_interrupt_median_ms": round(statistics.median(to_interrupt), 1),
        "wait_resume_median_ms": round(statistics.median(resumes), 1),
        "wait_call_median_ms": round(statistics.median(calls), 1),
        "threads_per_s": round(n / wall, 2),
    }


def gatehouse(args: argparse.Namespace) -> dict[str, Any]:
    from demo.fakebank import serve_in_thread

    run_dir = OUT_DIR / "run-sdk"
    run_dir.mkdir(parents=True, exist_ok=True)
    queue = f"gatehouse-sdk-{uuid.uuid4().hex[:8]}"
    bank = serve_in_thread(latency_ms=0.0)
    env = bench_env(args.db, queue, bank.url, run_dir / "var")
    procs: list[Proc] = []
    db_recreate(args.db)
    try:
        manage(env, "migrate", "--noinput", "-v", "0")
        tokens = bench_users(env)
        worker, ready = worker_proc(env, queue, run_dir)
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
                response = httpx.post(f"http://127.0.0.1:{port}/lg/assistants/search", json={}, timeout=2)
                return response.status_code == 401
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=90, interval=0.2, what="daphne up")
        url = f"http://127.0.0.1:{port}/lg"
        sequential(url, tokens["operator"], tokens["reviewer"], args.warmup)
        return sequential(url, tokens["operator"], tokens["reviewer"], args.threads)
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


def langgraph_dev(args: argparse.Namespace) -> dict[str, Any] | str:
    """The same script against ``langgraph dev`` (in-memory), or why it could not run."""
    python = args.langgraph_dev_python
    if not python or not Path(python).exists():
        return "not run: no Python with langgraph-cli[inmem] given (--langgraph-dev-python)"
    from demo.fakebank import serve_in_thread

    port = free_port()
    bank = serve_in_thread(latency_ms=0.0)
    # Django is set up in the server only so the demo graph imports; it never touches the database.
    env = {
        **bench_env(args.db, "unused", bank.url, OUT_DIR / "run-sdk" / "var"),
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "PYTHONPATH": str(ROOT),
    }
    logdir = OUT_DIR / "run-sdk"
    logdir.mkdir(parents=True, exist_ok=True)
    proc = Proc(
        "langgraph-dev",
        [
            str(Path(python).parent / "langgraph"),
            "dev",
            "--no-browser",
            "--no-reload",
            "--port",
            str(port),
            "--config",
            str(ROOT / "bench" / "lgdev" / "langgraph.json"),
        ],
        env,
        logdir,
    )
    try:
        import httpx

        def up() -> bool:
            if not proc.alive:
                raise RuntimeError(f"langgraph dev exited:\n{proc.tail()}")
            try:
                return httpx.get(f"http://127.0.0.1:{port}/ok", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=120, interval=0.5, what="langgraph dev up")
        url = f"http://127.0.0.1:{port}"
        sequential(url, None, None, args.warmup)
        return sequential(url, None, None, args.threads)
    except Exception as exc:  # report, keep the Gatehouse half
        return f"not run: {exc}"[:2000]
    finally:
        proc.stop()
        bank.shutdown()
        shutil.rmtree(ROOT / ".langgraph_api", ignore_errors=True)  # langgraph dev's in-memory store dump


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--db", default="gatehouse_bench_sdk")
    parser.add_argument(
        "--langgraph-dev-python",
        default=os.environ.get("LANGGRAPH_DEV_PYTHON", ""),
        help="a Python that has langgraph-cli[inmem] installed (or $LANGGRAPH_DEV_PYTHON)",
    )
    args = parser.parse_args()
    log(f"gatehouse /lg/: {args.threads} threads one at a time")
    mine = gatehouse(args)
    log("langgraph dev: the same script")
    theirs = langgraph_dev(args)
    print(f"\ngatehouse /lg/ : {mine}")
    print(f"langgraph dev  : {theirs}")
    met = mine["wait_call_median_ms"] <= TARGET_MS
    print(
        f"target runs.wait ≤ {TARGET_MS:.0f} ms per call (median): {mine['wait_call_median_ms']} ms — "
        f"{'met' if met else 'MISSED'}"
    )
    report: dict[str, Any] = {"gatehouse": mine, "langgraph_dev": theirs, "target_ms": TARGET_MS, "target_met": met}
    if isinstance(theirs, dict):
        ratio = mine["threads_per_s"] / theirs["threads_per_s"]
        report["ratio_threads_per_s"] = round(ratio, 2)
        print(
            f"target gatehouse / langgraph dev threads/s ≥ {TARGET_RATIO:.0f}x: {ratio:.2f}x — "
            + ("met" if ratio >= TARGET_RATIO else "MISSED")
        )
    (OUT_DIR / "sdk_wait.json").write_text(json.dumps(report, indent=2))
    print(f"results written to {OUT_DIR / 'sdk_wait.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
