"""Console-only state: who is working on which approval task right now."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from approvals.models import ApprovalTask


class TaskClaim(models.Model):
    """A time-limited lock a reviewer takes on a task so two people do not review it at once.

    One row per task (the primary key is the task): a claim that expired is
    simply overwritten by the next claimant, so no sweeper is needed.
    """

    task = models.OneToOneField(ApprovalTask, primary_key=True, on_delete=models.CASCADE, related_name="claim")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    claimed_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [models.Index(fields=["user", "expires_at"], name="claim_user_expires")]
        permissions = [("release_any_claim", "Can release a task claimed by someone else")]

    def __str__(self) -> str:
        return f"claim on {self.task_id} by {self.user_id} until {self.expires_at:%H:%M}"

    @property
    def is_active(self) -> bool:
        return self.expires_at > timezone.now()


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
