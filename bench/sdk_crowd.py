"""Many langgraph-sdk clients at once: every call answered, none with a 5xx.

    .venv/bin/python bench/sdk_crowd.py [--clients 40] [--threads 6]

Gatehouse's stack as in sdk_wait.py (a fresh database, a Celery worker, daphne with the production
settings and its pool of ``GATEHOUSE_DB_POOL_MAX`` connections, 20). ``--clients`` official sync
clients at once, each taking ``--threads`` loans through ``/lg/``: ``threads.create``, then to the
interrupt by ``runs.stream`` (values and updates, to ``end``) or ``runs.wait`` in turn, then the
reviewer's resume by ``runs.wait``. More clients wait at once than the web process has pooled
connections. Before round 24 a waiting or streaming request held its connection through its wait,
and a stream whose client left at ``end`` never gave its connection back: 19 of 240 loans here got a
500. Prints the loans finished, the errors by kind and the most connections the bench database had;
exits 1 on any error. Results: ``var/bench/sdk_crowd.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import OUT_DIR, PG_SERVER, loan_input, log  # noqa: E402
from bench.sdk_wait import RESUME, gatehouse  # noqa: E402

DB = "gatehouse_bench_crowd"


class Crowd:
    """What the clients did: loans finished, errors by kind."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.finished = 0
        self.errors: collections.Counter[str] = collections.Counter()

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

    @staticmethod
    def _loan(op: Any, rv: Any, *, streamed: bool) -> None:
        thread = op.threads.create()["thread_id"]
        if streamed:
            events = [
                p.event
                for p in op.runs.stream(thread, "loan_approval", input=loan_input(), stream_mode=["values", "updates"])
            ]
            if events[-1:] != ["end"]:
                raise RuntimeError(f"the stream did not end: {events[-3:]}")
        elif not op.runs.wait(thread, "loan_approval", input=loan_input()).get("__interrupt__"):
            raise RuntimeError("the thread did not pause")
        final = rv.runs.wait(thread, "loan_approval", command={"resume": RESUME})
        if final.get("status") != "disbursed":
            raise RuntimeError(f"the loan ended {final.get('status')!r}")


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
    with gatehouse(argparse.Namespace(db=args.db)) as side:
        log(f"stack up; {args.clients} clients, {args.threads} loans each")
        assert side.operator_key and side.reviewer_key  # noqa: S101 - gatehouse() makes both users
        stop, peak = threading.Event(), [0]
        watcher = threading.Thread(target=connections_peak, args=(args.db, stop, peak), daemon=True)
        watcher.start()
        t0 = time.perf_counter()
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
    }
    print(
        f"{args.clients} clients at once: {crowd.finished} of {result['loans']} loans finished in {wall:.1f}s "
        f"({result['loans_per_s']}/s); the bench database's connections peaked at {peak[0]}"
    )
    for kind, count in crowd.errors.most_common():
        print(f"  {count} × {kind}")
    ok = not crowd.errors and crowd.finished == result["loans"]
    print(f"target: every call answered, none with a 5xx — {'met' if ok else 'MISSED'}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "sdk_crowd.json").write_text(json.dumps(result, indent=2))
    print(f"results written to {OUT_DIR / 'sdk_crowd.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
