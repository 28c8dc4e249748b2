"""Crons (``client.crons``): runs started on a schedule, as their owner (lgplatform/crons.py)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from runtime.models import Thread


class Cron(models.Model):
    """A schedule that starts a run of ``graph``: on ``thread`` each time, or on a new thread each time (none).

    ``payload``: the run's body as LangGraph Server keeps it (``input``, ``metadata``, ``config``,
    ``multitask_strategy``, ``stream_mode``, ``stream_subgraphs``), checked when it was sent. ``owner``: the
    user it was created by, whom each run is started as, with that user's permissions as they are when it
    fires. ``next_run_date``: when it fires next; null once ``end_time`` has passed.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    graph = models.CharField(max_length=100, db_index=True)
    thread = models.ForeignKey(Thread, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    schedule = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, blank=True, default="")  # "" reads as UTC, as LangGraph's null
    payload = models.JSONField(default=dict)
    metadata = models.JSONField(default=dict, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    enabled = models.BooleanField(default=True)
    end_time = models.DateTimeField(null=True, blank=True)
    next_run_date = models.DateTimeField(null=True, blank=True)
    on_run_completed = models.CharField(max_length=16, blank=True, default="")  # "" reads as null
    # Firings skipped in a row for the same reason since the last run (lgplatform.crons.cron_fire): the first
    # is audited, the rest counted here, so a thread waiting a week for its reviewer under a cron firing every
    # minute is one cron.skipped event, not ten thousand.
    skipped_reason = models.CharField(max_length=500, blank=True, default="", db_default="")
    skipped_count = models.PositiveIntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["enabled", "next_run_date"], name="lgplatform_cron_due")]

    def __str__(self) -> str:
        return f"cron {self.id} ({self.schedule})"
