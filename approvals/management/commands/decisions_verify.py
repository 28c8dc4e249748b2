from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals.intent import intent_verify
from runtime.command_args import GatehouseCommand, uuid_option
from runtime.models import Thread


class Command(GatehouseCommand):
    help = (
        "Prove that what ran is what was signed: every decision the audit trail records is still there and "
        "matches its signed digest, every resume "
        "(and retry) carried exactly the signed command, and every effect's arguments equal the action the gate "
        "decision before it signed. Names each thread where they differ; exit status 1 if any."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--thread", action="append", default=[], help="verify only this thread id (repeatable)")
        parser.add_argument("--verbose-matches", action="store_true", help="also list every effect that matched")
        parser.add_argument(
            "--strict", action="store_true", help="also fail on effects that cannot be verified (no arguments recorded)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        threads = None
        if options["thread"]:
            wanted = [uuid_option("--thread", value) for value in options["thread"]]
            threads = Thread.objects.filter(pk__in=wanted).order_by("created_at")
            missing = sorted({str(w) for w in wanted} - {str(pk) for pk in threads.values_list("pk", flat=True)})
            if missing:  # "0 threads checked" and exit 0 would read as proven
                raise CommandError(f"--thread {missing[0]}: no such thread")
        report = intent_verify(threads=threads)
        unverifiable = [t for t in report.threads if t.unverifiable]
        for finding in report.threads:
            for problem in finding.problems:
                self.stderr.write(f"MISMATCH thread {finding.thread_id} ({finding.graph}): {problem}")
            for note in finding.unverifiable:
                self.stdout.write(f"unverifiable thread {finding.thread_id} ({finding.graph}): {note}")
            if options["verbose_matches"]:
                for match in finding.matched:
                    self.stdout.write(f"ok thread {finding.thread_id} ({finding.graph}): {match}")
        failing = report.failing
        summary = (
            f"{len(report.threads)} threads checked, {report.effects_matched} effects matched their signed action, "
            f"{len(unverifiable)} threads with unverifiable items, {len(failing)} threads where what ran is not "
            "what was signed"
        )
        if failing or (options["strict"] and unverifiable):
            names = ", ".join(t.thread_id for t in (failing or unverifiable))
            raise CommandError(f"signed intent NOT proven: {summary}: {names}")
        self.stdout.write(f"signed intent proven: {summary}")
