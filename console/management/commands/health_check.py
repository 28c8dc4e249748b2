"""``manage.py health_check --component worker|beat|web``: exit 0 when healthy, 1 when stale or failing.

For container health checks of processes that serve no HTTP: a worker is
healthy while a heartbeat row of its host (``worker:<name>@<hostname>``) is fresh, beat
while its tick file is. ``web`` runs the readiness checks in-process (no HTTP).
"""

from __future__ import annotations

import socket
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from console.health import readiness_evaluate
from console.heartbeats import beat_heartbeat_age, heartbeat_age, worker_heartbeat_name
from console.models import HeartbeatComponent
from runtime.command_args import GatehouseCommand, positive_seconds_option


class Command(GatehouseCommand):
    help = "Exit non-zero when this container's worker, beat or web dependencies are not healthy."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--component", required=True, choices=["worker", "beat", "web"])
        parser.add_argument(
            "--node", default=None, help="worker node name (default: any worker node of this host, name@<host>)"
        )
        parser.add_argument(
            "--max-age",
            type=float,
            default=None,
            help="seconds a heartbeat may be old (default: GATEHOUSE_HEARTBEAT_STALE_SECONDS)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        max_age = (
            float(settings.GATEHOUSE_HEARTBEAT_STALE_SECONDS)
            if options["max_age"] is None  # 0 is not "unset": it is refused, as is a negative age
            else positive_seconds_option("--max-age", options["max_age"])
        )
        component = options["component"]
        if component == "web":
            # Not logged as an outage as well: the one line below names every failing check, with its reason.
            readiness = readiness_evaluate(names=["database", "checkpointer", "broker", "channel_layer"], outages=None)
            if not readiness.ok:
                failed = ", ".join(f"{name} ({_first_line(error)})" for name, error in readiness.errors.items())
                raise CommandError(f"unhealthy: {failed}")
            self.stdout.write("ok")
            return
        if component == "worker":
            # Without --node: any worker of this host, whatever its node name (make run names them
            # worker1@<host>, worker2@<host>; Celery's default is celery@<host>).
            node = options["node"]
            host = socket.gethostname()
            what = f"worker {node}" if node else f"any worker of this host (*@{host})"
            rows = {"name": worker_heartbeat_name(node)} if node else {"name_suffix": f"@{host}"}
            try:
                age = heartbeat_age(component=HeartbeatComponent.WORKER, **rows)
            except DatabaseError as exc:  # the heartbeat row is in the database: unreachable is unhealthy, not a crash
                raise CommandError(f"unhealthy: {what}: cannot read its heartbeat ({type(exc).__name__})") from None
        else:
            age = beat_heartbeat_age()
            what = f"beat ({settings.GATEHOUSE_BEAT_HEARTBEAT_FILE})"
        if age is None:
            raise CommandError(f"unhealthy: {what}: no heartbeat yet")
        if age > max_age:
            raise CommandError(f"unhealthy: {what}: last heartbeat {age:.1f} s ago (limit {max_age:g} s)")
        self.stdout.write(f"ok: {what} heartbeat {age:.1f} s ago")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "failed"
