"""Many langgraph-sdk clients at once: every call answered in time, none with a 5xx.

    .venv/bin/python bench/sdk_crowd.py [--clients 40] [--threads 6]

Gatehouse's stack as in sdk_wait.py (a fresh database, a Celery worker, daphne with the production
settings and its pool of ``GATEHOUSE_DB_POOL_MAX`` connections, 20). ``--clients`` official sync
clients at once, each taking ``--threads`` loans through ``/lg/``: ``threads.create``, then to the
interrupt by ``runs.stream`` (values and updates, to ``end``) or ``runs.wait`` in turn, then the
reviewer's resume by ``runs.wait``. More clients wait at once than the web process has pooled
connections. Before round 24 a waiting or streaming request held its connection through its wait,
and a stream whose client left at ``end`` never gave its connection back: 19 of 240 loans here got a
500. Prints the loans finished, the errors by kind and the most connections the bench database had;
exits 1 on any error or any call slower than ``SLOW_CALL_S`` (named, with its run's account from the
database). Results: ``var/bench/sdk_crowd.json``; the stack's logs: ``var/bench/run-sdk-crowd/``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import OUT_DIR, PG_SERVER, loan_input, log  # noqa: E402
from bench.sdk_wait import RESUME, gatehouse  # noqa: E402

DB = "gatehouse_bench_crowd"


SLOW_CALL_S = 10.0  # far above any call's ordinary time here (under 2 s with 40 clients at once)


@dataclass
class Call:
    """One SDK call as its client saw it: what it was, on which thread, when it began and what it took."""

    kind: str
    thread_id: str
    began: float  # seconds since the crowd started
    seconds: float
    error: str = ""


class Crowd:
    """What the clients did: loans finished, errors by kind, and every call's time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.finished = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.calls: list[Call] = []
        self.t0 = time.perf_counter()

    def timed(self, kind: str, thread_id: str, call: Callable[[], Any]) -> Any:
        """``call()``, its time recorded: a call that hangs is named by kind and thread, not only counted."""
        began = time.perf_counter()
        error = ""
        try:
            return call()
        except Exception as exc:
            error = type(exc).__name__
            raise
        finally:
            ended = time.perf_counter()
            with self.lock:
                self.calls.append(Call(kind, thread_id, round(began - self.t0, 3), round(ended - began, 3), error))

    def client(self, url: str, operator_key: str, reviewer_key: str, threads: int) -> None:
        from langgraph_sdk import get_sync_client

        with (
            get_sync_client(url=url, api_key=operator_key, timeout=120) as op,
            get_sync_client(url=url, api_key=reviewer_key, timeout=120) as rv,
        ):
            for i in range(threads):
                try:
                    self._loan(op, rv, streamed=i % 2 == 1)
                except Exception as exc:  # counted, not raised: the run reports every failure
                    with self.lock:
                        self.errors[f"{type(exc).__name__}: {str(exc).split(' for url ')[0][:120]}"] += 1
                else:
                    with self.lock:
                        self.finished += 1

    def _loan(self, op: Any, rv: Any, *, streamed: bool) -> None:
        thread = self.timed("threads.create", "", lambda: op.threads.create()["thread_id"])
        if streamed:
            events = self.timed(
                "runs.stream",
                thread,
                lambda: [
                    p.event
                    for p in op.runs.stream(
                        thread, "loan_approval", input=loan_input(), stream_mode=["values", "updates"]
                    )
                ],
            )
            if events[-1:] != ["end"]:
                raise RuntimeError(f"the stream did not end: {events[-3:]}")
        elif not self.timed("runs.wait", thread, lambda: op.runs.wait(thread, "loan_approval", input=loan_input())).get(
            "__interrupt__"
        ):
            raise RuntimeError("the thread did not pause")
        final = self.timed(
            "runs.wait resume", thread, lambda: rv.runs.wait(thread, "loan_approval", command={"resume": RESUME})
        )
        if final.get("status") != "disbursed":
            raise RuntimeError(f"the loan ended {final.get('status')!r}")


