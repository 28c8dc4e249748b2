from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from approvals.audit import audit_verify


class Command(BaseCommand):
    help = "Walk the audit hash chain and report the first broken link (exit status 1 if any)."

    def handle(self, *args: Any, **options: Any) -> None:
        checked, broken = audit_verify()
        if broken is not None:
            raise CommandError(
                f"audit chain BROKEN at event #{broken.pk} ({broken.action} {broken.subject_type}:{broken.subject_id}, "
                f"{broken.at.isoformat()}): its hash does not match its contents or its predecessor; "
                f"{checked} events before it verified"
            )
        self.stdout.write(f"audit chain intact: {checked} events verified")
