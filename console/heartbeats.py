"""Heartbeats of the background processes, read by the health probes and the metrics.

Each worker writes the row ``worker:<nodename>`` (``console.Heartbeat``) every
``GATEHOUSE_HEARTBEAT_SECONDS`` from a background thread; the sweeper task
writes ``sweep`` each time it runs (``console.celery``); beat touches a file
(``GATEHOUSE_BEAT_HEARTBEAT_FILE``) on every scheduler tick, so its own
container can tell it is alive without a database round trip.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from console.models import Heartbeat, HeartbeatComponent

log = logging.getLogger(__name__)

SWEEP = "sweep"
# Rows of worker nodes gone this long are deleted by the next heartbeat write.
FORGET_AFTER = timedelta(days=1)


# --- heartbeats ----------------------------------------------------------------------


def heartbeat_record(*, name: str, component: HeartbeatComponent) -> None:
    now = timezone.now()
    Heartbeat.objects.update_or_create(name=name, defaults={"component": component, "seen_at": now})


def heartbeat_age(
    *, component: HeartbeatComponent, name: str | None = None, name_suffix: str | None = None
) -> float | None:
    """Seconds since the freshest heartbeat of ``component`` (of the row ``name``, or of the rows whose
    name ends with ``name_suffix``: the workers of one host); None if never seen."""
    rows = Heartbeat.objects.filter(component=component)
    if name is not None:
        rows = rows.filter(name=name)
    if name_suffix is not None:
        rows = rows.filter(name__endswith=name_suffix)
    latest = rows.order_by("-seen_at").values_list("seen_at", flat=True).first()
    if latest is None:
        return None
    return max((timezone.now() - latest).total_seconds(), 0.0)


def workers_alive() -> int:
    cutoff = timezone.now() - timedelta(seconds=settings.GATEHOUSE_HEARTBEAT_STALE_SECONDS)
    return Heartbeat.objects.filter(component=HeartbeatComponent.WORKER, seen_at__gte=cutoff).count()


def worker_heartbeat_name(nodename: str) -> str:
    return f"worker:{nodename}"


class WorkerHeartbeat:
    """Writes this worker's heartbeat row every GATEHOUSE_HEARTBEAT_SECONDS until stopped."""

    def __init__(self, nodename: str) -> None:
        self.name = worker_heartbeat_name(nodename)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gatehouse-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        interval = float(settings.GATEHOUSE_HEARTBEAT_SECONDS)
        try:
            while True:
                try:
                    heartbeat_record(name=self.name, component=HeartbeatComponent.WORKER)
                    Heartbeat.objects.filter(seen_at__lt=timezone.now() - FORGET_AFTER).delete()
                except Exception:
                    log.warning("could not record the worker heartbeat", exc_info=True)
                    close_old_connections()
                if self._stop.wait(interval):
                    return
        finally:
            connection.close()


def beat_heartbeat_touch() -> None:
    path = Path(settings.GATEHOUSE_BEAT_HEARTBEAT_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def beat_heartbeat_age() -> float | None:
    try:
        return max(time.time() - Path(settings.GATEHOUSE_BEAT_HEARTBEAT_FILE).stat().st_mtime, 0.0)
    except FileNotFoundError:
        return None


def sweep_stale_seconds() -> float:
    """The sweeper runs every GATEHOUSE_SWEEP_SECONDS; several missed sweeps in a row mean trouble."""
    return max(4 * float(settings.GATEHOUSE_SWEEP_SECONDS), 30.0)
