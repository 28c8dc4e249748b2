"""Console at scale (issue 6, scenario 4): inbox and audit pages over 100k pending tasks and 1M audit events.

    .venv/bin/python bench/console_scale.py [--tasks 100000] [--events 1000000] [--samples 60]

Recreates a PostgreSQL database (``gatehouse_bench_scale``), migrates it fully,
drops the indexes ``approvals.0005_console_scale_indexes`` added, bulk-loads the data
(threads and tasks with ``INSERT … SELECT generate_series``; audit events
with a valid hash chain computed by ``approvals.audit.event_hash`` and sent
with ``COPY``), then measures server time of each page with Django's test
client in this process (the whole middleware stack, session auth, templates;
no network), beside a trivial login-required view in the same run:

- inbox: first page, a deep keyset page (cursor at the middle of the set),
  filtered pages (graph; due-soonest sort);
- audit: first page, a deep page (``before`` = the middle id), filtered pages
  (action; graph).

It measures once without those indexes ("before") and once after creating
them again with the definitions PostgreSQL reported for them ("after"). The
schema is never migrated backwards: later migrations (data migrations, role
definitions) need today's tables. Then it exports all events through
``GET /api/audit/export`` in a child process and reports that process's RSS
high-water mark (``resource.getrusage``), its growth over the process before
the export, the rows and bytes, and the throughput. Results: a table on
stdout and ``var/bench/console_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import types
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import OUT_DIR, bench_env, db_drop, db_migrated, log, percentile  # noqa: E402

SCALE_MIGRATION = "0005_console_scale_indexes"  # the indexes measured before/after
TARGET_MS = 50.0
EXPORT_TARGET_MB = 200.0
GRAPHS = ("loan_approval", "kyc_onboarding")


# --- data ------------------------------------------------------------------------------------


def load_tasks(cursor: Any, n_tasks: int, n_threads: int) -> None:
    cursor.execute(
        """
        INSERT INTO runtime_thread (id, graph, status, metadata, values, checkpoint_id, error, created_at,
                                    updated_at, fence)
        SELECT md5('thread' || g)::uuid, CASE WHEN g %% 4 = 0 THEN 'kyc_onboarding' ELSE 'loan_approval' END,
               'interrupted', jsonb_build_object('case', 'C-' || g, 'applicant', 'Applicant ' || g), '{}'::jsonb,
               '', '', now() - make_interval(secs => g), now(), 1
        FROM generate_series(1, %s) AS g
        """,
        [n_threads],
    )
    cursor.execute(
        """
        INSERT INTO approvals_approvaltask (id, thread_id, graph, node, kind, interrupt_id, checkpoint_id,
                                            checkpoint_ns, payload, payload_digest, title, status, due_at,
                                            required_approvals, created_at, correlation_key, escalation_reason)
        SELECT md5('task' || g)::uuid, md5('thread' || (g %% %s + 1))::uuid,
               CASE WHEN (g %% %s + 1) %% 4 = 0 THEN 'kyc_onboarding' ELSE 'loan_approval' END,
               CASE WHEN g %% 3 = 0 THEN 'compliance_review' ELSE 'human_review' END, 'interrupt',
               'int-' || g, 'cp-' || g, '', jsonb_build_object('amount', g %% 50000, 'risk', (g %% 100) / 100.0),
               md5('payload' || g), 'Review case ' || g, 'pending',
               CASE WHEN g %% 5 = 0 THEN NULL ELSE now() + make_interval(mins => g %% 10000) END,
               1, now() - make_interval(secs => g), '', ''
        FROM generate_series(1, %s) AS g
        """,
        [n_threads, n_threads, n_tasks],
    )


def load_events(cursor: Any, n: int, thread_ids: list[str]) -> str:
    """COPY ``n`` chained events into chain 0 (hashed as before partitioning: no chain or id to draw); returns the
    head hash. Hashes come from approvals.audit itself."""
    from approvals.audit import GENESIS, event_fields, event_hash
    from approvals.models import AuditEvent

    actions = [
        "task.opened",
        "run.claimed",
        "run.interrupted",
        "task.decided",
        "effect.executed",
        "thread.completed",
        "task.claimed",
        "run.queued",
    ]
    base = datetime.now(UTC) - timedelta(days=30)
    cursor.execute("SELECT hash FROM approvals_auditevent WHERE chain = 0 ORDER BY id DESC LIMIT 1")
    prev = (cursor.fetchone() or (GENESIS,))[0]  # after the migrations' own events
    columns = "chain, at, actor_label, action, subject_type, subject_id, thread_id, graph, details, prev_hash, hash"
    with cursor.copy(f"COPY approvals_auditevent ({columns}) FROM STDIN") as copy:
        for i in range(n):
            thread = thread_ids[i % len(thread_ids)]
            graph = GRAPHS[i % 7 == 0]
            event = AuditEvent(
                at=base + timedelta(milliseconds=i * 2),
                actor_label=f"user{i % 40}",
                action=actions[i % len(actions)],
                subject_type="task",
                subject_id=str(uuid.UUID(int=i + 1)),
                thread_id=thread,
                graph=graph,
                details={"n": i, "reason": "bulk", "amount": i % 50000},
            )
            digest = event_hash(event_fields(event), prev)
            copy.write_row(
                (
                    0,
                    event.at,
                    event.actor_label,
                    event.action,
                    event.subject_type,
                    event.subject_id,
                    thread,
                    graph,
                    json.dumps(event.details),
                    prev,
                    digest,
                )
            )
            prev = digest
    return prev


def indexes_drop() -> dict[str, str]:
    """Drop the indexes the scale migration added; return their definitions as PostgreSQL reports them."""
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    migration = MigrationLoader(connection).get_migration("approvals", SCALE_MIGRATION)
    names = [op.index.name for op in migration.operations if hasattr(op, "index")]
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(%s)", [names])
        found = dict(cursor.fetchall())
        missing = sorted(set(names) - set(found))
        if missing:
            raise RuntimeError(f"indexes of {SCALE_MIGRATION} not in the schema any more: {', '.join(missing)}")
        for name in found:
            cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute("ANALYZE")
    return found


def indexes_create(definitions: dict[str, str]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for definition in definitions.values():
            cursor.execute(definition)
        cursor.execute("ANALYZE")


# --- measurement -----------------------------------------------------------------------------


def urlconf_install() -> None:
    """The console's URLs plus a trivial login-required view: the baseline for the same middleware stack."""
    from django.conf import settings
    from django.contrib.auth.decorators import login_required
    from django.http import HttpRequest, HttpResponse
    from django.urls import clear_url_caches, include, path

    @login_required
    def trivial(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    module = types.ModuleType("bench_scale_urls")
    module.urlpatterns = [path("bench/trivial/", trivial), path("", include(settings.ROOT_URLCONF))]  # type: ignore[attr-defined]
    sys.modules["bench_scale_urls"] = module
    settings.ROOT_URLCONF = "bench_scale_urls"
    clear_url_caches()


def time_get(client: Any, url: str, samples: int, warmup: int = 3) -> list[float]:
    out = []
    for i in range(warmup + samples):
        t0 = time.perf_counter()
        response = client.get(url)
        elapsed = (time.perf_counter() - t0) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"GET {url}: {response.status_code} {response.content[:300]!r}")
        if i >= warmup:
            out.append(elapsed)
    return out


