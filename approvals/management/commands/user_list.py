from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from approvals import users
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = "List users with their roles, graph and gate assignments, state and last sign-in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", dest="as_json", help="one JSON object per line")
        parser.add_argument("--inactive", action="store_true", help="only deactivated users")

    def handle(self, *args: Any, as_json: bool, inactive: bool, **options: Any) -> None:
        listed = users.users_list(actor=users.CLI, active=False if inactive else None)
        rows: list[dict[str, Any]] = [
            {
                "username": u.username,
                "active": u.is_active,
                "roles": [g.name for g in u.groups.all()],
                "graphs": [str(users.Assignment(a.graph, a.gate)) for a in u.graph_assignments.all()],
                "last_login": u.last_login.isoformat(timespec="seconds") if u.last_login else None,
                "sso": hasattr(u, "external_identity"),
            }
            for u in listed.iterator(chunk_size=500)
        ]
        if as_json:
            for row in rows:
                self.stdout.write(json.dumps(row, ensure_ascii=False))
            return
        header = ("USERNAME", "STATE", "ROLES", "GRAPHS", "LAST SIGN-IN")
        table = [
            (
                r["username"] + (" (sso)" if r["sso"] else ""),
                "active" if r["active"] else "deactivated",
                ",".join(r["roles"]) or "-",
                ",".join(r["graphs"]) or "-",
                r["last_login"] or "never",
            )
            for r in rows
        ]
        widths = [max(len(str(c)) for c in col) for col in zip(header, *table, strict=False)]
        for line in (header, *table):
            self.stdout.write("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
