from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals.models import WebhookEndpoint
from approvals.outbound.signing import webhook_sign
from runtime.command_args import GatehouseCommand


class Command(GatehouseCommand):
    help = (
        "Send a correctly signed Standard Webhooks delivery to endpoint NAME (signed with its first secret), "
        "as a vendor would, and print the response."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the Gatehouse base URL")
        parser.add_argument("--body", required=True, help="the JSON body")
        parser.add_argument("--id", default=None, help="webhook-id (default: a new one; repeat one to test dedupe)")

    def handle(self, *args: Any, name: str, url: str, body: str, id: str | None, **options: Any) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:  # urllib's own refusal is a traceback
            raise CommandError(f"--url {url!r}: not an http(s) URL (e.g. http://127.0.0.1:8000)")
        endpoint = WebhookEndpoint.objects.filter(name=name).first()
        if endpoint is None:
            raise CommandError(f"no webhook endpoint named {name!r} (manage.py webhook_endpoint_create)")
        try:
            json.loads(body)
        except ValueError as exc:
            raise CommandError(f"--body is not JSON: {exc}") from None
        raw = body.encode()
        headers = webhook_sign(endpoint.secrets[0], raw, msg_id=id)
        request = urllib.request.Request(  # noqa: S310 - the operator's own URL
            f"{url.rstrip('/')}/api/webhooks/{name}",
            data=raw,
            method="POST",
            headers={**headers, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - the user's own URL
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode(errors="replace")
        except urllib.error.URLError as exc:
            raise CommandError(f"could not reach {url}: {exc.reason}") from None
        # stderr, since stdout is the answer's body; red (stderr's own style) only for a refusal.
        style = self.style.ERROR if status >= 400 else self.style.SUCCESS
        self.stderr.write(f"webhook-id {headers['webhook-id']} → HTTP {status}", style_func=style)
        self.stdout.write(text)
        if status >= 400:
            raise SystemExit(1)
