"""Audited transactions/s with 1, 2 and 4 worker processes, beside the same transactions without the audit row.

    .venv/bin/python bench/audit_scaling.py [--processes 1,2,4] [--seconds 5] [--rounds 3] [--chains 8]

Self-contained: it recreates a PostgreSQL database (``gatehouse_bench_audit``),
runs the migrations, adds one small table (``bench_audit_row``) and starts the
largest number of worker processes asked for: separate OS processes, each with
Django set up and its own database connection. Each trial runs one
transaction shape on the first K workers at once for ``--seconds``, after a
warm-up, and counts commits:

- ``plain``: insert a small row (the baseline: no audit row);
- ``audited 1 chain``: the same row and its audit event through
  ``approvals.audit.audit_record``, as the product writes them
  (``GATEHOUSE_AUDIT_CHAINS=1``: every audited transaction in the cluster
  appends to one chain under one lock, as before the chain was partitioned);
- ``audited N chains``: the same with ``--chains`` chains (the default setting).

Each event's thread is a fresh UUID, so events spread over the chains as a
cluster's threads do. Modes alternate within every round and the median of the
rounds is reported, so load from other processes on the machine hits every
mode alike. Afterwards the whole trail is verified (``audit_chain_check``):
concurrent appends must leave every chain intact.

Target: with the most processes, workers wait for the chain lock at most 20%
of the time (with one chain they wait most of it, and audited tx/s stops
growing with processes). What limits tx/s beyond the lock on a loaded 2-core
machine is its CPUs; the speed-ups are printed beside the target.

Results: a table on stdout (tx/s, latency, ratio to ``plain`` with the same
number of processes, speed-up over one process, and the share of the workers'
time spent waiting for an advisory lock, sampled from ``pg_stat_activity``
every 20 ms: how much the chain lock serialises them, whatever else the CPUs
are doing) and ``var/bench/audit_scaling.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.full_cycle import PG_SERVER, REDIS_URL, db_drop, db_recreate, log, manage, percentile  # noqa: E402

OUT_DIR = ROOT / "var" / "bench"
LOCK_WAIT_TARGET = 0.2  # share of the workers' time waiting for the chain lock, at the most processes
ROW_TABLE = "CREATE TABLE IF NOT EXISTS bench_audit_row (id bigserial PRIMARY KEY, thread uuid, payload text)"


# --- one worker process ----------------------------------------------------------------------


def transaction_once(audited: bool, n: int) -> None:
    """One audited change as the product makes it: the row, then its audit event, in one transaction."""
    from django.db import connection, transaction

    from approvals.audit import audit_record

    thread = uuid.uuid4()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO bench_audit_row (thread, payload) VALUES (%s, %s) RETURNING id", [thread, f"row {n}"]
            )
            row_id = cursor.fetchone()[0]
        if audited:
            audit_record(
                actor=None,
                actor_label="bench",
                action="bench.write",
                subject_type="bench_row",
                subject_id=row_id,
                thread_id=thread,
                graph="bench",
                details={"n": n, "amount": 20000, "decision": "approve"},
            )


def worker_main() -> int:
    """Read one trial per line on stdin ({"mode", "chains", "start", "seconds"}); answer one result line each."""
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    with connection.cursor() as cursor:  # the backend this process keeps (a pool of its own, one thread)
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    print(json.dumps({"ready": os.getpid(), "backend": backend}), flush=True)
    n = 0
    for line in sys.stdin:
        trial = json.loads(line)
        if trial.get("stop"):
            break
        audited = trial["mode"] != "plain"
        settings.GATEHOUSE_AUDIT_CHAINS = trial["chains"]  # read by audit_record on every call
        while time.time() < trial["start"]:  # warm-up until the common start
            transaction_once(audited, n)
            n += 1
        end = trial["start"] + trial["seconds"]
        latencies = []
        while True:
            t0 = time.perf_counter()
            if time.time() >= end:
                break
            transaction_once(audited, n)
            n += 1
            latencies.append((time.perf_counter() - t0) * 1000)
        print(json.dumps({"count": len(latencies), "latencies_ms": latencies}), flush=True)
    return 0


# --- the driver ------------------------------------------------------------------------------


class Worker:
    def __init__(self, env: dict[str, str], index: int, logdir: Path) -> None:
        self.log = open(logdir / f"audit_worker_{index}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            bufsize=1,
        )

    backend_pid = 0  # its PostgreSQL backend, for the lock sampler

    def send(self, message: dict[str, Any]) -> None:
        stdin: IO[str] = self.proc.stdin  # type: ignore[assignment]
        stdin.write(json.dumps(message) + "\n")
        stdin.flush()

    def receive(self) -> dict[str, Any]:
        stdout: IO[str] = self.proc.stdout  # type: ignore[assignment]
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.proc.pid} exited ({self.proc.poll()}); see {self.log.name}")
        return json.loads(line)  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"stop": True})
                self.proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


class LockSampler(threading.Thread):
    """Samples pg_stat_activity every 20 ms during a trial: how many workers wait for an advisory lock.

    The share of worker time spent waiting for the chain lock says how much the
    lock serialises them, whatever the CPUs are busy with.
    """

    def __init__(self, dsn: str, pids: list[int], start_at: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.dsn, self.pids, self.start_at, self.end_at = dsn, pids, start_at, start_at + seconds
        self.samples = self.waiting = 0

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while time.time() < self.start_at:
                time.sleep(0.005)
            while time.time() < self.end_at:
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE wait_event = 'advisory') FROM pg_stat_activity WHERE pid = ANY(%s)",
                    [self.pids],
                ).fetchone()
                self.samples += 1
                self.waiting += row[0] if row else 0
                time.sleep(0.02)

    @property
    def share(self) -> float | None:
        return self.waiting / (self.samples * len(self.pids)) if self.samples else None


def trial(workers: list[Worker], mode: str, chains: int, seconds: float, warmup: float, dsn: str) -> dict[str, Any]:
    start = time.time() + warmup
    sampler = LockSampler(dsn, [w.backend_pid for w in workers], start, seconds)
    sampler.start()
    for worker in workers:
        worker.send({"mode": mode, "chains": chains, "start": start, "seconds": seconds})
    results = [worker.receive() for worker in workers]
    sampler.join(timeout=10)
    latencies = [x for r in results for x in r["latencies_ms"]]
    count = sum(r["count"] for r in results)
    return {
        "mode": mode,
        "processes": len(workers),
        "chains": chains,
        "count": count,
        "tx_per_s": count / seconds,
        "p50_ms": statistics.median(latencies) if latencies else None,
        "p95_ms": percentile(latencies, 95) if latencies else None,
        "lock_wait_share": sampler.share,
    }


def summarise(trials: list[dict[str, Any]], modes: list[str], processes: list[int]) -> list[dict[str, Any]]:
    rows = []
    for k in processes:
        for mode in modes:
            mine = [t for t in trials if t["mode"] == mode and t["processes"] == k]
            rows.append(
                {
                    "processes": k,
                    "mode": mode,
                    "tx_per_s": statistics.median(t["tx_per_s"] for t in mine),
                    "p50_ms": statistics.median(t["p50_ms"] for t in mine),
                    "p95_ms": statistics.median(t["p95_ms"] for t in mine),
                    "lock_wait_share": statistics.median(t["lock_wait_share"] or 0.0 for t in mine),
                    "rounds": [round(t["tx_per_s"], 1) for t in mine],
                }
            )
    by = {(r["processes"], r["mode"]): r for r in rows}
    for r in rows:
        r["vs_plain"] = r["tx_per_s"] / by[(r["processes"], "plain")]["tx_per_s"]
        r["vs_one_process"] = r["tx_per_s"] / by[(processes[0], r["mode"])]["tx_per_s"]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'processes':>9}  {'transaction':<20} {'tx/s':>8} {'p50 ms':>7} {'p95 ms':>7} "
        f"{'vs plain':>9} {'vs 1 proc':>9} {'lock wait':>9}  rounds (tx/s)"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['processes']:>9}  {r['mode']:<20} {r['tx_per_s']:>8.1f} {r['p50_ms']:>7.2f} {r['p95_ms']:>7.2f} "
            f"{r['vs_plain']:>8.2f}x {r['vs_one_process']:>8.2f}x {r['lock_wait_share']:>9.0%}  {r['rounds']}"
        )
    return "\n".join(lines)


def verify_trail() -> dict[str, Any]:
    """Every chain intact after the concurrent appends (in this process, against the bench database)."""
    import django

    django.setup()
    from django.db.models import Count

    from approvals.audit import audit_chain_check
    from approvals.models import AuditEvent

    report = audit_chain_check()
    chains = {}
    if any(f.name == "chain" for f in AuditEvent._meta.get_fields()):
        chains = dict(AuditEvent.objects.values_list("chain").annotate(n=Count("id")).values_list("chain", "n"))
    return {"intact": report.intact, "events": report.checked, "events_per_chain": chains}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--processes", default="1,2,4", help="worker process counts (default 1,2,4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per trial (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each trial (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="trials per mode and process count (default 3)")
    parser.add_argument("--chains", type=int, default=8, help="audit chains of the partitioned mode (default 8)")
    parser.add_argument("--db", default="gatehouse_bench_audit", help="database to recreate")
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards for inspection")
    args = parser.parse_args()
    if args.worker:
        return worker_main()

    processes = sorted({int(p) for p in args.processes.split(",") if p})
    modes = ["plain", "audited 1 chain", f"audited {args.chains} chains"]
    chains_of = {"plain": 1, "audited 1 chain": 1, modes[2]: args.chains}
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    run_dir = OUT_DIR / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GATEHOUSE_", "DJANGO_", "DATABASE_URL"))},
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": f"{PG_SERVER}/{args.db}",
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "GATEHOUSE_VAR_DIR": str(run_dir / "var"),
        "GATEHOUSE_CHANNEL_PREFIX": f"bench-audit-{uuid.uuid4().hex[:6]}",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    os.environ.update(env)
    load_before = load_average()
    workers: list[Worker] = []
    try:
        log(f"recreating database {args.db}")
        db_recreate(args.db)
        manage(env, "migrate", "--noinput", "-v", "0")
        import psycopg

        with psycopg.connect(f"{PG_SERVER}/{args.db}", autocommit=True) as conn:
            conn.execute(ROW_TABLE)
        dsn = f"{PG_SERVER}/{args.db}"
        log(f"starting {max(processes)} worker processes")
        workers = [Worker(env, i, run_dir) for i in range(max(processes))]
        for worker in workers:
            worker.backend_pid = worker.receive()["backend"]
        trials = []
        for number in range(args.rounds):
            for k in processes:
                order = modes[number % len(modes) :] + modes[: number % len(modes)]  # rotate: no mode always first
                for mode in order:
                    result = trial(workers[:k], mode, chains_of[mode], args.seconds, args.warmup, dsn)
                    trials.append(result)
                    log(f"round {number + 1}: {k} processes, {mode}: {result['tx_per_s']:.1f} tx/s")
        for worker in workers:
            worker.stop()
        workers = []
        log("verifying the trail")
        trail = verify_trail()
        rows = summarise(trials, modes, processes)
        load_after = load_average()
        print()
        print(table(rows))
        print()
        top = max(processes)
        by = {(r["processes"], r["mode"]): r for r in rows}
        plain_scale = by[(top, "plain")]["vs_one_process"]
        targets = []
        reference, partitioned = modes[1], modes[2]
        row = by[(top, reference)]  # one chain: the trail before partitioning, for comparison only
        print(
            f"reference (not a target): {reference}, as before partitioning: {top} processes wait for the chain "
            f"lock {row['lock_wait_share']:.0%} of the time; speed-up over 1 process {row['vs_one_process']:.2f}x"
        )
        row = by[(top, partitioned)]
        scale, wait = row["vs_one_process"], row["lock_wait_share"]
        met = wait <= LOCK_WAIT_TARGET
        targets.append(
            {"mode": partitioned, "lock_wait_share": wait, "speed_up": scale, "plain_speed_up": plain_scale, "met": met}
        )
        print(
            f"target: {partitioned} (the default), {top} processes wait for the chain lock at most "
            f"{LOCK_WAIT_TARGET:.0%} of the time ({wait:.0%}): {'met' if met else 'MISSED'}; speed-up over 1 process "
            f"{scale:.2f}x (plain {plain_scale:.2f}x)"
        )
        print(f"trail after the run: {'intact' if trail['intact'] else 'BROKEN'}, {trail['events']} events")
        print(f"load average before {load_before}, after {load_after} ({os.cpu_count()} CPUs)")
        report = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "load_average": {"before": load_before, "after": load_after},
            "config": vars(args),
            "results": rows,
            "trials": trials,
            "targets": targets,
            "trail": trail,
        }
        path = OUT_DIR / "audit_scaling.json"
        path.write_text(json.dumps(report, indent=2))
        print(f"results written to {path}")
        return 0 if trail["intact"] else 1
    finally:
        for worker in workers:
            worker.stop()
        if not args.keep_db:
            try:
                db_drop(args.db)
            except Exception as exc:
                log(f"could not drop {args.db}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
