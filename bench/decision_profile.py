"""Profile the decision POST and the resume run in-process: Django test client, real PostgreSQL, cProfile.

    .venv/bin/python bench/decision_profile.py [--samples 30] [--top 25] [--sql] [--statements]

Recreates ``gatehouse_bench_profile``, migrates, makes an operator and a
reviewer, then per sample: starts a ``loan_approval`` thread, runs it to its
interrupt in this process (``run_execute``), times one
``POST /api/tasks/{id}/decision`` and then the resume run it queued
(``run_execute`` again: claim, graph, effect, finish). Each step reports its median wall time and
its median CPU time in this process (all its threads), and the local PostgreSQL's mean CPU, over the
samples that are neither profiled nor counted: on a machine whose speed drifts between runs, CPU is
what tells two versions of the code apart. Every other sample counts the step's ORM queries and
psycopg statements instead (counting puts Django's debug cursor, which renders each statement's SQL,
on the path: about 15% of a decision's CPU). The last samples run
under cProfile, one profile per step; the top functions by cumulative time are
printed and the stats saved to ``var/bench/decision_profile.prof`` and
``var/bench/resume_profile.prof``. ``--statements`` prints each statement's wall time per step (where its round
trips go). ``--timeline`` times the resume run phase by phase (claim, state read, graph, store,
effect ledger, finish) and then the raw graph's resume (``bench.full_cycle.baseline_graph``: plain
PostgresSaver and PostgresStore, the bank called directly) with the same clocks on the functions
both call: where a resume's wall time goes beyond LangGraph's own. ``--sql`` prints the SQL of the last
sample's decision and resume: the ORM queries, then every statement psycopg
sent (the checkpointer's included). Runs are executed here, so no worker or
web process is needed.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import io
import json
import os
import pstats
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import (  # noqa: E402
    GRAPH,
    OUT_DIR,
    RESUME,
    _proc_stat,
    _StatementCounter,
    baseline_graph,
    bench_env,
    bench_users,
    db_drop,
    db_recreate,
    loan_input,
    manage,
    redis_forget,
)


def postgres_cpu() -> dict[int, int]:
    """CPU clock ticks used so far by each of this machine's PostgreSQL processes (Linux /proc; empty
    where it cannot be read). A local server on a quiet machine: the bench's statements are then all it runs."""
    ticks = {}
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "comm").read_text().strip() != "postgres":
                continue
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if (fields := _proc_stat(int(entry.name))) is not None:
            ticks[int(entry.name)] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


def postgres_cpu_since(before: dict[int, int]) -> float:
    """Seconds of PostgreSQL CPU since ``before``: per process, so one that ended meanwhile (its ticks
    gone with it) takes nothing off the others'."""
    after = postgres_cpu()
    return sum(ticks - before.get(pid, 0) for pid, ticks in after.items()) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--profiled", type=int, default=10, help="of which the last N run under cProfile")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sql", action="store_true", help="print the SQL of the last decision and resume")
    parser.add_argument("--statements", action="store_true", help="print each statement's wall time per step")
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="time the resume run phase by phase beside the raw graph's resume (its clocks stay on every step)",
    )
    parser.add_argument("--db", default="gatehouse_bench_profile")
    args = parser.parse_args()

    from demo.fakebank import serve_in_thread

    queue = f"gatehouse-profile-{uuid.uuid4().hex[:8]}"
    bank = serve_in_thread(latency_ms=0.0)  # the resume run's disburse calls it
    env = bench_env(args.db, queue, bank.url, OUT_DIR / "run" / "var")
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
        bank.shutdown()
        redis_forget(queue)
        db_drop(args.db)


