"""System checks for settings that are valid one by one but wrong together (``manage.py check``).

The recovery clocks (docs/deploy.md, "Visibility timeout, lease and sweeper"):
the sweeper must run more often than a lease lapses or a lost dispatch is
noticed, and both recoveries must complete long before Redis' visibility timeout
would hand an unacknowledged message to another worker. Violations waste work
or slow recovery rather than corrupt anything (the fence makes duplicates
harmless), so they are warnings; ``check --deploy --fail-level WARNING`` fails
a deployment on them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

# "≪": the visibility timeout should be at least this many times the recovery clocks.
MUCH_LONGER = 10


@register(Tags.compatibility, deploy=False)
def recovery_clocks_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    lease = float(settings.GATEHOUSE_LEASE_SECONDS)
    sweep = float(settings.GATEHOUSE_SWEEP_SECONDS)
    redispatch = float(settings.GATEHOUSE_REDISPATCH_AFTER_SECONDS)
    messages: list[CheckMessage] = []
    if sweep >= lease:
        messages.append(
            Warning(
                f"GATEHOUSE_SWEEP_SECONDS ({sweep:g}) is not below GATEHOUSE_LEASE_SECONDS ({lease:g})",
                hint="A dead worker's run waits for the next sweep after its lease lapses; sweep more often "
                "than leases expire.",
                id="gatehouse.W001",
            )
        )
    if sweep >= redispatch:
        messages.append(
            Warning(
                f"GATEHOUSE_SWEEP_SECONDS ({sweep:g}) is not below GATEHOUSE_REDISPATCH_AFTER_SECONDS ({redispatch:g})",
                hint="Lost dispatches are only found by a sweep; sweep more often than the re-dispatch delay.",
                id="gatehouse.W002",
            )
        )
    visibility = (settings.CELERY_BROKER_TRANSPORT_OPTIONS or {}).get("visibility_timeout")
    if visibility is not None:
        recovery = max(lease, redispatch) + sweep
        if float(visibility) < MUCH_LONGER * recovery:
            messages.append(
                Warning(
                    f"CELERY_VISIBILITY_TIMEOUT ({visibility}) is not much longer than the sweeper's recovery "
                    f"(max(GATEHOUSE_LEASE_SECONDS, GATEHOUSE_REDISPATCH_AFTER_SECONDS) + GATEHOUSE_SWEEP_SECONDS "
                    f"= {recovery:g} s)",
                    hint=f"Keep the visibility timeout at least {MUCH_LONGER}x the recovery clocks and above your "
                    "longest run: Redis then redelivers only what the sweeper already recovered, and never a "
                    "healthy run still executing.",
                    id="gatehouse.W003",
                )
            )
    return messages
