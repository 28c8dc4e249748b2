"""/metrics: protected by a static bearer token, and after a real flow every number matches the database."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from approvals.models import ApprovalTask, AuditEvent, InboundDelivery, OutboundDelivery, TaskStatus
from runtime.models import Effect, Run, RunStatus, Thread
from tests.conftest import (
    api_decide,
    loan_input,
    pending_tasks,
    runs_settle,
    thread_settled,
    thread_start,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("live_db")

TOKEN = "metrics-token-for-tests-0123456789abcdef"


def _scrape(token: str | None = TOKEN) -> Any:
    headers = {"host": "10.9.8.7:8000"}  # Prometheus scrapes by address, over the internal network
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return Client().get("/metrics", headers=headers)


def _samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with override_settings(GATEHOUSE_METRICS_TOKEN=TOKEN):
        response = _scrape()
    assert response.status_code == 200, response.content
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _get(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_are_off_without_a_token_and_refuse_a_wrong_one():
    with override_settings(GATEHOUSE_METRICS_TOKEN=""):
        assert _scrape().status_code == 404
    with override_settings(GATEHOUSE_METRICS_TOKEN=TOKEN):
        assert _scrape(None).status_code == 401
        assert _scrape(None)["WWW-Authenticate"].startswith("Bearer")
        assert _scrape(TOKEN + "x").status_code == 401
        # A wrong token is told it is wrong, not that a token is required.
        assert _scrape(None).content.decode().startswith("a bearer token is required")
        assert _scrape(TOKEN + "x").content.decode().startswith("this token is not the metrics token")
        ok = _scrape()
        assert ok.status_code == 200
        assert ok["Content-Type"].startswith("text/plain; version=")


def _database_view(now: Any) -> dict[str, Any]:
    """The same numbers, counted row by row in Python (no shared query code with console.metrics)."""
    pending: Counter[tuple[str, str]] = Counter()
    overdue: Counter[tuple[str, str]] = Counter()
    for graph, node, due_at in ApprovalTask.objects.filter(status=TaskStatus.PENDING).values_list(
        "graph", "node", "due_at"
    ):
        pending[(graph, node)] += 1
        if due_at is not None and due_at < now:
            overdue[(graph, node)] += 1
    durations: dict[str, list[float]] = defaultdict(list)
    for graph, created, decided in ApprovalTask.objects.filter(status=TaskStatus.DECIDED).values_list(
        "graph", "created_at", "decided_at"
    ):
        if decided is not None:  # a row another test marked decided by hand has no time to decision
            durations[graph].append((decided - created).total_seconds())
    runs = list(Run.objects.values_list("status", "attempts", "error"))
    effects = list(Effect.objects.values_list("status", "calls"))
    ended = {RunStatus.SUCCEEDED, RunStatus.INTERRUPTED, RunStatus.FAILED, RunStatus.CANCELLED}
    abandoned = [e for e in Effect.objects.filter(status="started").values_list("run__status", flat=True) if e in ended]
    outbound = list(OutboundDelivery.objects.values_list("status", "attempts"))
    return {
        "pending": pending,
        "overdue": overdue,
        "durations": durations,
        "runs": Counter(status for status, _, _ in runs),
        "threads": Counter(Thread.objects.values_list("status", flat=True)),
        "redeliveries": sum(max(attempts - 1, 0) for _, attempts, _ in runs),
        "dead": sum(1 for status, _, error in runs if status == "failed" and error.startswith("gave up after")),
        "lease_lapsed": Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=timezone.now()).count(),
        "effects": Counter(status for status, _ in effects),
        "effect_retries": sum(max(calls - 1, 0) for _, calls in effects),
        "effects_abandoned": len(abandoned),
        "inbound": Counter(InboundDelivery.objects.values_list("status", flat=True)),
        "outbound": Counter(status for status, _ in outbound),
        "outbound_attempts": sum(attempts for _, attempts in outbound),
        "audit": AuditEvent.objects.count(),
    }


def test_an_effect_whose_outcome_is_unknown_is_counted_apart_from_failed_ones():
    """A payment that timed out (the bank paid) was counted as failed: an alert on failures misled."""
    before = _samples()
    thread = Thread.objects.create(graph="loan_approval")
    Effect.objects.create(key=f"gh:{thread.pk}:disburse", name="disburse", thread=thread, status="unknown", calls=1)
    Effect.objects.create(key=f"gh:{thread.pk}:refused", name="disburse", thread=thread, status="failed", calls=1)
    after = _samples()
    for status, added in {"unknown": 1, "failed": 1, "done": 0}.items():
        got = _get(after, "gatehouse_effects", status=status) - _get(before, "gatehouse_effects", status=status)
        assert got == added, status


def test_an_effect_whose_run_ended_mid_call_is_counted_as_abandoned():
    """A payment whose run was cancelled mid-call stayed "started" in the metrics like one in flight."""
    before = _samples()
    thread = Thread.objects.create(graph="loan_approval")
    ended = Run.objects.create(thread=thread, kind="resume", status=RunStatus.CANCELLED)
    flying = Run.objects.create(thread=thread, kind="resume", status=RunStatus.RUNNING)
    try:
        Effect.objects.create(key=f"gh:{thread.pk}:a", name="disburse", thread=thread, run=ended, calls=1)
        Effect.objects.create(key=f"gh:{thread.pk}:b", name="disburse", thread=thread, run=flying, calls=1)
        after = _samples()
    finally:
        # A running run without a lease is one no sweeper ever ends: later tests waiting for runs to settle
        # (tests/console/test_live_lists.py) waited on it in the same test process until they timed out.
        runs_settle([flying.pk])
    assert _get(after, "gatehouse_effects_abandoned") - _get(before, "gatehouse_effects_abandoned") == 1
    assert _get(after, "gatehouse_effects", status="started") - _get(before, "gatehouse_effects", status="started") == 2


def test_a_running_run_whose_lease_lapsed_is_counted_as_lost_until_the_sweeper_hands_it_back():
    """/health/ready says nothing of runs whose worker stopped renewing its lease (it died, or was paused),
    which stay "running" until the sweeper hands them back: an operator had no number to alert on."""
    before = _samples()
    with transaction.atomic():  # uncommitted: the session worker's sweeper never sees these runs
        now = timezone.now()
        made = [(RunStatus.RUNNING, now - timedelta(minutes=1)), (RunStatus.RUNNING, now + timedelta(minutes=1))]
        made += [(RunStatus.RUNNING, None), (RunStatus.QUEUED, now - timedelta(minutes=1))]
        for status, lease in made:  # one active run per thread
            thread = Thread.objects.create(graph="loan_approval")
            Run.objects.create(thread=thread, kind="start", status=status, lease_expires_at=lease)
        after = _samples()
        transaction.set_rollback(True)
    lapsed = _get(after, "gatehouse_runs_lease_lapsed") - _get(before, "gatehouse_runs_lease_lapsed")
    assert lapsed == 1  # the running run past its lease; not the one within it, nor the queued one


def _mismatches(samples: dict, db: dict[str, Any]) -> list[str]:
    wrong = []

    def expect(name: str, value: float, **labels: str) -> None:
        got = _get(samples, name, **labels)
        if abs(got - value) > 1e-6:
            wrong.append(f"{name}{labels}: metric {got} != database {value}")

    for (graph, gate), n in db["pending"].items():
        expect("gatehouse_tasks_pending", n, graph=graph, gate=gate)
        expect("gatehouse_tasks_overdue", db["overdue"][(graph, gate)], graph=graph, gate=gate)
    listed = {dict(labels)["graph"] for name, labels in samples if name == "gatehouse_tasks_pending"}
    if listed != {graph for graph, _ in db["pending"]}:
        wrong.append(f"pending graphs {listed} != {set(db['pending'])}")
    for graph, values in db["durations"].items():
        expect("gatehouse_task_time_to_decision_seconds_count", len(values), graph=graph)
        expect("gatehouse_task_time_to_decision_seconds_sum", round(sum(values), 6), graph=graph)
        for bound in settings.GATEHOUSE_METRICS_DECISION_BUCKETS:
            le = f"{bound:g}"
            expect(
                "gatehouse_task_time_to_decision_seconds_bucket", sum(v <= bound for v in values), graph=graph, le=le
            )
    for status in ("queued", "running", "interrupted", "succeeded", "failed"):
        expect("gatehouse_runs", db["runs"][status], status=status)
    for status, n in db["threads"].items():
        expect("gatehouse_threads", n, status=status)
    expect("gatehouse_run_redeliveries_total", db["redeliveries"])
    expect("gatehouse_runs_dead_lettered_total", db["dead"])
    expect("gatehouse_runs_lease_lapsed", db["lease_lapsed"])
    for status in ("started", "done", "failed", "unknown"):
        expect("gatehouse_effects", db["effects"][status], status=status)
    expect("gatehouse_effect_retries_total", db["effect_retries"])
    expect("gatehouse_effects_abandoned", db["effects_abandoned"])
    for status in ("accepted", "refused", "duplicate"):
        expect("gatehouse_webhook_inbound_deliveries_total", db["inbound"][status], outcome=status)
    for status in ("pending", "delivered", "failed"):
        expect("gatehouse_webhook_outbound_deliveries", db["outbound"][status], outcome=status)
    expect("gatehouse_webhook_outbound_attempts_total", db["outbound_attempts"])
    expect("gatehouse_audit_chain_length", db["audit"])
    return wrong


@pytest.mark.integration
def test_after_a_real_flow_every_metric_matches_the_database(live_worker, operator, reviewer):
    before = _samples()
    gate = {"graph": "loan_approval", "gate": "human_review"}

    threads = [thread_start(operator, "loan_approval", loan_input(amount=20000)) for _ in range(3)]
    tasks = [pending_tasks(reviewer, t["id"])[0] for t in threads]
    # One task's SLA has run out (its due time is in the past): a breach the metrics must show.
    ApprovalTask.objects.filter(pk=tasks[1]["id"]).update(due_at=timezone.now() - timedelta(hours=1))
    decided = tasks[0]
    detail = reviewer.client.get(f"/api/tasks/{decided['id']}").json()
    response = api_decide(reviewer, decided, reason="metrics", checkpoint_id=detail["checkpoint_id"])
    assert response.status_code == 201, response.content
    assert thread_settled(reviewer, threads[0]["id"])["status"] == "completed"

    # The worker may still be writing the last audit rows: wait until a scrape and the rows agree.
    def consistent() -> dict | None:
        samples = _samples()
        wrong = _mismatches(samples, _database_view(timezone.now()))
        return samples if not wrong else None

    after = wait_for(consistent, timeout=30, interval=0.3, what="metrics to match the database")

    assert _get(after, "gatehouse_tasks_pending", **gate) - _get(before, "gatehouse_tasks_pending", **gate) == 2
    assert _get(after, "gatehouse_tasks_overdue", **gate) - _get(before, "gatehouse_tasks_overdue", **gate) == 1
    count = "gatehouse_task_time_to_decision_seconds_count"
    assert _get(after, count, graph="loan_approval") - _get(before, count, graph="loan_approval") == 1
    fast = "gatehouse_task_time_to_decision_seconds_bucket"
    assert _get(after, fast, graph="loan_approval", le="60") - _get(before, fast, graph="loan_approval", le="60") == 1
    assert _get(after, "gatehouse_runs", status="succeeded") - _get(before, "gatehouse_runs", status="succeeded") >= 1
    assert _get(after, "gatehouse_effects", status="done") - _get(before, "gatehouse_effects", status="done") == 1
    assert _get(after, "gatehouse_audit_chain_length") > _get(before, "gatehouse_audit_chain_length")
    oldest = _get(after, "gatehouse_task_oldest_pending_age_seconds", **gate)
    first = ApprovalTask.objects.filter(status=TaskStatus.PENDING, graph="loan_approval", node="human_review")
    expected_age = (timezone.now() - first.order_by("created_at").first().created_at).total_seconds()
    assert abs(oldest - expected_age) < 30
    assert _get(after, "gatehouse_workers_alive") >= 1
    assert ("gatehouse_beat_last_sweep_age_seconds", ()) in after


def test_the_dashboard_and_the_docs_use_only_metrics_the_endpoint_exposes():
    from django.db import transaction

    from approvals.audit import audit_anchor

    with transaction.atomic():
        audit_anchor()
    with override_settings(GATEHOUSE_METRICS_TOKEN=TOKEN):
        families = list(text_string_to_metric_families(_scrape().content.decode()))
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
    exposed = {f.name + suffix for f in families for suffix in suffixes.get(f.type, [""])}
    root = Path(__file__).resolve().parent.parent.parent
    dashboard = json.loads((root / "docs" / "grafana-dashboard.json").read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"gatehouse_[a-z_]+", target["expr"])
    }
    documented = set(re.findall(r"^\| `(gatehouse_[a-z_]+)`", (root / "docs" / "operations.md").read_text(), re.M))
    histograms = {f.name for f in families if f.type == "histogram"}
    assert used - exposed == set()
    assert documented - exposed - histograms == set()
    assert len(documented) >= 19


def test_the_anchor_age_counts_from_the_first_event_until_the_first_anchor():
    """The gauge had no sample before the first anchor, so an alert on its value never fired for a deployment
    whose beat never anchored (only a separate ``absent()`` rule caught it)."""
    from console.metrics import anchor_age

    now = timezone.now()
    assert anchor_age(now, now - timedelta(minutes=5), lambda: now - timedelta(days=3)) == 300.0
    assert anchor_age(now, None, lambda: now - timedelta(hours=2)) == 7200.0
    assert anchor_age(now, None, lambda: None) == 0.0  # an empty trail has nothing to anchor
    assert anchor_age(now, now + timedelta(seconds=1), lambda: None) == 0.0  # a clock ahead is not negative


def test_the_anchor_age_is_always_exposed():
    with override_settings(GATEHOUSE_METRICS_TOKEN=TOKEN):
        families = {f.name: f for f in text_string_to_metric_families(_scrape().content.decode())}
    samples = families["gatehouse_audit_last_anchor_age_seconds"].samples
    assert len(samples) == 1 and samples[0].value >= 0


@pytest.mark.slow
def test_metrics_answer_503_within_the_readiness_wait_when_postgresql_is_down(tmp_path):
    """Each query waited the pool's own timeout and the scrape ended in Django's 500 page with a traceback
    (after 10 s, Prometheus' default scrape timeout). The database is now pinged with readiness' 3 s wait
    first: with a pool timeout of 10 minutes the answer still comes (the script's deadline would fail it)."""
    from tests.conftest import free_port
    from tests.ops.test_production_settings import _script
    from tests.test_deploy_settings import _production_env

    env = _production_env(
        tmp_path,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_port()}/gatehouse",
        GATEHOUSE_DB_POOL_TIMEOUT="600",
        GATEHOUSE_METRICS_TOKEN="m" * 32,
    )
    result = _script(
        env,
        """
        from django.test import Client
        answers = [
            Client().get("/metrics", headers={"authorization": "Bearer " + "m" * 32, "host": "10.0.0.5"})
            for _ in range(2)
        ]
        print(json.dumps({"answers": [[a.status_code, a.get("Retry-After"), a.content.decode()] for a in answers],
                          "log": captured.getvalue()}))
        """,
        log_captured=True,
    )

    for status, retry_after, body in result["answers"]:
        assert (status, retry_after) == (503, "5")
        assert body.startswith("database unavailable")
    log = "\n".join(line for line in result["log"].splitlines() if not line.startswith("WARNING psycopg"))
    assert log.count("WARNING console.health metrics failing: database: PoolTimeout") == 1, log  # once per outage
    assert "Traceback" not in log and "ERROR" not in log, log