class _Step:
    """Times, counts and (optionally) profiles one step over the samples."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.profiler = cProfile.Profile()
        self.times: list[float] = []
        self.cpu: list[float] = []  # this process's CPU (all its threads), less drift-prone than wall time
        self.pg_cpu: list[float] = []  # the local PostgreSQL's CPU (all its processes) over the same samples
        self.counted = 0  # samples whose statements were counted
        self.queries: list[int] = []
        self.statements: list[int] = []
        self.last_sql: list[str] = []
        self.last_statements: list[str] = []
        self.by_statement: dict[str, list[float]] = {}  # statement text → its wall times, counted samples

    def run(self, call: Any, *, profiled: bool, counted: bool = True) -> Any:
        """One sample. CPU is taken from samples neither profiled nor ``counted``: counting puts Django's
        debug cursor (which renders every statement's SQL) and a wrapper around each execute on the path."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        if not (profiled or counted):
            pg0 = postgres_cpu()
            t0, c0 = time.perf_counter(), time.process_time()
            value = call()
            self.cpu.append((time.process_time() - c0) * 1000)
            self.times.append((time.perf_counter() - t0) * 1000)
            self.pg_cpu.append(postgres_cpu_since(pg0) * 1000)
            return value
        if profiled:  # the profile shows the step as it runs: no counter on its path
            self.profiler.enable()
            t0 = time.perf_counter()
            value = call()
            self.profiler.disable()
            self.times.append((time.perf_counter() - t0) * 1000)
            return value
        with _StatementCounter() as counter, CaptureQueriesContext(connection) as ctx:
            t0 = time.perf_counter()
            value = call()
            elapsed = (time.perf_counter() - t0) * 1000
        self.times.append(elapsed)
        self.counted += 1
        self.queries.append(len(ctx))
        self.statements.append(counter.count)
        self.last_sql = [q["sql"] for q in ctx.captured_queries]
        self.last_statements = counter.statements
        for sql, seconds in zip(counter.statements, counter.seconds, strict=True):
            self.by_statement.setdefault(" ".join(sql.split())[:90], []).append(seconds * 1000)
        return value

    def statements_report(self) -> None:
        """Each statement's wall time per sample (ms), largest total first: where the step's round trips go."""
        samples = max(self.counted, 1)
        rows = sorted(self.by_statement.items(), key=lambda item: -sum(item[1]))
        total = sum(sum(times) for _, times in rows) / samples
        print(f"=== {self.name}: wall time in execute per sample, by statement ({total:.2f} ms in all)")
        for sql, times in rows:
            per_sample, calls = sum(times) / samples, len(times) / samples
            print(f"{per_sample:>7.2f} ms {calls:>4.1f}× {statistics.median(times):>6.2f}  {sql}")

    def report(self, top: int, path: Path, profiled: int) -> dict[str, Any]:
        if profiled:  # with --profiled 0 the profiler never ran and has no stats to print
            out = io.StringIO()
            stats = pstats.Stats(self.profiler, stream=out).sort_stats("cumulative")
            stats.print_stats(top)
            stats.dump_stats(str(path))
            print(f"=== {self.name}: cProfile, top {top} by cumulative time (stats in {path})")
            print(out.getvalue())
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """Medians over the samples that measured each: None where none did (every sample profiled, say)."""
        return {
            "median_ms": _rounded(statistics.median, self.times),
            "min_ms": _rounded(min, self.times),
            "cpu_median_ms": _rounded(statistics.median, self.cpu),
            "postgres_cpu_mean_ms": _rounded(statistics.mean, self.pg_cpu),
            "queries_median": statistics.median(self.queries) if self.queries else None,
            "statements_median": statistics.median(self.statements) if self.statements else None,
        }


# The phases --timeline clocks, as the resume run calls them (the executor's names are its own imports).
# The last four are LangGraph's and the bank client's, which the raw resume calls too.
_PHASES = (
    ("runtime.executor", "run_claim"),
    ("runtime.executor", "_input_for"),  # the resume guard's state read
    ("runtime.executor", "_stream"),  # the graph, with everything it calls
    ("runtime.run_store", "RecordingStore.batch"),
    ("runtime.run_store", "RecordingStore._record"),  # a read's record
    ("runtime.run_store", "RecordingStore._record_writes"),  # a write's record and its audit row
    ("runtime.effect_ledger", "_intent_insert"),
    ("runtime.effect_ledger", "_result_record"),
    ("runtime.signals", "effect_executed.send"),  # the result's audit row, in the result's transaction
    ("runtime.executor", "run_finish"),
    ("langgraph.checkpoint.postgres", "PostgresSaver.get_tuple"),
    ("langgraph.checkpoint.postgres", "PostgresSaver.put"),
    ("langgraph.checkpoint.postgres", "PostgresSaver.put_writes"),
    ("langgraph.store.postgres.base", "PostgresStore.batch"),
    ("demo.bank_client", "disburse"),
)


class _Timeline:
    """Wall time per phase of a call: each function in ``_PHASES`` wrapped with a clock while installed.

    A phase's time is its calls' total within the sample, its start the first call's offset from the
    sample's start; a clock costs about a microsecond per call. Calls from LangGraph's background
    threads (the checkpoint writes) are clocked too.
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, float, float]] = []
        self.samples: dict[str, list[tuple[float, list[tuple[str, float, float]]]]] = {}
        self._installed: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        for module_name, qualname in _PHASES:
            owner: Any = importlib.import_module(module_name)
            *path, attr = qualname.split(".")
            for part in path:
                owner = getattr(owner, part)
            original = getattr(owner, attr)
            setattr(owner, attr, self._clocked(qualname, original))
            self._installed.append((owner, attr, original))

    def remove(self) -> None:
        for owner, attr, original in reversed(self._installed):
            setattr(owner, attr, original)
        self._installed.clear()

    def _clocked(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        events = self.events

        @functools.wraps(fn)
        def clocked(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                events.append((name, t0, time.perf_counter()))

        return clocked

    def sample(self, system: str, call: Callable[[], Any]) -> Any:
        self.events.clear()
        t0 = time.perf_counter()
        value = call()
        total = (time.perf_counter() - t0) * 1000
        phases = [(name, (start - t0) * 1000, (end - start) * 1000) for name, start, end in self.events]
        self.samples.setdefault(system, []).append((total, phases))
        return value

    def report(self) -> dict[str, Any]:
        """Per system: the median total, and per phase the median first start and median time (ms)."""
        out: dict[str, Any] = {}
        for system, samples in self.samples.items():
            starts: dict[str, list[float]] = {}
            times: dict[str, list[float]] = {}
            for _, phases in samples:
                first: dict[str, float] = {}
                spent: dict[str, float] = {}
                for name, start, ms in phases:
                    first.setdefault(name, start)
                    spent[name] = spent.get(name, 0.0) + ms
                for name in spent:
                    starts.setdefault(name, []).append(first[name])
                    times.setdefault(name, []).append(spent[name])
            total = statistics.median(t for t, _ in samples)
            print(f"=== timeline: {system}, {len(samples)} samples, median {total:.2f} ms")
            print(f"{'starts at':>10} {'takes':>8}  phase (in how many samples)")
            phases_out = {}
            for name in sorted(starts, key=lambda n: statistics.median(starts[n])):
                start, ms = statistics.median(starts[name]), statistics.median(times[name])
                print(f"{start:>10.2f} {ms:>8.2f}  {name} ({len(times[name])})")
                phases_out[name] = {"starts_at_ms": round(start, 2), "median_ms": round(ms, 2)}
            out[system] = {"samples": len(samples), "median_ms": round(total, 2), "phases": phases_out}
        return out


def _raw_resumes(db: str, samples: int, timeline: _Timeline) -> None:
    """The raw graph paused and resumed ``samples`` times (after two unmeasured), each resume clocked."""
    from langgraph.types import Command

    with baseline_graph(db, 4) as graph:
        for i in range(samples + 2):
            config = {"configurable": {"thread_id": str(uuid.uuid4())}}
            graph.invoke(loan_input("Raw Applicant"), config, durability="sync")

            def resume(config: Any = config) -> Any:
                return graph.invoke(Command(resume=RESUME), config, durability="sync")

            out = timeline.sample("raw resume", resume) if i >= 2 else resume()
            if out.get("status") != "disbursed":
                raise RuntimeError(f"raw resume ended {out.get('status')!r}")


def _rounded(stat: Any, values: list[float]) -> float | None:
    return round(stat(values), 2) if values else None


def _measure(args: argparse.Namespace, tokens: dict[str, str]) -> int:
    import django

    django.setup()
    from django.test import Client

    from runtime.executor import run_execute
    from runtime.models import Run, RunStatus

    client = Client(SERVER_NAME="127.0.0.1")
    operator = {"Authorization": f"Bearer {tokens['operator']}"}
    reviewer = {"Authorization": f"Bearer {tokens['reviewer']}"}
    client.get("/api/graphs", headers=operator)
    client.get("/api/graphs", headers=reviewer)

    start = _Step("start run")

    def paused_task() -> str:
        thread_id = client.post(
            "/api/threads",
            {"graph": GRAPH, "input": loan_input(), "metadata": {}},
            content_type="application/json",
            headers=operator,
        ).json()["id"]
        run_id = Run.objects.filter(thread_id=thread_id).values_list("id", flat=True).get()
        start.run(lambda: run_execute(run_id=str(run_id)), profiled=False, counted=counted)
        items = client.get("/api/tasks", {"status": "pending", "thread": thread_id}, headers=reviewer).json()["items"]
        return str(items[0]["id"])

    decision, resume = _Step("decision POST"), _Step("resume run")
    timeline = _Timeline()
    if args.timeline:
        timeline.install()
    counted = True
    for i in range(args.samples):
        profiled = i >= args.samples - args.profiled
        # every other unprofiled sample counts its statements; the others give the CPU (and the profiles:
        # counting's debug cursor would be a sixth of what they show)
        counted = i % 2 == 0 and not profiled
        task_id = paused_task()
        response = decision.run(
            lambda task_id=task_id: client.post(
                f"/api/tasks/{task_id}/decision",
                {"decision": "approve", "reason": "profile"},
                content_type="application/json",
                headers=reviewer,
            ),
            profiled=profiled,
            counted=counted,
        )
        if response.status_code != 201:
            raise RuntimeError(f"decision failed: {response.status_code} {response.content[:300]!r}")
        run_id = response.json()["run_id"]

        def execute(run_id: str = run_id, clocked: bool = args.timeline and not (profiled or counted)) -> None:
            if clocked:  # the samples that give the CPU: no profiler or counter beside the clocks
                timeline.sample("gatehouse resume run", lambda: run_execute(run_id=str(run_id)))
            else:
                run_execute(run_id=str(run_id))

        resume.run(execute, profiled=profiled, counted=counted)
        status = Run.objects.values_list("status", flat=True).get(pk=run_id)
        if status != RunStatus.SUCCEEDED:
            raise RuntimeError(f"resume run {run_id} ended {status}")
    if args.timeline:
        _raw_resumes(args.db, len(timeline.samples.get("gatehouse resume run", [])), timeline)
        timeline.remove()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "samples": args.samples,
        "decision_post": decision.report(args.top, OUT_DIR / "decision_profile.prof", args.profiled),
        "resume_run": resume.report(args.top, OUT_DIR / "resume_profile.prof", args.profiled),
    }
    summary["start_run"] = start.summary()
    # Kept for readers of the old file: the decision POST's numbers at the top level.
    summary.update({k: summary["decision_post"][k] for k in ("median_ms", "min_ms", "queries_median")})
    (OUT_DIR / "decision_profile.json").write_text(json.dumps(summary, indent=2))
    if args.sql:
        for step in (start, decision, resume):
            print(f"=== SQL of the last {step.name} ({len(step.last_sql)} ORM queries)")
            for n, sql in enumerate(step.last_sql, 1):
                print(f"{n:>3}. {sql[:400]}")
            print(f"=== every psycopg statement of the last {step.name} ({len(step.last_statements)})")
            for n, sql in enumerate(step.last_statements, 1):
                print(f"{n:>3}. {' '.join(sql.split())[:200]}")
    if args.statements:
        for step in (start, decision, resume):
            step.statements_report()
    if args.timeline:
        summary["timeline"] = timeline.report()
        (OUT_DIR / "decision_profile.json").write_text(json.dumps(summary, indent=2))
    start_summary = summary["start_run"]
    print(
        f"start run (to the interrupt) in-process: median {start_summary['median_ms']} ms, CPU "
        f"{start_summary['cpu_median_ms']} ms (PostgreSQL {start_summary['postgres_cpu_mean_ms']} ms), ORM queries "
        f"{start_summary['queries_median']}, psycopg statements {start_summary['statements_median']}"
    )
    for step in (decision, resume):
        s = summary["decision_post" if step is decision else "resume_run"]
        print(
            f"{step.name} in-process: median {s['median_ms']} ms (min {s['min_ms']}), CPU {s['cpu_median_ms']} ms "
            f"(PostgreSQL {s['postgres_cpu_mean_ms']} ms; samples neither profiled nor counted), ORM queries "
            f"{s['queries_median']}, psycopg statements {s['statements_median']} (median of the counted samples)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
