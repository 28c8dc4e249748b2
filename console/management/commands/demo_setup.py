from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser

from approvals.errors import DomainError
from demo.seed import DEMO_PASSWORD, DEMO_USERS, demo_setup, demo_users_signing_in
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = "Create demo users (password 'gatehouse') and demo threads paused at their gates. Idempotent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true", help="allow outside embedded/demo mode")

    def handle(self, *args: Any, force: bool, **options: Any) -> None:
        if not (settings.GATEHOUSE_DEMO or force):
            raise CommandError("demo users have a known password: refusing outside demo mode (GATEHOUSE_DEMO=true)")
        existed = set(get_user_model().objects.filter(username__in=DEMO_USERS).values_list("username", flat=True))
        try:
            created = demo_setup()
        except DomainError as exc:
            where = f"{exc.field}: " if exc.field else ""
            raise CommandError(
                f"a demo thread cannot start: {where}{exc.message} "
                "(a graph registered under a demo graph's name that is not the demo graph?)"
            ) from exc
        for line in created:
            self.stdout.write(f"created {line}")
        # Only who can still sign in with it: on every restart this said "password for all", also after an
        # admin had deactivated a demo user or changed its password.
        signing_in = demo_users_signing_in(known=set(DEMO_USERS) - existed)
        if signing_in:
            self.stdout.write(f"demo sign-in: {', '.join(signing_in)} (password: {DEMO_PASSWORD})")
