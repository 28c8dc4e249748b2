"""System checks for settings that are valid one by one but wrong together (``manage.py check``).

The recovery clocks (docs/deploy.md, "Visibility timeout, lease and sweeper"):
the sweeper must run more often than a lease lapses or a lost dispatch is
noticed, and both recoveries must complete long before Redis' visibility timeout
would hand an unacknowledged message to another worker. Violations waste work
or slow recovery rather than corrupt anything (the fence makes duplicates
harmless), so they are warnings; ``check --deploy --fail-level WARNING`` fails
a deployment on them.

The static files manifest (production): ``check --deploy`` fails (``gatehouse.E001``/``E002``)
when ``collectstatic`` has not run for this version: a file missing from the manifest, or mapped to a
hashed name its current content does not have (an upgrade changed it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.staticfiles.storage import ManifestFilesMixin
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.files import File
from django.core.files.storage import storages

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


# Deploy-time only: every management command runs the ordinary checks, and a short test lease (2 s) next
# to the default timeout would print this before each of them.
@register(Tags.compatibility, deploy=True)
def worker_sessions_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A worker cut off mid-transaction holds its thread's and audit chain's locks until PostgreSQL ends the
    idle session (runtime/sessions.py); past the lease, the run's next attempt waits on them."""
    idle = float(settings.GATEHOUSE_WORKER_IDLE_IN_TRANSACTION_SECONDS)
    lease = float(settings.GATEHOUSE_LEASE_SECONDS)
    if idle and idle >= lease:
        return [
            Warning(
                f"GATEHOUSE_WORKER_IDLE_IN_TRANSACTION_SECONDS ({idle:g}) is not below GATEHOUSE_LEASE_SECONDS "
                f"({lease:g})",
                hint="A worker cut off inside a transaction keeps its locks until PostgreSQL ends its session; "
                "keep this below the lease, so they are released before the run can be claimed again.",
                id="gatehouse.W004",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def allowed_hosts_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``ALLOWED_HOSTS=*`` turns host validation off: links built from the request's Host header (password
    set-up links, redirects) can point wherever a client says. Django's own deploy checks accept it."""
    if "*" in settings.ALLOWED_HOSTS:
        return [
            Warning(
                "ALLOWED_HOSTS contains '*': any Host header is accepted",
                hint="List the names the console is reached by (ALLOWED_HOSTS=gatehouse.example.com). The probes "
                "and /metrics answer any host already (console.probes.ProbeMiddleware).",
                id="gatehouse.W005",
            )
        ]
    return []


@register(Tags.staticfiles, deploy=True)
def static_manifest_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With hashed static files (production) every page's ``{% static %}`` looks its file up in the
    manifest ``collectstatic`` writes; without it every console page is a 500, and the web process
    reads the manifest once, at start. Deploy-tagged: ``collectstatic`` itself runs the static
    checks, and ``migrate`` may run before it."""
    storage = storages.create_storage(settings.STORAGES["staticfiles"])
    if not isinstance(storage, ManifestFilesMixin):
        return []
    hint = (
        "Run `python manage.py collectstatic --noinput` (the image does it at build), then (re)start the web processes."
    )
    content = storage.read_manifest()
    if content is None:
        return [
            Error(
                f"the static files manifest {storage.path(storage.manifest_name)} is missing: every console page "
                "would fail (Missing staticfiles manifest entry)",
                hint=hint,
                id="gatehouse.E001",
            )
        ]
    try:
        collected = set(json.loads(content).get("paths", {}))
    except (ValueError, AttributeError):
        collected = set()
    root = Path(apps.get_app_config("console").path) / "static"
    files = sorted(p for p in root.rglob("*") if p.is_file())
    missing = [p.relative_to(root).as_posix() for p in files if p.relative_to(root).as_posix() not in collected]
    if missing:
        return [
            Error(
                f"the static files manifest {storage.path(storage.manifest_name)} lacks {len(missing)} of the "
                f"console's files (first: {missing[0]}): it was collected from another version",
                hint=hint,
                id="gatehouse.E002",
            )
        ]
    changed = [p.relative_to(root).as_posix() for p in files if _collected_from_other_content(storage, root, p)]
    if changed:
        return [
            Error(
                f"the static files manifest {storage.path(storage.manifest_name)} maps {len(changed)} of the "
                f"console's files to an older version of them (first: {changed[0]}): pages would be served the "
                "old file",
                hint=hint,
                id="gatehouse.E002",
            )
        ]
    return []


def _collected_from_other_content(storage: Any, root: Path, path: Path) -> bool:
    """True when the manifest's hashed name for ``path`` is not the one its content has now.

    The name is what ``ManifestStaticFilesStorage`` computes from the file (``name.<md5[:12]>.ext``). A
    stylesheet whose ``url()`` references were rewritten is hashed after the rewrite, so its name differs
    even when collected from this content: there the collected copy of the original decides."""
    name = path.relative_to(root).as_posix()
    with path.open("rb") as source:
        expected = storage.hashed_name(name, content=File(source))
    if storage.stored_name(name) == expected:
        return False
    try:
        with storage.open(name) as collected:
            return bool(collected.read() != path.read_bytes())
    except OSError:
        return True
