"""Celery tasks of the platform API: thin, the work is lgplatform.crons'."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from lgplatform.crons import crons_fire
from runtime.retry import skipped_while_database_down


# Crons (client.crons): the beat runs it every GATEHOUSE_CRON_SECONDS.
@shared_task(name="lgplatform.fire_crons", ignore_result=True)
@skipped_while_database_down
def fire_crons() -> dict[str, int]:
    return asdict(crons_fire())
