"""Export the audit trail to a file (CSV or JSON Lines), or verify an exported JSONL file.

    manage.py audit_export --format jsonl --output audit.jsonl [--graph G] [--thread ID] [--actor A]
                           [--action A] [--since ISO] [--until ISO] [--anchors] [--user USERNAME]
    manage.py audit_export --verify audit.jsonl [--against-db]

Without ``--user`` the export is unmasked (whoever runs manage.py has the
database anyway) and audited as ``manage.py``; with ``--user`` it is exactly
what that user would download from the API. ``--anchors`` exports only the
``audit.anchor`` events: copy that file to write-once storage.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management.base import CommandError, CommandParser

from approvals import permissions
from approvals.audit_filters import FILTERS, audit_filters_parse
from approvals.errors import DomainError
from approvals.exports.against import export_check_against_trail
from approvals.exports.stream import FORMATS, AuditExport, audit_export_queryset
from approvals.exports.verify import CSV_NOT_VERIFIABLE, export_is_csv, export_verify
from approvals.models import AuditAction
from runtime.command_args import GatehouseCommand
from runtime.progress import progress

# --verify's exit status when nothing is found broken but some rows could not be verified (masked): not 0,
# which says the whole file is proven, nor 1 (broken) or 2 (a usage error).
UNVERIFIED = 3


class Command(GatehouseCommand):
    help = "Export audit events (streamed, with chain hashes) or --verify an exported JSONL file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=FORMATS, default="jsonl")
        parser.add_argument("--output", "-o", help="file to write ('-' for stdout)")
        for name in FILTERS:
            parser.add_argument(f"--{name}", default="")
        parser.add_argument("--anchors", action="store_true", help="only audit.anchor events (the chain heads)")
        parser.add_argument("--user", default="", help="export as this user would see it (masking, scope)")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
        parser.add_argument(
            "--verify", metavar="FILE", help="re-check an exported JSON Lines file's hashes and links (not CSV)"
        )
        parser.add_argument(
            "--against-db",
            action="store_true",
            help="with --verify: also check every row, the trailer and the rows' completeness against the trail",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["verify"]:
            self._verify(Path(options["verify"]), against_db=options["against_db"])
            return
        if not options["output"]:
            raise CommandError("--output FILE is required (or --verify FILE)")
        if options["anchors"]:
            if options["action"] and options["action"] != AuditAction.AUDIT_ANCHOR:
                raise CommandError("--anchors exports audit.anchor events; drop --action")
            options["action"] = AuditAction.AUDIT_ANCHOR.value
        user = self._principal(options["user"])
        try:
            filters = audit_filters_parse(**{k: options[k] for k in FILTERS})
            export = AuditExport(
                user=user, filters=filters, format=options["format"], actor_label=None if user.pk else "manage.py"
            )
        except DomainError as exc:  # a filter's refusal names its option (--thread: not a thread id)
            field = f"{exc.field}: "
            raise CommandError(f"--{field}{exc.message.removeprefix(field)}" if exc.field else exc.message) from None
        total = audit_export_queryset(user=user, filters=filters).count()
        out: TextIO
        try:
            out = sys.stdout if options["output"] == "-" else _private(options["output"])
        except OSError as exc:
            raise CommandError(f"--output {options['output']}: {exc.strerror or exc}") from None
        try:
            with progress(total, desc="exporting", unit="event", enabled=not options["no_progress"]) as update:
                for chunk in export.chunks():
                    out.write(chunk)
                    update(export.stats.count)
        finally:
            if out is not sys.stdout:
                out.close()
        s = export.stats
        # On stderr, since stdout may be the export itself (--output -); in SUCCESS style, not stderr's own
        # ERROR (bold red on a terminal), which made a good export look like a failure.
        self.stderr.write(
            f"exported {s.count} events ({s.first_id}..{s.last_id}), head {s.head_hash}, "
            f"{'whole chain' if export.chained else 'filtered'}, {s.masked} masked → {options['output']}",
            style_func=self.style.SUCCESS,
        )

    def _principal(self, username: str) -> Any:
        if not username:
            # Unsaved and never stored: a superuser principal that sees everything unmasked.
            return User(username="manage.py", is_active=True, is_superuser=True)
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if not permissions.can(user, "approvals.view_audit"):
            raise CommandError(f"{username} may not read the audit trail (approvals.view_audit)")
        return user

    def _verify(self, path: Path, *, against_db: bool = False) -> None:
        try:
            with path.open("rb") as lines:
                if export_is_csv(lines.readline()):
                    raise CommandError(f"{path}: {CSV_NOT_VERIFIABLE}")
                lines.seek(0)
                result = export_verify(lines)
        except OSError as exc:
            raise CommandError(f"--verify {path}: {exc.strerror or exc}") from None
        if not result.ok:
            raise CommandError(f"{path}: BROKEN at line {result.line}: {result.reason} ({result.rows} rows before)")
        if against_db:
            with path.open("rb") as lines:
                findings = export_check_against_trail(lines)
            if findings:
                raise CommandError(f"{path}: BROKEN against the trail: " + "; ".join(findings[:20]))
            self.stdout.write(
                f"{path}: OK against the trail, {result.rows} events: each the stored event (masked values aside), "
                "the trailer one the trail recorded, no row missing or added"
            )
            return
        links = (
            "hashes and links verified from genesis"
            if result.chained
            else "each row's hash verified (filtered export: links not required)"
        )
        notes = ""
        if result.actor_unhashed:
            notes += f"; {result.actor_unhashed} rows from before the actor's user id was hashed (actor_id not covered)"
        if result.masked:
            # A masked row's hash covers values the file does not hold: nothing in the file proves its fields,
            # and a link to it from the next row of its chain proves only its place in the chain.
            unlinked = result.masked - result.masked_linked
            why = (
                "masked values and no neighbours to link"
                if not result.masked_linked
                else f"masked values; {result.masked_linked} of them linked into their chain by the next row, "
                f"{unlinked} with no neighbour to link"
            )
            raise CommandError(
                f"{path}: NOT VERIFIED: {result.masked} masked rows could not be verified: {why} "
                f"(the other {result.rows - result.masked} events: {links}{notes}). Check the file against the "
                "trail with --verify FILE --against-db, or verify an unmasked export",
                returncode=UNVERIFIED,
            )
        self.stdout.write(f"{path}: OK, {result.rows} events, {links}{notes}")


def _private(path: str) -> TextIO:
    """The export file, readable by its owner only: it holds the trail's details, unmasked for a principal
    who may see them (a file another user could read is a copy of the trail outside its access rules)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file that already existed keeps its mode through O_CREAT: tighten it
    return open(fd, "w", encoding="utf-8")
