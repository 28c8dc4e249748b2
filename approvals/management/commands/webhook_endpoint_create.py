from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals.errors import DomainError
from approvals.inbound.webhooks import DEFAULT_DECISION_MAP, webhook_endpoint_create
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = (
        "Register an inbound webhook endpoint NAME for GRAPH (POST /api/webhooks/NAME) and its service principal "
        "webhook:NAME, which may decide only the --gate(s) given. Prints the signing secret once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--graph", required=True)
        parser.add_argument(
            "--gate", action="append", required=True, help="a gate (node) of GRAPH it may decide (repeat for several)"
        )
        parser.add_argument(
            "--secret", action="append", default=None, help="whsec_... (repeat to accept several while rotating)"
        )
        parser.add_argument("--correlation-path", default="correlation_key", help="dotted path in the body")
        parser.add_argument(
            "--decision-map", default=json.dumps(DEFAULT_DECISION_MAP), help="JSON: field, approve, reject"
        )
        parser.add_argument("--reason-path", default="reason")
        parser.add_argument("--timestamp-path", default="", help="dotted path to the event time (default: header)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            mapping = json.loads(options["decision_map"])
        except ValueError as exc:
            raise CommandError(f"--decision-map is not JSON: {exc}") from None
        try:
            endpoint = webhook_endpoint_create(
                actor=None,
                name=options["name"],
                graph=options["graph"],
                gates=options["gate"],
                secrets=options["secret"],
                correlation_path=options["correlation_path"],
                decision_map=mapping,
                reason_path=options["reason_path"],
                timestamp_path=options["timestamp_path"],
            )
        except DomainError as exc:
            raise CommandError(f"{exc.field + ': ' if exc.field else ''}{exc.message}") from None
        self.stderr.write(  # stderr, since stdout is the secret; a success, not stderr's own style (red)
            f"endpoint {endpoint.name} → graph {endpoint.graph}: POST /api/webhooks/{endpoint.name}",
            style_func=self.style.SUCCESS,
        )
        self.stdout.write(endpoint.secrets[0])
