"""manage.py audit_verify [--sink [PATH]]

Walks the audit trail once: every chain's links and hashes, the heads each
anchor event saw in the other chains, and every stored anchor: a chain
shorter than an anchor, or whose anchored event is gone or different, lost or
rewrote its tail. ``--sink`` also checks the anchors copied outside the
database (``GATEHOUSE_AUDIT_ANCHOR_SINK`` or PATH), which catch rows and
anchors deleted together, and reports anchors the sink lacks from its first
line on. Each event's hash covers its actor's user id (``actor_id``) unless it was written before that
was hashed; once an event of a chain covers it, every later one must (docs/security-audit.md, "Who
acted"). Exit status 1 on any finding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals.audit import (
    SinkUnreadable,
    anchor_sink_path,
    anchors_compare,
    anchors_from_sink,
    anchors_predating_sink,
    anchors_stored,
    audit_chain_check,
)
from approvals.models import AuditEvent
from runtime.command_args import GatehouseCommand
from runtime.progress import progress_spinner


class Command(GatehouseCommand):
    help = "Verify the audit hash chains and their anchors; name every finding (exit status 1 if any)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--sink",
            nargs="?",
            const="",
            default=None,
            metavar="PATH",
            help="also check the anchors in this file (default: GATEHOUSE_AUDIT_ANCHOR_SINK)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stored = anchors_stored()
        sink: list[Any] = []
        findings: list[str] = []
        if options["sink"] is not None:
            path = Path(options["sink"]) if options["sink"] else anchor_sink_path()
            if path is None:
                raise CommandError("--sink needs a PATH or GATEHOUSE_AUDIT_ANCHOR_SINK")
            try:
                sink = anchors_from_sink(path)
            except SinkUnreadable as exc:
                raise CommandError(str(exc)) from None
            findings += anchors_compare(stored, sink)
        with progress_spinner(desc=f"verifying {AuditEvent.objects.count():,} audit events"):
            report = audit_chain_check(anchors=[*stored, *sink])
        breaks = []
        for chain, broken in sorted(report.broken_in.items()):
            breaks.append(
                f"audit chain {chain} BROKEN at event #{broken.pk} ({broken.action} "
                f"{broken.subject_type}:{broken.subject_id}, {broken.at.isoformat()}): its hash does not match its "
                f"contents or its predecessor in chain {chain}"
            )
        if report.broken is not None:
            breaks.append(f"{report.verified} events before the first break verified")
        findings = breaks + findings + report.problems
        if findings:
            raise CommandError("\n".join(findings))
        anchors = f"{len(stored)} anchors"
        if options["sink"] is not None:
            anchors += f", {len(sink)} in the sink"
            older = anchors_predating_sink(stored, sink)
            if older:
                anchors += f" ({older} older anchors predate the sink's first line)"
        unhashed = ""
        if report.actor_unhashed:
            unhashed = (
                f" ({report.actor_unhashed} events from before the actor's user id was hashed: their actor_id is "
                "not covered)"
            )
        self.stdout.write(
            f"audit trail intact: {report.checked} events in {len(report.chains)} chains verified against "
            f"{anchors}{unhashed}"
        )
