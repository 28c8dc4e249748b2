from __future__ import annotations

import secrets
import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals import users
from approvals.management.commands._user_args import access_arguments, assignments_parse, describe, domain_call
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = (
        "Create a user with roles and graph/gate assignments (audited as the command line). "
        "Prints a generated password as its only line of output, unless --password-stdin reads one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        access_arguments(parser, "give")
        parser.add_argument(
            "--password-stdin", action="store_true", help="read the password from standard input (first line)"
        )

    def handle(
        self,
        *args: Any,
        username: str,
        email: str,
        role: list[str],
        graph: list[str],
        gate: list[str],
        password_stdin: bool,
        **options: Any,
    ) -> None:
        if password_stdin:
            password = sys.stdin.readline().rstrip("\r\n")
            if not password:
                raise CommandError("--password-stdin: standard input held no password")
        else:
            password = secrets.token_urlsafe(18)
        assignments, sources = assignments_parse(graph, gate)
        user = domain_call(
            lambda: users.user_create(
                actor=users.CLI,
                username=username,
                email=email,
                roles=role,
                assignments=assignments,
                password=password,
            ),
            sources,
        )
        # On stderr (stdout is the password alone), in SUCCESS style rather than stderr's ERROR (red).
        self.stderr.write(f"created {describe(user)}", style_func=self.style.SUCCESS)
        if not password_stdin:
            self.stdout.write(password)
