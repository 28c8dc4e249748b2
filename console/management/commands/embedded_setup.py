"""``make run``'s setup in one process: migrate, import the graphs, then (``--demo``) the demo data.

One Django start instead of three: each start is ~3 s of imports (LangGraph, LangChain core,
pydantic) on a small machine, and a user waits for all of them before the console serves.
The steps are still the public commands, run in order; migrate runs before any graph module
is imported, as ``manage.py migrate`` does on its own. A failing step prints its error as
``manage.py`` would and exits with that step's code, so the launcher names the step.
"""

from __future__ import annotations

import traceback
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser

from console.embedded import SETUP_EXIT_FIRST, SETUP_STEPS
from runtime.command_args import GatehouseCommand

STEP_OPTIONS: dict[str, dict[str, Any]] = {"migrate": {"interactive": False, "verbosity": 0}}


class Command(GatehouseCommand):
    help = "make run's setup: migrate, graphs_check, and with --demo demo_setup; a failing step exits 10 + its index."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--demo", action="store_true", help="also create the demo users and threads")

    def handle(self, *args: Any, demo: bool, **options: Any) -> None:
        for code, step in enumerate(SETUP_STEPS, start=SETUP_EXIT_FIRST):
            if step == "demo_setup" and not demo:
                continue
            try:
                call_command(step, stdout=self.stdout, stderr=self.stderr, **STEP_OPTIONS.get(step, {}))
            except CommandError as exc:
                self.stderr.write(f"CommandError: {exc}")
                raise SystemExit(code) from exc
            except ImproperlyConfigured as exc:  # a setting or langgraph.json key (migrate reads "store"): named
                self.stderr.write(f"ImproperlyConfigured: {exc}")  # as manage.py prints it: one line
                raise SystemExit(code) from exc
            except Exception:  # noqa: BLE001 - any failure of a step must name the step
                traceback.print_exc()
                raise SystemExit(code) from None
