"""``manage.py checkpoints_prune [--dry-run] [--graph G]``: apply the checkpoint retention policy now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from runtime.command_args import GatehouseCommand, graph_option
from runtime.models import Thread
from runtime.progress import progress
from runtime.retention import checkpoints_prune


class Command(GatehouseCommand):
    help = (
        "Delete intermediate checkpoints of threads completed longer ago than their graph's retention period "
        "(final and decision checkpoints stay), then unreferenced blobs. Audit events are never touched."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
        parser.add_argument("--graph", help="only threads of this graph")

    def handle(self, *args: Any, dry_run: bool = False, graph: str | None = None, **options: Any) -> None:
        if graph is not None:
            # A graph no longer registered may still have threads to prune: those graphs are known too.
            graph = graph_option(
                "--graph", graph, also=Thread.objects.filter(graph=graph).values_list("graph", flat=True)
            )
        with progress(None, desc="pruning", unit="thread") as update:
            report = checkpoints_prune(graph=graph, dry_run=dry_run, progress=update)
        verb = "would delete" if dry_run else "deleted"
        self.stdout.write(
            f"{report.threads} thread(s): {verb} {report.checkpoints_deleted} checkpoint(s), "
            f"kept {report.checkpoints_kept}; {verb} {report.blobs_deleted} unreferenced blob(s)"
        )
        for error in report.errors:
            self.stderr.write(f"failed: {error}")
        if report.errors:
            raise CommandError(f"{len(report.errors)} thread(s) could not be pruned (see above)")
