"""Celery's Django fixup, keeping each prefork pool process's database pool for its lifetime.

Celery 5.7's fixup closes Django's connection pool before and after every task
in a prefork pool process, so every run opened new PostgreSQL sessions (about
three: the pool refills to its minimum) and a prefork worker spent more CPU
connecting than running graphs (round 16 in docs/performance.md). Here a task
hands its connections back to the process's pool, as in a threads worker; what a
new pool process inherits from its parent is forgotten at the fork
(``runtime.postgresql.base``), and the process opens its own pool on first use.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.fixups.django import DjangoFixup, DjangoWorkerFixup


class WorkerFixup(DjangoWorkerFixup):
    def close_database(self, **kwargs: Any) -> None:
        """Around every task: each connection back to this process's pool (closed, without a pool)."""
        for conn in self._db.connections.all(initialized_only=True):
            try:
                conn.close()
            except self.interface_errors:
                pass
            except self.DatabaseError as exc:  # as Celery's: a connection already gone is closed
                if "closed" not in str(exc) and "not connected" not in str(exc):
                    raise


class Fixup(DjangoFixup):
    """Celery's Django fixup, giving the worker the fixup above."""

    _worker_fixup: WorkerFixup | None

    @property
    def worker_fixup(self) -> WorkerFixup:
        if self._worker_fixup is None:
            self._worker_fixup = WorkerFixup(self.app)
        return self._worker_fixup


def fixup(app: Celery, env: str = "DJANGO_SETTINGS_MODULE") -> Fixup | None:
    """The ``fixups`` entry replacing Celery's Django fixup (``console.celery``), on the same condition."""
    if os.environ.get(env) and "django" not in app.loader_cls.lower():
        installed: Fixup = Fixup(app).install()
        return installed
    return None
