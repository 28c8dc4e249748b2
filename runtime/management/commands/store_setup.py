from typing import Any

from runtime.command_args import GatehouseCommand
from runtime.store import store_close, store_setup


class Command(GatehouseCommand):
    help = "Create or upgrade the long-term memory store's tables, vector index included (migrate does this too)."

    def handle(self, *args: Any, **options: Any) -> None:
        store_setup()
        store_close()
        self.stdout.write("store tables are up to date")
