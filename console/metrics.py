"""Prometheus metrics at ``GET /metrics``, computed from the database at scrape time.

Every number is read from PostgreSQL (or SQLite) when Prometheus scrapes, so
any web process answers the same, however many web processes and Celery
workers there are: nothing is counted in process memory, so there is no
per-process state to merge (no ``PROMETHEUS_MULTIPROC_DIR``) and a restarted
process loses nothing. Counters are monotonic because the rows they count are
never deleted (runs, decisions, deliveries, audit events); gauges describe
current state. The metric names are listed in docs/operations.md.

Access: ``Authorization: Bearer $GATEHOUSE_METRICS_TOKEN`` (a static token,
``GATEHOUSE_METRICS_TOKEN_FILE`` for a mounted secret). Without a configured
token the endpoint answers 404: nothing is exposed by default.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, F, Max, Min, Q, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from approvals.api_common import RETRY_AFTER_SECONDS
from approvals.models import (
    ApprovalTask,
    AuditAnchor,
    AuditEvent,
    DeliveryStatus,
    InboundDelivery,
    OutboundDelivery,
    OutboundStatus,
    TaskStatus,
)
from console.health import OutageLog, database_ping
from console.heartbeats import SWEEP, heartbeat_age, workers_alive
from console.models import HeartbeatComponent
from runtime.models import ACTIVE_RUN_STATUSES, Effect, EffectStatus, Run, RunStatus, Thread, ThreadStatus

# How the runtime marks a run it stopped retrying (runtime.runs._gave_up): the dead letter.
DEAD_LETTER_PREFIX = "gave up after"


class GatehouseCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        yield from _tasks(now)
        yield from _decisions()
        yield from _runs()
        yield from _effects()
        yield from _webhooks()
        yield from _audit(now)
        yield from _background()


def _tasks(now: Any) -> Iterator[Metric]:
    pending = GaugeMetricFamily(
        "gatehouse_tasks_pending", "Approval tasks waiting for a decision", labels=["graph", "gate"]
    )
    oldest = GaugeMetricFamily(
        "gatehouse_task_oldest_pending_age_seconds",
        "Age of the oldest pending approval task",
        labels=["graph", "gate"],
    )
    overdue = GaugeMetricFamily(
        "gatehouse_tasks_overdue",
        "Pending approval tasks past their due time (SLA breached, not yet decided)",
        labels=["graph", "gate"],
    )
    rows = (
        ApprovalTask.objects.filter(status=TaskStatus.PENDING)
        .values("graph", "node")
        .annotate(n=Count("id"), first=Min("created_at"), late=Count("id", filter=Q(due_at__lt=now)))
        .order_by("graph", "node")
    )
    for row in rows:
        labels = [row["graph"], row["node"]]
        pending.add_metric(labels, row["n"])
        oldest.add_metric(labels, max((now - row["first"]).total_seconds(), 0.0))
        overdue.add_metric(labels, row["late"])
    yield pending
    yield oldest
    yield overdue

    late = CounterMetricFamily(
        "gatehouse_tasks_decided_late",
        "Approval tasks decided after their due time (SLA breached)",
        labels=["graph"],
    )
    for late_row in (
        ApprovalTask.objects.filter(status=TaskStatus.DECIDED, due_at__isnull=False, decided_at__gt=F("due_at"))
        .values("graph")
        .annotate(n=Count("id"))
        .order_by("graph")
    ):
        late.add_metric([late_row["graph"]], late_row["n"])
    yield late

    by_status = GaugeMetricFamily("gatehouse_tasks", "Approval tasks by status", labels=["status"])
    counts = dict(ApprovalTask.objects.values_list("status").annotate(n=Count("id")).order_by())
    for status in TaskStatus:
        by_status.add_metric([status.value], counts.get(status.value, 0))
    yield by_status


def _decisions() -> Iterator[Metric]:
    buckets: list[float] = list(settings.GATEHOUSE_METRICS_DECISION_BUCKETS)
    aggregates: dict[str, Any] = {
        f"le{i}": Count("id", filter=Q(decided_at__lte=F("created_at") + timedelta(seconds=bound)))
        for i, bound in enumerate(buckets)
    }
    rows: Any = (
        ApprovalTask.objects.filter(status=TaskStatus.DECIDED, decided_at__isnull=False)
        .values("graph")
        .annotate(n=Count("id"), total=Sum(F("decided_at") - F("created_at")), **aggregates)
        .order_by("graph")
    )
    histogram = HistogramMetricFamily(
        "gatehouse_task_time_to_decision_seconds",
        "Time from an approval task's creation to its decision",
        labels=["graph"],
    )
    for row in rows:
        cumulative = [(f"{bound:g}", row[f"le{i}"]) for i, bound in enumerate(buckets)]
        cumulative.append(("+Inf", row["n"]))
        total = row["total"]
        histogram.add_metric([row["graph"]], cumulative, total.total_seconds() if total else 0.0)
    yield histogram


def _runs() -> Iterator[Metric]:
    runs = GaugeMetricFamily("gatehouse_runs", "Runs by status", labels=["status"])
    counts = dict(Run.objects.values_list("status").annotate(n=Count("id")).order_by())
    for status in RunStatus:
        runs.add_metric([status.value], counts.get(status.value, 0))
    yield runs

    threads = GaugeMetricFamily("gatehouse_threads", "Threads by status", labels=["status"])
    counts = dict(Thread.objects.values_list("status").annotate(n=Count("id")).order_by())
    for thread_status in ThreadStatus:
        threads.add_metric([thread_status.value], counts.get(thread_status.value, 0))
    yield threads

    totals = Run.objects.aggregate(
        redeliveries=Sum(F("attempts") - 1, filter=Q(attempts__gt=1)),
        dead=Count("id", filter=Q(status=RunStatus.FAILED, error__startswith=DEAD_LETTER_PREFIX)),
    )
    yield CounterMetricFamily(
        "gatehouse_run_redeliveries",
        "Run attempts after the first (a worker died or a transient error handed the run back)",
        value=totals["redeliveries"] or 0,
    )
    # Claimed by a worker that stopped renewing its lease (died, paused, cut off): the sweeper hands each back
    # once its backoff has passed. /health/ready does not wait for that; an alert on this gauge can.
    yield GaugeMetricFamily(
        "gatehouse_runs_lease_lapsed",
        "Running runs whose worker's lease has lapsed: lost until the sweeper hands them back",
        value=Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=timezone.now()).count(),
    )
    yield CounterMetricFamily(
        "gatehouse_runs_dead_lettered",
        "Runs the runtime stopped retrying after GATEHOUSE_MAX_RUN_ATTEMPTS (failed; retry by hand)",
        value=totals["dead"],
    )


def _effects() -> Iterator[Metric]:
    effects = GaugeMetricFamily(
        "gatehouse_effects",
        # "unknown" is not "failed": the provider may have acted; a retry asks it again under the same key.
        "Effect-ledger entries by status (failed: the provider did not act; unknown: it may have)",
        labels=["status"],
    )
    counts = dict(Effect.objects.values_list("status").annotate(n=Count("id")).order_by())
    for status in EffectStatus:
        effects.add_metric([status.value], counts.get(status.value, 0))
    yield effects
    # Counted among "started" above, and as uncertain as "unknown": the run that called ended mid-call.
    abandoned = (
        Effect.objects.filter(status=EffectStatus.STARTED, run__isnull=False)
        .exclude(run__status__in=ACTIVE_RUN_STATUSES)
        .count()
    )
    yield GaugeMetricFamily(
        "gatehouse_effects_abandoned",
        "Effects started by a run that ended before their outcome was recorded (the provider may have acted)",
        value=abandoned,
    )
    retries = Effect.objects.filter(calls__gt=1).aggregate(n=Sum(F("calls") - 1))["n"] or 0
    yield CounterMetricFamily(
        "gatehouse_effect_retries",
        "Calls to the outside world after an effect's first (same idempotency key)",
        value=retries,
    )


def _webhooks() -> Iterator[Metric]:
    inbound = CounterMetricFamily(
        "gatehouse_webhook_inbound_deliveries", "Inbound webhook requests by outcome", labels=["outcome"]
    )
    counts = dict(InboundDelivery.objects.values_list("status").annotate(n=Count("id")).order_by())
    for status in DeliveryStatus:
        inbound.add_metric([status.value], counts.get(status.value, 0))
    yield inbound

    outbound = GaugeMetricFamily(
        "gatehouse_webhook_outbound_deliveries",
        "Outbound webhook deliveries by outcome (pending ones are still being retried)",
        labels=["outcome"],
    )
    rows = {
        row["status"]: row
        for row in OutboundDelivery.objects.values("status").annotate(n=Count("id"), tries=Sum("attempts")).order_by()
    }
    for out_status in OutboundStatus:
        outbound.add_metric([out_status.value], rows[out_status.value]["n"] if out_status.value in rows else 0)
    yield outbound
    yield CounterMetricFamily(
        "gatehouse_webhook_outbound_attempts",
        "HTTP attempts made for outbound webhook deliveries",
        value=sum(row["tries"] or 0 for row in rows.values()),
    )


def _audit(now: Any) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "gatehouse_audit_chain_length", "Events in the hash-chained audit trail", value=AuditEvent.objects.count()
    )
    yield GaugeMetricFamily(
        "gatehouse_audit_last_anchor_age_seconds",
        "Seconds the audit trail's newest events have gone unanchored: since beat last anchored the chain's head, "
        "or before the first anchor since the trail's first event (0 for an empty trail)",
        value=anchor_age(now, AuditAnchor.objects.aggregate(at=Max("at"))["at"], _first_event_at),
    )


def _first_event_at() -> Any:
    return AuditEvent.objects.order_by("id").values_list("at", flat=True).first()


def anchor_age(now: Any, last_anchor: Any, first_event_at: Callable[[], Any]) -> float:
    """How long the trail has gone unanchored. Before the first anchor that is since its first event: the series
    had no sample then, and an alert on its value never fired for a deployment whose beat never anchored."""
    since = last_anchor if last_anchor is not None else first_event_at()
    return 0.0 if since is None else max((now - since).total_seconds(), 0.0)


def _background() -> Iterator[Metric]:
    yield GaugeMetricFamily("gatehouse_workers_alive", "Workers with a fresh heartbeat", value=workers_alive())
    age = heartbeat_age(component=HeartbeatComponent.SWEEP, name=SWEEP)
    sweep_age = GaugeMetricFamily(
        "gatehouse_beat_last_sweep_age_seconds",
        "Seconds since the run sweeper (scheduled by beat) last ran (no sample before the first sweep)",
    )
    if age is not None:
        sweep_age.add_metric([], age)
    yield sweep_age


def metrics_render() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatehouseCollector())
    return generate_latest(registry)


def _authorised(request: HttpRequest) -> bool:
    expected = settings.GATEHOUSE_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected.encode())


def metrics_view(request: HttpRequest) -> HttpResponse:
    if not settings.GATEHOUSE_METRICS_TOKEN:
        return HttpResponse("metrics are off: set GATEHOUSE_METRICS_TOKEN\n", status=404, content_type="text/plain")
    if not _authorised(request):
        given = request.headers.get("Authorization", "")
        why = "this token is not the metrics token" if given else "a bearer token is required"
        return HttpResponse(
            f"{why} (Authorization: Bearer <GATEHOUSE_METRICS_TOKEN>)\n",
            status=401,
            content_type="text/plain",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    try:
        # Bounded as readiness is: every query below would wait the pool's own timeout (10 s, Prometheus'
        # default scrape timeout) and end in Django's 500 page with a traceback. The ping fails within
        # CHECK_TIMEOUT_SECONDS; a database lost between it and the queries still answers 503 below.
        database_ping()
        body = metrics_render()
    except (DatabaseError, psycopg.Error) as exc:
        metrics_log.observe(passed=[], failed={"database": f"{type(exc).__name__}: {exc}"})
        unavailable = HttpResponse(
            "database unavailable: the metrics cannot be computed right now; retry shortly\n",
            status=503,
            content_type="text/plain",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
        unavailable._has_been_logged = True  # type: ignore[attr-defined]  # once per outage, by metrics_log
        return unavailable
    metrics_log.observe(passed=["database"], failed={})
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


# A scrape every 15 s during an outage: one WARNING when it starts, one INFO when it ends.
metrics_log = OutageLog("metrics")
