from __future__ import annotations

import getpass
import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals import users
from approvals.management.commands._user_args import domain_call, user_find
from runtime.command_args import GatehouseCommand

ATTEMPTS = 3  # as Django's own command


class Command(GatehouseCommand):
    help = (
        "Set USERNAME's password (audited as the command line, user.password_reset); their sessions end. "
        "Prompts twice, or reads it from standard input with --password-stdin."
    )
    requires_migrations_checks = True

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", nargs="?", help="default: the current operating-system user, as Django's")
        parser.add_argument(
            "--password-stdin", action="store_true", help="read the password from standard input (first line)"
        )
        parser.add_argument("--database", default="default", help="accepted for Django's interface; must be default")

    def handle(self, *args: Any, username: str | None, password_stdin: bool, database: str, **options: Any) -> None:
        if database != "default":
            raise CommandError("--database: Gatehouse has one database, default")
        user = user_find(username or getpass.getuser())
        if password_stdin:
            self._set(user, sys.stdin.readline().rstrip("\r\n"))
            return
        self.stdout.write(f"Changing password for user '{user.get_username()}'")
        for attempt in range(1, ATTEMPTS + 1):
            first = getpass.getpass("Password: ")
            if getpass.getpass("Password (again): ") != first:
                self.stderr.write("Passwords do not match. Please try again.")
                continue
            try:
                self._set(user, first)
                return
            except CommandError as exc:
                if attempt == ATTEMPTS:
                    raise
                self.stderr.write(str(exc))
        raise CommandError(f"Aborting password change for user '{user.get_username()}' after {ATTEMPTS} attempts")

    def _set(self, user: Any, password: str) -> None:
        if not password:
            raise CommandError("password: a password is required")
        domain_call(lambda: users.user_password_reset(actor=users.CLI, user_id=user.pk, password=password))
        self.stdout.write(f"Password changed successfully for user '{user.get_username()}'")
