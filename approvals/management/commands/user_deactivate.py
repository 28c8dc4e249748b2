from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from approvals import users
from approvals.management.commands._user_args import describe, domain_call, user_find
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = (
        "Deactivate USERNAME: they can no longer sign in, their API tokens are revoked and their sessions "
        "end (audited as the command line). --reactivate lets them in again (revoked tokens stay revoked)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--reason", default="", help="why (kept in the audit trail)")
        parser.add_argument("--reactivate", action="store_true", help="undo a deactivation")

    def handle(self, *args: Any, username: str, reason: str, reactivate: bool, **options: Any) -> None:
        user = user_find(username)
        if reactivate:
            user = domain_call(lambda: users.user_reactivate(actor=users.CLI, user_id=user.pk))
        else:
            user = domain_call(lambda: users.user_deactivate(actor=users.CLI, user_id=user.pk, reason=reason))
        self.stdout.write(describe(user))
