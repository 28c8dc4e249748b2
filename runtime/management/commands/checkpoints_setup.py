from typing import Any

from runtime.checkpointer import checkpointer_close, checkpointer_setup
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = "Create or upgrade LangGraph's checkpoint tables (migrate does this too)."

    def handle(self, *args: Any, **options: Any) -> None:
        checkpointer_setup()
        checkpointer_close()
        self.stdout.write("checkpoint tables are up to date")
