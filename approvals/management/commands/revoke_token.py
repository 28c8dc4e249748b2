from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals.tokens import token_revoke
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = "Revoke API tokens by the prefix shown when they were issued (the first 10 characters)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, prefix: str, **options: Any) -> None:
        count = token_revoke(prefix=prefix[:10])
        if not count:
            raise CommandError(f"no live token starts with {prefix[:10]!r}")
        self.stdout.write(f"revoked {count} token(s)")
