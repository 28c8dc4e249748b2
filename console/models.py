"""Console-only state: heartbeats of background processes (claims moved to ``approvals.models.TaskClaim``)."""

from __future__ import annotations

from django.db import models


class HeartbeatComponent(models.TextChoices):
    WORKER = "worker", "Celery worker"
    SWEEP = "sweep", "Run sweeper (scheduled by beat, executed by a worker)"


class Heartbeat(models.Model):
    """The last sign of life of a background process, for health probes and metrics (console/health.py).

    One row per worker node (``worker:<celery nodename>``) and one for the sweeper
    (``sweep``); each is overwritten in place, so the table stays as small as the fleet.
    """

    name = models.CharField(max_length=255, primary_key=True)
    component = models.CharField(max_length=12, choices=HeartbeatComponent.choices)
    seen_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.seen_at:%H:%M:%S}"