def pages(n_tasks: int) -> dict[str, str]:
    from approvals.models import ApprovalTask, AuditEvent
    from console.selectors import _cursor_encode

    middle_task = ApprovalTask.objects.order_by("-created_at", "-id").values("created_at", "id")[n_tasks // 2]
    cursor = _cursor_encode("newest", middle_task["created_at"], middle_task["id"])
    ids = AuditEvent.objects.order_by("id").values_list("id", flat=True)
    middle_id = ids[AuditEvent.objects.count() // 2]
    return {
        "trivial view (baseline)": "/bench/trivial/",
        "inbox: first page": "/",
        "inbox: deep keyset page (middle)": f"/?cursor={cursor}",
        "inbox: filtered (graph=kyc_onboarding)": "/?graph=kyc_onboarding",
        "inbox: sorted due soonest": "/?sort=due",
        "audit: first page": "/audit/",
        "audit: deep page (before=middle id)": f"/audit/?before={middle_id}",
        "audit: filtered (action=task.decided)": "/audit/?action=task.decided",
        "audit: filtered (graph=kyc_onboarding)": "/audit/?graph=kyc_onboarding",
    }


def measure(label: str, urls: dict[str, str], samples: int) -> list[dict[str, Any]]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username="bench-admin"))
    rows = []
    baseline = None
    for name, url in urls.items():
        lat = time_get(client, url, samples)
        p50, p95 = statistics.median(lat), percentile(lat, 95)
        if baseline is None:
            baseline = p50
        rows.append(
            {
                "indexes": label,
                "page": name,
                "url": url,
                "n": len(lat),
                "p50_ms": round(p50, 2),
                "p95_ms": round(p95, 2),
                "min_ms": round(min(lat), 2),
                "max_ms": round(max(lat), 2),
                "ratio_p50_vs_trivial": round(p50 / baseline, 1),
                "meets_target": None if url.startswith("/bench/") else p95 < TARGET_MS,
            }
        )
    return rows


