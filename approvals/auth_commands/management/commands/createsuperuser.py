from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = (
        "Refused: Gatehouse has no superusers. Create an admin with "
        "`manage.py user_create --role admin USERNAME` (audited as the command line)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # Django's options, so that a script using them gets the explanation, not a usage error.
        parser.add_argument("--username", default="")
        parser.add_argument("--email", default="")
        parser.add_argument("--noinput", "--no-input", action="store_false", dest="interactive")
        parser.add_argument("--database", default="default")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        # A superuser holds every permission whatever its roles ("roles: -" in user_list), and the stock
        # command created it outside the audit trail: one door for access, and it is audited.
        raise CommandError(
            "Gatehouse has no superusers (a superuser would hold every permission outside the roles, created "
            "without an audit event). Create an admin instead: "
            f"python manage.py user_create --role admin {username or 'USERNAME'} "
            "(prints a generated password; --password-stdin reads one)"
        )
