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
Gatehouse's threads/s against ``langgraph dev``'s. Both servers stay up and
are measured in ``--rounds`` alternating rounds, the idle one paused (SIGSTOP),
so a drift of the machine's speed favours neither. Results:
``var/bench/sdk_wait.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
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
    paused,
    redis_forget,
    split,
    wait_until,
    worker_proc,
)

RESUME = {"decision": "approve", "reason": "bench", "reviewer": "bench"}
# Both servers serve the same graphs: the demo loan graph and a graph whose subgraph pauses (stream parity).
GRAPHS = ROOT / "bench" / "lgdev" / "gatehouse.json"
TARGET_MS = 100.0
TARGET_RATIO = 10.0  # threads/s against langgraph dev on the same script


@dataclass
class Side:
    """One server under the script, and what its calls took so far (over every round)."""

    name: str
    url: str
    operator_key: str | None
    reviewer_key: str | None
    procs: list[Proc]
    to_interrupt: list[float] = field(default_factory=list)
    resumes: list[float] = field(default_factory=list)
    wall: float = 0.0
    threads: int = 0

    def summary(self) -> dict[str, Any]:
        calls = self.to_interrupt + self.resumes
        return {
            "n": self.threads,
            "wait_to_interrupt_median_ms": round(statistics.median(self.to_interrupt), 1),
            "wait_resume_median_ms": round(statistics.median(self.resumes), 1),
            "wait_call_median_ms": round(statistics.median(calls), 1),
            "threads_per_s": round(self.threads / self.wall, 2),
        }


def sequential(side: Side, n: int, *, measured: bool = True) -> None:
    """n threads one after another: each ``runs.wait``'s latency, and the wall time, added to ``side``."""
    from langgraph_sdk import get_sync_client

    op = get_sync_client(url=side.url, api_key=side.operator_key, timeout=120)
    rv = get_sync_client(url=side.url, api_key=side.reviewer_key, timeout=120) if side.reviewer_key else op
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
    if measured:
        side.wall += time.perf_counter() - t_start
        side.threads += n
        side.to_interrupt += to_interrupt
        side.resumes += resumes


@contextlib.contextmanager
def gatehouse(args: argparse.Namespace) -> Iterator[Side]:
    from demo.fakebank import serve_in_thread

    # A scenario may keep its own logs (sdk_crowd does): the next scenario's stack would overwrite these.
    run_dir = OUT_DIR / getattr(args, "run_dir", "run-sdk")
    run_dir.mkdir(parents=True, exist_ok=True)
    queue = f"gatehouse-sdk-{uuid.uuid4().hex[:8]}"
    bank = serve_in_thread(latency_ms=0.0)
    env = bench_env(args.db, queue, bank.url, run_dir / "var")
    env["GATEHOUSE_GRAPHS"] = str(GRAPHS)  # the graphs langgraph dev serves too
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
        yield Side("gatehouse /lg/", f"http://127.0.0.1:{port}/lg", tokens["operator"], tokens["reviewer"], procs)
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


class Unavailable(Exception):
    """``langgraph dev`` could not be run here: the report says why, the Gatehouse half stands."""


@contextlib.contextmanager
def langgraph_dev(args: argparse.Namespace) -> Iterator[Side]:
    """The same script against ``langgraph dev`` (in-memory); ``Unavailable`` when it cannot start."""
    python = args.langgraph_dev_python
    if not python or not Path(python).exists():
        raise Unavailable("not run: no Python with langgraph-cli[inmem] given (--langgraph-dev-python)")
    if not (Path(python).parent / "langgraph").exists():  # a virtualenv whose install failed (make lgdev)
        raise Unavailable(f"not run: {python} has no langgraph-cli (make lgdev installs it)")
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

        try:
            wait_until(up, timeout=120, interval=0.5, what="langgraph dev up")
        except Exception as exc:
            raise Unavailable(f"not run: {exc}"[:2000]) from exc
        yield Side("langgraph dev", f"http://127.0.0.1:{port}", None, None, [proc])
    finally:
        proc.stop()
        bank.shutdown()
        shutil.rmtree(ROOT / ".langgraph_api", ignore_errors=True)  # langgraph dev's in-memory store dump


@contextlib.contextmanager
def both_servers(args: argparse.Namespace) -> Iterator[tuple[Side, Side | str]]:
    """Gatehouse ``/lg/`` and ``langgraph dev`` up together; in place of the latter, why it could not start."""
    log("gatehouse /lg/ and langgraph dev: starting")
    with contextlib.ExitStack() as stack:
        mine = stack.enter_context(gatehouse(args))
        try:
            theirs: Side | str = stack.enter_context(langgraph_dev(args))
        except Unavailable as exc:
            theirs = str(exc)
        yield mine, theirs


def servers_arguments(parser: argparse.ArgumentParser, *, db: str) -> None:
    """What ``gatehouse`` and ``langgraph_dev`` read: Gatehouse's database, and the Python to run langgraph dev."""
    parser.add_argument("--db", default=db)
    parser.add_argument(
        "--langgraph-dev-python",
        default=os.environ.get("LANGGRAPH_DEV_PYTHON", ""),
        help="a Python that has langgraph-cli[inmem] installed (or $LANGGRAPH_DEV_PYTHON)",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per server (default 3)")
    servers_arguments(parser, db="gatehouse_bench_sdk")
    args = parser.parse_args()
    theirs: Side | str
    with contextlib.ExitStack() as stack:
        log("gatehouse /lg/: starting")
        mine = stack.enter_context(gatehouse(args))
        log("langgraph dev: starting")
        try:
            theirs = stack.enter_context(langgraph_dev(args))
        except Unavailable as exc:
            theirs = str(exc)
        sides = [mine] + ([theirs] if isinstance(theirs, Side) else [])
        for side in sides:
            with paused([p for other in sides if other is not side for p in other.procs]):
                sequential(side, args.warmup, measured=False)
        # Alternating rounds (AB, BA, ...), the idle server paused: both see the same phases of the machine.
        sizes = split(args.threads, args.rounds)
        log(f"{' and '.join(s.name for s in sides)}: {'/'.join(map(str, sizes))} threads one at a time, alternating")
        for i, n in enumerate(sizes):
            for side in sides if i % 2 == 0 else sides[::-1]:
                with paused([p for other in sides if other is not side for p in other.procs]):
                    sequential(side, n)
    report_mine = mine.summary()
    report_theirs = theirs.summary() if isinstance(theirs, Side) else theirs
    print(f"\ngatehouse /lg/ : {report_mine}")
    print(f"langgraph dev  : {report_theirs}")
    met = report_mine["wait_call_median_ms"] <= TARGET_MS
    print(
        f"target runs.wait ≤ {TARGET_MS:.0f} ms per call (median): {report_mine['wait_call_median_ms']} ms — "
        f"{'met' if met else 'MISSED'}"
    )
    report: dict[str, Any] = {
        "gatehouse": report_mine,
        "langgraph_dev": report_theirs,
        "rounds": len(split(args.threads, args.rounds)),
        "target_ms": TARGET_MS,
        "target_met": met,
    }
    if isinstance(report_theirs, dict):
        ratio = report_mine["threads_per_s"] / report_theirs["threads_per_s"]
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
