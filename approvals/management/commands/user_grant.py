from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals import users
from approvals.management.commands._user_args import (
    access_arguments,
    assignments_parse,
    describe,
    domain_call,
    user_find,
)
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = "Give USERNAME roles, graphs or single gates, on top of what they have (audited as the command line)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        access_arguments(parser, "give")

    def handle(self, *args: Any, username: str, role: list[str], graph: list[str], gate: list[str], **o: Any) -> None:
        if not (role or graph or gate):
            raise CommandError("give at least one --role, --graph or --gate")
        user = user_find(username)
        assignments, sources = assignments_parse(graph, gate)
        user = domain_call(
            lambda: users.user_grant(actor=users.CLI, user_id=user.pk, roles=role, assignments=assignments),
            sources,
        )
        self.stdout.write(describe(user))
