from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals.tokens import TOKEN_PREFIX, token_revoke
from runtime.command_args import GatehouseCommand

SHOWN = 10  # token_issue stores a token's first 10 characters as its prefix, the part ever shown again
WHAT_IT_TAKES = (
    f"give the token's first {SHOWN} characters ({TOKEN_PREFIX} and {SHOWN - len(TOKEN_PREFIX)} more, as the console's "
    "user panel lists API tokens and the audit trail's token.issued names them) or the whole token"
)


class Command(GatehouseCommand):
    help = (
        f"Revoke an API token by its prefix: its first {SHOWN} characters, as the console's user panel shows them, "
        "or the whole token as issue_token printed it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "prefix", help=f"the token's first {SHOWN} characters ({TOKEN_PREFIX}…), or the whole token"
        )

    def handle(self, *args: Any, prefix: str, **options: Any) -> None:
        given = prefix.strip()
        # Every token starts with gh_: anything shorter than the stored prefix matched nothing, and the message
        # ("no live token starts with 'gh_'") read as if none existed.
        if len(given) < SHOWN or not given.startswith(TOKEN_PREFIX):
            raise CommandError(f"{given!r} is not a token prefix: {WHAT_IT_TAKES}")
        count = token_revoke(prefix=given[:SHOWN])
        if not count:
            raise CommandError(f"no unrevoked token has the prefix {given[:SHOWN]!r}")
        self.stdout.write(f"revoked {count} token(s)")
