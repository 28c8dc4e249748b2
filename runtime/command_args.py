"""Arguments of management commands checked in one place: a bad one is one ``CommandError`` line naming the
option (exit status 1), never a traceback, a silent no-op or a default taken for it.

Every Gatehouse command is a ``GatehouseCommand``: what argparse itself refuses (``--days abc``, an invalid
``--component`` choice, a missing required option) is the same single line, not argparse's usage block and
exit status 2. The helpers below check what argparse cannot (ranges, UUIDs, registered graphs) in ``handle``.
"""

from __future__ import annotations

import math
import sys
import uuid
from collections.abc import Iterable
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser


class OneLineErrorParser(CommandParser):
    """Django's parser, whose errors on the command line are printed as ``run_from_argv`` prints a
    ``CommandError`` raised by ``handle``: ``CommandError: <message>``, exit status 1 (docs/operations.md)."""

    def error(self, message: str) -> NoReturn:
        if not self.called_from_command_line:
            super().error(message)  # call_command(): Django raises CommandError("Error: …")
        reason = message.removeprefix("argument ")  # argparse's "argument --days: invalid int value: 'abc'"
        sys.stderr.write(f"CommandError: {reason}; see {self.prog} --help\n")
        sys.exit(1)


class GatehouseCommand(BaseCommand):
    """The base of every Gatehouse management command: argument errors are one line, exit status 1."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # BaseCommand.create_parser builds a CommandParser and takes no parser class; re-classing the instance
        # (a subclass that only overrides error()) keeps everything Django adds to it, without copying it here.
        parser.__class__ = OneLineErrorParser
        return parser


def uuid_option(option: str, value: str, *, what: str = "thread id") -> uuid.UUID:
    try:
        return uuid.UUID(str(value).strip())
    except ValueError:
        raise CommandError(f"{option} {value!r}: not a {what} (a UUID)") from None


def int_option(option: str, value: int, *, minimum: int, maximum: int, unit: str = "") -> int:
    if not minimum <= value <= maximum:
        suffix = f" {unit}" if unit else ""
        raise CommandError(f"{option} {value}: must be between {minimum} and {maximum}{suffix}")
    return value


def positive_seconds_option(option: str, value: float) -> float:
    """A duration in seconds: finite and above 0 (0 would make every heartbeat stale, not mean "unset")."""
    if not math.isfinite(value) or value <= 0:
        raise CommandError(f"{option} {value:g}: must be a number of seconds above 0")
    return value


def graph_option(option: str, value: str, *, also: Iterable[str] = ()) -> str:
    """A registered graph, or one of ``also`` (graphs known otherwise, e.g. from threads that outlived their
    registration); an unknown one names the registered graphs."""
    from runtime.registry import graph_names  # not at import: a command that takes no graph never loads LangGraph

    name = value.strip()
    if name in graph_names() or name in set(also):
        return name
    raise CommandError(f"{option} {value!r}: unknown graph (registered: {', '.join(graph_names()) or 'none'})")