def runs_of(db: str, thread_ids: list[str]) -> list[dict[str, Any]]:
    """The server's account of each run on ``thread_ids``: when it was created, sent, claimed and finished
    (ms after its creation) and how many times it was claimed. A slow call whose run finished at once was
    not told; one whose run was claimed late was not sent, or not taken."""
    import psycopg

    if not thread_ids:
        return []
    with psycopg.connect(f"{PG_SERVER}/{db}", autocommit=True) as conn:
        rows = conn.execute(
            """
            SELECT thread_id::text, id::text, kind, status, attempts, created_at,
                   EXTRACT(EPOCH FROM dispatched_at - created_at) * 1000,
                   EXTRACT(EPOCH FROM started_at - created_at) * 1000,
                   EXTRACT(EPOCH FROM finished_at - created_at) * 1000
            FROM runtime_run WHERE thread_id::text = ANY(%s) ORDER BY created_at
            """,
            [thread_ids],
        ).fetchall()
    ms = lambda v: None if v is None else round(float(v), 1)  # noqa: E731
    return [
        {
            "thread_id": r[0],
            "run_id": r[1],
            "kind": r[2],
            "status": r[3],
            "attempts": r[4],
            "created_at": r[5].isoformat(),
            "dispatched_ms": ms(r[6]),
            "claimed_ms": ms(r[7]),
            "finished_ms": ms(r[8]),
        }
        for r in rows
    ]


def connections_peak(db: str, stop: threading.Event, peak: list[int]) -> None:
    """The most connections ``db`` had, sampled every 0.2 s until ``stop``."""
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        while not stop.wait(0.2):
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [db]).fetchone()
            peak[0] = max(peak[0], int(row[0]) if row else 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--threads", type=int, default=6, help="loans per client")
    parser.add_argument("--db", default=DB)
    args = parser.parse_args()
    crowd = Crowd()
    log("starting the stack")  # each phase timestamped: a slow run tells which phase was slow
    # Its own logs (var/bench/run-sdk-crowd/): the next scenario's stack does not overwrite them.
    with gatehouse(argparse.Namespace(db=args.db, run_dir="run-sdk-crowd")) as side:
        log(f"stack up; {args.clients} clients, {args.threads} loans each")
        assert side.operator_key and side.reviewer_key  # noqa: S101 - gatehouse() makes both users
        stop, peak = threading.Event(), [0]
        watcher = threading.Thread(target=connections_peak, args=(args.db, stop, peak), daemon=True)
        watcher.start()
        t0 = crowd.t0 = time.perf_counter()
        clients = [
            threading.Thread(target=crowd.client, args=(side.url, side.operator_key, side.reviewer_key, args.threads))
            for _ in range(args.clients)
        ]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        wall = time.perf_counter() - t0
        stop.set()
        watcher.join()
        slow = sorted((c for c in crowd.calls if c.seconds >= SLOW_CALL_S), key=lambda c: -c.seconds)
        slow_runs = runs_of(args.db, sorted({c.thread_id for c in slow if c.thread_id}))
        log("loans done; stopping the stack")
    log("stack stopped")
    result = {
        "clients": args.clients,
        "loans": args.clients * args.threads,
        "finished": crowd.finished,
        "errors": dict(crowd.errors),
        "seconds": round(wall, 1),
        "loans_per_s": round(crowd.finished / wall, 2),
        "connections_peak": peak[0],
        "calls": len(crowd.calls),
        "slowest_calls": [asdict(c) for c in sorted(crowd.calls, key=lambda c: -c.seconds)[:5]],
        "slow_call_runs": slow_runs,
    }
    print(
        f"{args.clients} clients at once: {crowd.finished} of {result['loans']} loans finished in {wall:.1f}s "
        f"({result['loans_per_s']}/s); the bench database's connections peaked at {peak[0]}"
    )
    for kind, count in crowd.errors.most_common():
        print(f"  {count} × {kind}")
    for call in slow:
        print(f"  slow call: {call.kind} on {call.thread_id or '-'} took {call.seconds:.1f}s from {call.began:.1f}s")
    for run in slow_runs:
        print(
            f"    its thread's run {run['run_id']} ({run['kind']}, {run['status']}, claimed {run['attempts']}×): "
            f"sent +{run['dispatched_ms']} ms, claimed +{run['claimed_ms']} ms, finished +{run['finished_ms']} ms"
        )
    # A call far slower than the rest is a miss too: a stream that died mid-response answered no 5xx, and
    # its client waited out its 120 s timeout (rounds 33–34: the crowd took 130 s and was reported met).
    ok = not crowd.errors and crowd.finished == result["loans"] and not slow
    print(f"target: every call answered within {SLOW_CALL_S:.0f}s, none with a 5xx — {'met' if ok else 'MISSED'}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "sdk_crowd.json").write_text(json.dumps(result, indent=2))
    print(f"results written to {OUT_DIR / 'sdk_crowd.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
