"""A beat started with a new schedule file anchors the audit trail (and prunes) soon, not an hour later.

Celery dates an entry it never ran from beat's start, so its first run came one full interval
(GATEHOUSE_ANCHOR_SECONDS, 3600) after; Compose kept the schedule in the container, and a beat redeployed more
often than hourly never anchored or pruned. A real beat process here, its tasks run by the session's worker.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db.models import Max

from approvals.models import AuditAnchor
from tests.conftest import ROOT, process_group_stop, wait_for, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


@pytest.fixture
def beat(bank, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``celery beat`` on a schedule file of its own, with the catch-up on and the hourly intervals as shipped."""
    env = {**worker_env(bank), "GATEHOUSE_BEAT_CATCH_UP_SECONDS": "0", "GATEHOUSE_ANCHOR_SECONDS": "3600"}
    env["GATEHOUSE_BEAT_HEARTBEAT_FILE"] = str(tmp_path / "beat.heartbeat")
    log = (tmp_path / "beat.log").open("ab")
    command = [sys.executable, "-m", "celery", "-A", "console", "beat", "-l", "INFO", "--schedule"]
    proc = subprocess.Popen(
        [*command, str(tmp_path / "celerybeat-schedule")],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        process_group_stop(proc)
        log.close()
        print((tmp_path / "beat.log").read_text(errors="replace")[-3000:])


def test_a_beat_with_a_new_schedule_file_anchors_the_audit_trail_soon_after_it_starts(beat):
    newest = AuditAnchor.objects.aggregate(newest=Max("id"))["newest"] or 0
    wait_for(
        lambda: AuditAnchor.objects.filter(id__gt=newest).exists() or beat.poll() is not None,
        timeout=60,
        what="an audit anchor made after beat started",
    )
    assert beat.poll() is None, "beat exited"
    assert AuditAnchor.objects.filter(id__gt=newest).exists()
