from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from approvals.tokens import TOKEN_ACTION_NAMES, TOKEN_DAYS_MAX, token_graphs_check, token_issue
from runtime.command_args import GatehouseCommand, int_option


class Command(GatehouseCommand):
    help = "Issue an API token for USERNAME and print it (its only line of output). It is not shown again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label for the token")
        parser.add_argument("--days", type=int, default=None, help=f"expire after this many days (1..{TOKEN_DAYS_MAX})")
        parser.add_argument("--graphs", default="", help="comma-separated graphs the token is limited to")
        parser.add_argument(
            "--actions",
            default="",
            help=f"comma-separated actions the token is limited to: {','.join(sorted(TOKEN_ACTION_NAMES))}",
        )

    def handle(
        self, *args: Any, username: str, name: str, days: int | None, graphs: str, actions: str, **options: Any
    ) -> None:
        if days is not None:  # beyond the bound, the expiry date overflowed (a traceback, no token)
            int_option("--days", days, minimum=1, maximum=TOKEN_DAYS_MAX, unit="days")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        expires = timezone.now() + timedelta(days=days) if days else None
        try:
            secret = token_issue(
                user=user,
                name=name,
                expires_at=expires,
                graphs=token_graphs_check([g.strip() for g in graphs.split(",") if g.strip()]),
                actions=[a.strip() for a in actions.split(",") if a.strip()],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(secret)
