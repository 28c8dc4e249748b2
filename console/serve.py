"""``python -m console.serve``: daphne, its arguments unchanged, without the live relay's requests in its access log.

In embedded mode (``make run``) the workers hand live events to the web process over HTTP
(``GATEHOUSE_LIVE_RELAY_URL``, ``POST /internal/live/``, console/live.py): several per run and per
decision, which made most of the access log in ``make run``'s terminal. Every other request is
logged as daphne logs it; with Redis there is no relay and nothing is left out.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from daphne import cli
from daphne.access import AccessLogGenerator


class AccessLog(AccessLogGenerator):
    """Daphne's access log, leaving out the HTTP requests to ``quiet_path`` (when it is not empty)."""

    def __init__(self, stream: Any, *, quiet_path: str) -> None:
        super().__init__(stream)
        self.quiet_path = quiet_path

    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        if self.quiet_path and protocol == "http" and details.get("path") == self.quiet_path:
            return
        super().__call__(protocol, action, details)


def relay_path() -> str:
    """The path the workers post live events to, or "" when they publish to Redis instead."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    from django.conf import settings

    return urlsplit(settings.GATEHOUSE_LIVE_RELAY_URL).path if settings.GATEHOUSE_LIVE_RELAY_URL else ""


def main() -> None:
    quiet = relay_path()
    # The CLI builds its access log from this module attribute (daphne/cli.py): ours instead.
    cli.AccessLogGenerator = lambda stream: AccessLog(stream, quiet_path=quiet)
    cli.CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