def export_child(db_url_env: dict[str, str], timeout: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--export-child"],
        cwd=ROOT,
        env=db_url_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"export child failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def export_child_main() -> int:
    """In a fresh process: stream the whole export through the API view, report this process's memory."""
    import resource

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username="bench-admin"))
    client.get("/api/audit/export", {"action": "none"})  # imports and first query done before the baseline
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    response = client.get("/api/audit/export", {"format": "jsonl"})
    size = lines = 0
    last = b""
    for chunk in response.streaming_content:
        size += len(chunk)
        lines += chunk.count(b"\n")
        last = chunk
    elapsed = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    trailer = json.loads(last.rstrip(b"\n").rsplit(b"\n", 1)[-1])["export"]
    print(
        json.dumps(
            {
                "rows": trailer["count"],
                "lines": lines,
                "bytes": size,
                "seconds": round(elapsed, 2),
                "rows_per_s": round(trailer["count"] / elapsed),
                "peak_rss_mb": round(peak_kb / 1024, 1),
                "rss_before_export_mb": round(before_kb / 1024, 1),
                "growth_mb": round((peak_kb - before_kb) / 1024, 1),
                "head_hash": trailer["head_hash"],
                "chained": trailer["chained"],
            }
        )
    )
    return 0


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'indexes':<7} {'page':<40} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'vs trivial':>10} "
        f"{'p95<50ms':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ok = "-" if r["meets_target"] is None else ("yes" if r["meets_target"] else "NO")
        lines.append(
            f"{r['indexes']:<7} {r['page']:<40} {r['n']:>4} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} "
            f"{r['max_ms']:>8.1f} {r['ratio_p50_vs_trivial']:>9.1f}x {ok:>8}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=20_000, help="threads the tasks belong to")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=60, help="timed requests per page (after 3 warm-ups)")
    parser.add_argument("--db", default="gatehouse_bench_scale")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument("--export-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=int, default=1500, help="abort after this many seconds")
    args = parser.parse_args()
    if args.export_child:
        return export_child_main()

    import signal

    def on_alarm(*_: object) -> None:
        raise TimeoutError(f"benchmark exceeded --timeout {args.timeout}s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(args.timeout)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    env = bench_env(args.db, "gatehouse-bench-scale", "http://127.0.0.1:9", OUT_DIR / "run" / "var")
    env["ALLOWED_HOSTS"] += ",testserver"  # the Django test client's host
    os.environ.update(env)
    created = False
    try:
        log(f"recreating database {args.db}, migrating; the indexes of approvals {SCALE_MIGRATION} are measured")
        created = True
        db_migrated(env, args.db)
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.db import connection

        from approvals.roles import roles_ensure

        admin = get_user_model().objects.create_user("bench-admin", password=None)
        admin.groups.add(roles_ensure()["admin"])
        t0 = time.perf_counter()
        with connection.cursor() as cursor:
            load_tasks(cursor, args.tasks, args.threads)
            cursor.execute("SELECT id FROM runtime_thread LIMIT 5000")
            thread_ids = [str(r[0]) for r in cursor.fetchall()]
        t_tasks = time.perf_counter() - t0
        log(
            f"loaded {args.tasks:,} pending tasks on {args.threads:,} threads in {t_tasks:.1f}s; "
            f"loading {args.events:,} chained audit events"
        )
        t0 = time.perf_counter()
        with connection.cursor() as cursor:
            head = load_events(cursor.cursor, args.events, thread_ids)
            cursor.execute("ANALYZE")
        t_events = time.perf_counter() - t0
        log(f"loaded {args.events:,} audit events in {t_events:.1f}s (head {head[:12]}…)")
        scale_indexes = indexes_drop()
        urlconf_install()
        from console.heap import heap_freeze

        heap_freeze()  # as daphne's application does once started (console/asgi.py)
        urls = pages(args.tasks)
        log(f"measuring {len(urls)} pages without the new indexes ({args.samples} samples each)")
        rows = measure("before", urls, args.samples)
        t0 = time.perf_counter()
        indexes_create(scale_indexes)
        t_index = time.perf_counter() - t0
        log(f"created the {len(scale_indexes)} indexes of {SCALE_MIGRATION} (build {t_index:.1f}s); measuring again")
        rows += measure("after", urls, args.samples)
        log("exporting every event through GET /api/audit/export in a child process")
        export = export_child({**env, "DJANGO_SETTINGS_MODULE": "console.settings"}, timeout=900)
        export["meets_target"] = export["peak_rss_mb"] < EXPORT_TARGET_MB

        print()
        print(table(rows))
        print()
        print(
            f"audit export of {export['rows']:,} events ({export['bytes'] / 2**20:.0f} MiB JSONL) in "
            f"{export['seconds']:.1f}s ({export['rows_per_s']:,}/s): exporting process peak RSS "
            f"{export['peak_rss_mb']:.0f} MB (before the export {export['rss_before_export_mb']:.0f} MB, growth "
            f"{export['growth_mb']:.0f} MB) — target < {EXPORT_TARGET_MB:.0f} MB: "
            f"{'yes' if export['meets_target'] else 'NO'}; whole chain: {export['chained']}"
        )
        after = [r for r in rows if r["indexes"] == "after" and r["meets_target"] is not None]
        print(
            f"after indexes: {sum(r['meets_target'] for r in after)}/{len(after)} pages with p95 < "
            f"{TARGET_MS:.0f} ms; server time = Django test client in-process (middleware, session, "
            f"templates, queries; no socket)"
        )
        report = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "config": {k: v for k, v in vars(args).items() if k != "export_child"},
            "load_seconds": {"tasks": round(t_tasks, 1), "events": round(t_events, 1), "indexes": round(t_index, 1)},
            "pages": rows,
            "export": export,
            "targets": {"page_p95_ms": TARGET_MS, "export_peak_mb": EXPORT_TARGET_MB},
        }
        path = OUT_DIR / "console_scale.json"
        path.write_text(json.dumps(report, indent=2))
        print(f"results written to {path}")
        return 0
    finally:
        signal.alarm(0)
        if created and not args.keep_db:
            from django.db import connections

            connections.close_all()
            try:
                db_drop(args.db)
            except Exception as exc:
                print(f"could not drop {args.db}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
