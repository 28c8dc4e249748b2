"""A claim that waited for its locks gets a whole lease from when it got them.

The takeover of a cut-off worker's run waits on whatever that worker's session still holds (the thread
row ``FOR SHARE``, from a fenced checkpoint write caught between its two round trips). The lease used to
run from the claim's read, taken before that wait: a wait longer than the lease committed a lease already
over, and the sweeper's next re-dispatch took the run from its new holder at once (found by
``tests/faults/test_pause.py`` under load: the run claimed twice in 60 ms).
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections, transaction

from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.runs import run_claim
from tests.conftest import backend_pid, scaled, session_waits_on_lock, wait_for

pytestmark = pytest.mark.usefixtures("live_db")


def _queued_run() -> Run:
    thread = Thread.objects.create(graph="loan_approval", status=ThreadStatus.BUSY)
    return Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.QUEUED, input={})


def test_a_claim_that_waited_for_the_thread_row_gets_its_whole_lease_from_then():
    run = _queued_run()
    holding, release = threading.Event(), threading.Event()
    out: dict[str, Any] = {}

    def hold_the_thread_row() -> None:  # what a cut-off worker's fenced checkpoint write leaves behind
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT fence FROM runtime_thread WHERE id = %s FOR SHARE", [run.thread_id])
                holding.set()
                release.wait(scaled(30))
                with connection.cursor() as cursor:
                    cursor.execute("SELECT clock_timestamp()")
                    out["released_at"] = cursor.fetchone()[0]
        finally:
            holding.set()
            connections.close_all()

    def claim() -> None:
        try:
            out["pid"] = backend_pid()
            out["run"] = run_claim(run_id=str(run.pk), worker=f"test:{uuid.uuid4().hex[:6]}")
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_thread_row)
    holder.start()
    assert holding.wait(scaled(30))
    claimer = threading.Thread(target=claim)
    claimer.start()
    try:
        queued = lambda: "pid" in out and session_waits_on_lock(out["pid"])  # noqa: E731
        wait_for(queued, timeout=30, what="the claim to wait for the thread row")
    finally:
        release.set()
        holder.join(scaled(30))
        claimer.join(scaled(30))
    claimed = out["run"]
    assert claimed is not None and claimed.attempts == 1
    stored = Run.objects.get(pk=run.pk)
    lease = timedelta(seconds=settings.GATEHOUSE_LEASE_SECONDS)
    # The lease starts after the lock was let go, not at the read that waited for it.
    assert stored.lease_expires_at >= out["released_at"] + lease
    assert (claimed.lease_expires_at, claimed.started_at) == (stored.lease_expires_at, stored.started_at)
    assert stored.started_at >= out["released_at"]
