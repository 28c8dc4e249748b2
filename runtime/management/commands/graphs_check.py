from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from runtime.command_args import GatehouseCommand
from runtime.registry import GraphRegistryError, registry_load, registry_warnings_read


class Command(GatehouseCommand):
    help = (
        "Import and compile the graphs of GATEHOUSE_GRAPHS, read its store configuration, and list the graphs; "
        "exit 1 naming the graph or key that fails. Warns of open tasks waiting in a node a graph no longer has."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            entries = registry_load()
        except GraphRegistryError as exc:
            raise CommandError(str(exc)) from exc  # one line, naming the file (registry_load)
        for name, entry in sorted(entries.items()):
            built = "built per run from its config" if entry.factory else "built once"
            self.stdout.write(f"{name}: {entry.spec} ({built})")
        for line in registry_warnings_read(entries):  # said, exit status 0: the graphs themselves load
            self.stderr.write(f"warning: {line}")
