from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals import users
from approvals.management.commands._user_args import (
    access_arguments,
    describe,
    domain_call,
    gates_parse,
    user_find,
)
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = (
        "Take roles, graphs (with every gate assignment of them) or single gates away from USERNAME "
        "(audited as the command line). Refused if it would leave no active admin."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        access_arguments(parser, "take away")

    def handle(self, *args: Any, username: str, role: list[str], graph: list[str], gate: list[str], **o: Any) -> None:
        if not (role or graph or gate):
            raise CommandError("give at least one --role, --graph or --gate")
        user = user_find(username)
        gates = gates_parse(gate)
        user = domain_call(
            lambda: users.user_revoke(actor=users.CLI, user_id=user.pk, roles=role, graphs=graph, assignments=gates),
            [("--gate", g) for g in gate],
            graph_sources=[("--graph", g) for g in graph],
        )
        self.stdout.write(describe(user))
