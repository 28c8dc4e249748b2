"""Health: liveness and readiness probes (heartbeats: ``console.heartbeats``).

* ``GET /health/live`` — the process answers; it touches nothing else, so a
  database outage never makes an orchestrator restart healthy web processes.
* ``GET /health/ready`` — every dependency a web process needs, plus the
  background machinery: database, checkpointer pool, broker, channel layer, a
  fresh worker heartbeat, and the age of beat's last sweep (``beat``). 200 when every
  check passes, 503 otherwise; ``?checks=database,broker`` (or ``checks`` repeated)
  narrows the set (a web container's own health should not depend on the workers).

The checks run at once, each on a thread of its own, and the answer comes within
``READY_DEADLINE_SECONDS`` whatever hangs: one after another, a PostgreSQL outage
took ~33 s (the Django pool's 10 s wait for the database, the worker and the beat
checks, 3 s for the checkpointer), and an orchestrator's probe timed out instead
of getting its 503. The database check itself waits ``CHECK_TIMEOUT_SECONDS`` for
a pooled connection, not the pool's 10 s.

Both are unauthenticated and say nothing an outsider could use: per check a
status, a duration and, on failure, only the exception's class name (the
message may name hosts; it goes to the log instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, connections
from django.http import HttpRequest, HttpResponse, JsonResponse

from console.heartbeats import SWEEP, heartbeat_age, sweep_stale_seconds, workers_alive
from console.models import HeartbeatComponent

log = logging.getLogger(__name__)

# A dependency's own wait (a pooled connection, a broker connect, a channel round trip).
CHECK_TIMEOUT_SECONDS = 3.0
# The whole answer: a check still running then is reported failed. Below Compose's 8 s probe timeout.
READY_DEADLINE_SECONDS = 5.0

# --- readiness checks ------------------------------------------------------------------


class CheckFailed(Exception):
    """A check's own verdict (no exception from a dependency): its message is safe to show."""


def _check_database() -> dict[str, Any]:
    database_ping()
    return {}


def database_ping() -> None:
    """``SELECT 1``, waiting at most ``CHECK_TIMEOUT_SECONDS`` for a pooled connection (not the pool's own
    timeout). Raises what the database or the pool raised (psycopg_pool's PoolTimeout is a psycopg error)."""
    pool = getattr(connection, "pool", None)  # Django's psycopg pool in production; None for SQLite
    if pool is not None:
        pool.open()  # as Django does on first use (a no-op once open)
        with pool.connection(timeout=CHECK_TIMEOUT_SECONDS) as conn:
            conn.execute("SELECT 1")
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _check_checkpointer() -> dict[str, Any]:
    from runtime.checkpointer import checkpointer_ping

    checkpointer_ping()
    return {}


def _check_broker() -> dict[str, Any]:
    from console.celery import app

    with app.connection_for_write(connect_timeout=CHECK_TIMEOUT_SECONDS) as conn:
        conn.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT_SECONDS)
        # Lazy transports (Redis) connect on first channel use: open one.
        conn.default_channel  # noqa: B018
    return {}


def _check_channel_layer() -> dict[str, Any]:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        raise CheckFailed("no channel layer configured")

    async def round_trip() -> None:
        channel = await layer.new_channel("health.")
        await layer.send(channel, {"type": "health.ping"})
        # A receive that times out unsubscribes.
        await asyncio.wait_for(layer.receive(channel), timeout=CHECK_TIMEOUT_SECONDS)
        await _channel_forget(layer, channel)

    async_to_sync(round_trip)()
    return {}


async def _channel_forget(layer: Any, channel: str) -> None:
    """Unsubscribe the probe's channel. The pub/sub layer does it only when a receive on the channel is
    cancelled (Channels has no ``delete_channel``): after a receive that got its message the channel
    stayed subscribed for the life of the process, one more per probe (an orchestrator probing every
    10 s left 8,640 a day in each web process and in Redis). A receive is started, reaches its wait
    (the task runs before this coroutine resumes), and is cancelled."""
    waiting = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting


def _check_worker() -> dict[str, Any]:
    alive = workers_alive()
    age = heartbeat_age(component=HeartbeatComponent.WORKER)
    if age is None:
        raise CheckFailed("no worker has ever reported")
    if not alive:
        raise CheckFailed(f"no worker heartbeat within the last {settings.GATEHOUSE_HEARTBEAT_STALE_SECONDS:g} s")
    return {"workers": alive, "age_seconds": round(age or 0.0, 1)}


def _check_beat() -> dict[str, Any]:
    """Beat's last sweep: proves beat schedules, the broker carries and a worker executes."""
    age = heartbeat_age(component=HeartbeatComponent.SWEEP, name=SWEEP)
    if age is None:
        raise CheckFailed("the sweeper has never run (is beat running?)")
    if age > sweep_stale_seconds():
        raise CheckFailed(f"the last sweep was {age:.0f} s ago (beat or every worker is down)")
    return {"age_seconds": round(age, 1)}


CHECKS: dict[str, Callable[[], dict[str, Any]]] = {
    "database": _check_database,
    "checkpointer": _check_checkpointer,
    "broker": _check_broker,
    "channel_layer": _check_channel_layer,
    "worker": _check_worker,
    "beat": _check_beat,
}


@dataclass
class Readiness:
    ok: bool
    checks: dict[str, dict[str, Any]]
    # What failed, with the exception's message (it may name hosts): for the log and the command line
    # (``health_check --component web``), never for the HTTP answer.
    errors: dict[str, str] = field(default_factory=dict)


def _check_run(name: str) -> tuple[dict[str, Any], str | None]:
    """The check's result for the answer, and for the log what failed (the exception's message may name hosts)."""
    started = time.perf_counter()
    error: str | None = None
    try:
        result = {"status": "ok", **CHECKS[name]()}
    except CheckFailed as exc:
        result = {"status": "fail", "detail": str(exc)}
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - whatever a dependency raises fails its check; OutageLog logs it
        result = {"status": "fail", "detail": type(exc).__name__}
        error = f"{type(exc).__name__}: {exc}"
    finally:
        connections.close_all()  # this thread's connections go back to the pool
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result, error


class OutageLog:
    """Logs a dependency's failure once when it starts and once when it ends, not on every probe.

    An orchestrator probes every few seconds: during an outage each probe logged a traceback per failing
    check and Django's ERROR "Service Unavailable: /health/ready", burying everything else. A 503 is the
    probe's answer, not the process's fault; what changed is worth one line each way.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.failing: set[str] = set()
        self.lock = threading.Lock()

    def observe(self, *, passed: list[str], failed: dict[str, str]) -> None:
        with self.lock:
            started = {name: error for name, error in failed.items() if name not in self.failing}
            ended = [name for name in passed if name in self.failing]
            self.failing = (self.failing | set(failed)) - set(passed)
        if started:
            log.warning(
                "%s failing: %s", self.what, "; ".join(f"{name}: {error}" for name, error in sorted(started.items()))
            )
        if ended:
            log.info("%s passing again: %s", self.what, ", ".join(sorted(ended)))


readiness_log = OutageLog("readiness check")


def readiness_evaluate(
    *,
    names: list[str] | None = None,
    deadline: float = READY_DEADLINE_SECONDS,
    outages: OutageLog | None = readiness_log,
) -> Readiness:
    """Every check at once, each on its own (daemon) thread; one still running at ``deadline`` fails.
    Its thread ends by itself once the dependency's own timeout fires. ``outages`` logs what started or
    stopped failing (None: nothing is logged, e.g. a one-shot command that reports the failures itself)."""
    names = names or list(CHECKS)
    finished: dict[str, tuple[dict[str, Any], str | None]] = {}
    threads = [
        threading.Thread(
            target=lambda name=name: finished.__setitem__(name, _check_run(name)),
            name=f"health-{name}",
            daemon=True,
        )
        for name in names
    ]
    ends_at = time.monotonic() + deadline
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, ends_at - time.monotonic()))
    late = f"no answer within {deadline:g} s"
    timed_out = ({"status": "fail", "detail": late, "ms": round(deadline * 1000, 1)}, late)
    outcomes = {name: finished.get(name, timed_out) for name in names}
    results = {name: result for name, (result, _) in outcomes.items()}
    failed = {name: error or "failed" for name, (result, error) in outcomes.items() if result["status"] != "ok"}
    if outages is not None:
        outages.observe(
            passed=[name for name, (result, _) in outcomes.items() if result["status"] == "ok"], failed=failed
        )
    return Readiness(ok=all(r["status"] == "ok" for r in results.values()), checks=results, errors=failed)


def checks_parse(values: list[str]) -> list[str] | None:
    """``?checks=a,b``, ``?checks=a&checks=b`` or both; None (every check) when none is named."""
    names = [n.strip() for value in values for n in value.split(",") if n.strip()]
    return list(dict.fromkeys(names)) or None


def probe_error(status: int, code: str, message: str, field: str | None = None) -> JsonResponse:
    # The /api/ error shape: a client parses one shape from every Gatehouse endpoint.
    return JsonResponse({"error": {"code": code, "message": message, "field": field}}, status=status)


# --- the endpoints ------------------------------------------------------------------


def health_live(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


def health_ready(request: HttpRequest) -> HttpResponse:
    names = checks_parse(request.GET.getlist("checks"))
    unknown = sorted(set(names or []) - set(CHECKS))
    if unknown:
        return probe_error(400, "bad_request", f"unknown checks {unknown}; known: {list(CHECKS)}", "checks")
    readiness = readiness_evaluate(names=names)
    response = JsonResponse(
        {"status": "ok" if readiness.ok else "fail", "checks": readiness.checks}, status=200 if readiness.ok else 503
    )
    # A 503 is the probe's answer: readiness_evaluate logged the outage once; Django would log every probe at ERROR.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response
