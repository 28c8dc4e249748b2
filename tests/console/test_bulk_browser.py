"""Bulk approval in Chromium: 100 tasks selected with "select all matching", 3 skipped with why, progress live.

97 tasks are written directly (``task_make``) and 3 are real loan threads paused by the worker;
every approved task's resume is dispatched, and the 3 real threads complete through the worker.
The "already decided" skip is a controlled race: a second approver's single decision holds the
contested task's row lock (uncommitted) until the bulk, on the worker, is seen waiting for it.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone
from playwright.sync_api import expect

from approvals import services
from approvals.models import ApprovalTask, AuditEvent, BulkAction, Decision
from approvals.payloads import DecisionRequest
from runtime.gatekeeper import gate_payload
from runtime.models import Run, Thread, ThreadStatus
from tests.conftest import loan_input, pending_tasks, scaled, thread_start, wait_for
from tests.console.test_browser import SCREENSHOTS, WAIT_MS, _live, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

CONTESTED_AT = 49  # the contested task's place in the bulk's order (oldest first)


def _bulk_waits_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return bool(cursor.fetchone()[0])


class HeldDecision(threading.Thread):
    """A second approver's single decision that has locked its task and finishes only when released.

    It takes the task's row lock first and decides (which appends to the audit chain, whose lock
    every other audited write waits for) only once released, as a slow single decision would.
    """

    def __init__(self, actor: Any, task_id: Any) -> None:
        super().__init__(daemon=True)
        self.actor, self.task_id = actor, task_id
        self.decided, self.release = threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with transaction.atomic():
                ApprovalTask.objects.select_for_update().get(pk=self.task_id)
                self.decided.set()
                if not self.release.wait(scaled(120)):
                    raise TimeoutError("never released")
                services.task_decide(
                    actor=self.actor,
                    task_id=self.task_id,
                    request=DecisionRequest(outcome="approve", reason="decided by hand"),
                    signer=services.Signer(authenticated_at=timezone.now()),
                )
        except BaseException as exc:  # reported to the test thread
            self.error = exc
        finally:
            self.decided.set()
            connection.close()


def test_a_bulk_approval_of_100_tasks_skips_3_with_why_and_shows_progress_live(browser, server, personas):  # noqa: F811
    approver, operator = personas["approver"], personas["operator"]
    tag = f"BULKB-{uuid.uuid4().hex[:6]}"

    # 3 real threads paused at their gate by the worker (the oldest, so the bulk decides them first).
    threads = [thread_start(operator, "loan_approval", loan_input(amount=20000), case=tag) for _ in range(3)]
    real = [pending_tasks(approver, t["id"])[0]["id"] for t in threads]
    made = []
    for i in range(97):
        if i == CONTESTED_AT - 3:
            made.append(task_make(title=f"{tag} contested", metadata={"case": tag}))
        elif i == 10:
            payload = gate_payload(title=f"{tag} needs an edit", decisions=("edit", "reject"))
            made.append(task_make(title=f"{tag} needs an edit", payload=payload, metadata={"case": tag}))
        elif i == 70:
            made.append(task_make(title=f"{tag} stale", metadata={"case": tag}))
        else:
            made.append(task_make(title=f"{tag} #{i:02d}", metadata={"case": tag}))
    by_title = {t.title: t for t in made}
    contested, needs_edit, stale = (by_title[f"{tag} {name}"] for name in ("contested", "needs an edit", "stale"))
    Thread.objects.filter(pk=stale.thread_id).update(checkpoint_id=uuid.uuid4().hex)  # the thread moved on

    page = _sign_in(browser, server, approver, f"/?q={tag}")
    _live(page)
    select_all = page.locator("[data-bulk-all]")
    expect(page.locator(".bulk-all")).to_contain_text("Select all 100 pending tasks matching this filter")
    page.locator('#inbox-results input[name="task_ids"]').first.check()
    expect(page.locator("#bulk-selected")).to_have_text("1 task selected")
    select_all.check()
    expect(page.locator("#bulk-selected")).to_have_text("All 100 matching tasks selected")
    page.locator("#bulk-reason").fill("Small loans, income verified in batch")
    page.screenshot(path=str(SCREENSHOTS / "bulk-inbox.png"), full_page=True)

    # The second approver is deciding the contested task by hand: its row is locked.
    held = HeldDecision(personas["approver2"].user, contested.pk)
    held.start()
    assert held.decided.wait(scaled(30)) and held.error is None, held.error
    try:
        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        page.get_by_role("button", name="Approve selected").click()  # it asks first, naming the count
        page.wait_for_url("**/bulk/*/")
        assert asked and asked[0].startswith("Approve 100 tasks at once?"), asked
        bulk = BulkAction.objects.get(pk=page.url.rstrip("/").rsplit("/", 1)[-1])
        assert bulk.total == 100 and bulk.task_ids[CONTESTED_AT] == str(contested.pk)
        _live(page)
        # The worker's bulk stops at the contested task, waiting for its lock: the page shows it live.
        seen: dict[str, Any] = {}

        def blocked() -> bool:
            seen["done"], seen["status"] = BulkAction.objects.values_list("done", "status").get(pk=bulk.pk)
            seen["waiting"] = _bulk_waits_for_a_lock()
            return seen["done"] == CONTESTED_AT and seen["waiting"]

        try:
            wait_for(blocked, timeout=90, what="the bulk to reach the contested task and wait for its lock")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: last seen {seen}") from None
        progress = page.locator("#bulk-progress")
        expect(progress).to_have_attribute("data-done", str(CONTESTED_AT), timeout=WAIT_MS)
        expect(progress).to_contain_text(f"{CONTESTED_AT} of 100 tasks processed")
        page.screenshot(path=str(SCREENSHOTS / "bulk-progress.png"), full_page=True)
    finally:
        held.release.set()
        held.join(scaled(30))
    assert held.error is None, held.error

    expect(progress).to_have_attribute("data-status", "finished", timeout=WAIT_MS * 4)
    expect(progress).to_contain_text("Finished: 97 decided, 3 skipped")
    skipped = page.locator(".bulk-skipped tbody tr")
    expect(skipped).to_have_count(3)
    expect(page.locator(f'.bulk-skipped tr[data-task-id="{needs_edit.pk}"]')).to_contain_text(
        "does not take a plain approve"
    )
    expect(page.locator(f'.bulk-skipped tr[data-task-id="{stale.pk}"]')).to_contain_text("moved on")
    expect(page.locator(f'.bulk-skipped tr[data-task-id="{contested.pk}"]')).to_contain_text("already_decided")
    page.screenshot(path=str(SCREENSHOTS / "bulk-finished.png"), full_page=True)

    done = BulkAction.objects.get(pk=bulk.pk)
    assert {s["task"]: s["code"] for s in done.skipped} == {
        str(needs_edit.pk): "needs_edit",
        str(stale.pk): "stale",
        str(contested.pk): "already_decided",
    }
    decided_ids = [d["task"] for d in done.decided]
    assert len(decided_ids) == 97 and set(real) <= set(decided_ids)
    # One decision each (the contested one is the second approver's only), one audit row each.
    decisions = Decision.objects.filter(task_id__in=[*decided_ids, str(contested.pk)])
    assert decisions.count() == 98
    assert list(Decision.objects.filter(task=contested).values_list("actor", flat=True)) == [
        personas["approver2"].user.pk
    ]
    made_audit = AuditEvent.objects.filter(action="decision.made", actor=approver.user, subject_id__in=decided_ids)
    assert made_audit.count() == 97
    # Every approved task's resume was queued and taken by the worker...
    runs = Run.objects.filter(decisions__task_id__in=decided_ids, kind="resume").distinct()
    assert runs.count() == 97
    wait_for(
        lambda: not runs.filter(status="queued").exists(),
        timeout=60,
        what="every resume to be claimed by the worker",
    )
    # ...and the real threads completed through it.
    for thread in threads:
        wait_for(
            lambda t=thread: Thread.objects.get(pk=t["id"]).status == ThreadStatus.COMPLETED,
            timeout=60,
            what=f"thread {thread['id']} to complete",
        )


def test_a_bulk_action_asked_to_sign_again_puts_focus_on_its_password(browser, server, personas):  # noqa: F811
    """An outside QA's find: a bulk approval from a session older than the re-authentication window was refused
    naming the password, and focus stayed on <body>; a single decision moves it to the password field."""
    from django.contrib.sessions.backends.db import SessionStore

    from approvals.security import SESSION_AUTH_AT

    tag = f"R-{uuid.uuid4().hex[:6]}"
    task = task_make(metadata={"case": tag})
    page = _sign_in(browser, server, personas["approver"], f"/?q={tag}")
    _live(page)
    [cookie] = [c for c in page.context.cookies() if c["name"] == "sessionid"]
    session = SessionStore(session_key=cookie["value"])
    session[SESSION_AUTH_AT] = (timezone.now() - timedelta(hours=2)).isoformat()
    session.save()
    page.locator(f'#inbox-results input[name="task_ids"][value="{task.pk}"]').check()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Approve selected").click()
    expect(page.locator("#bulk-error")).to_contain_text("password")
    expect(page.locator("#bulk-password")).to_be_focused()
    expect(page.locator("#bulk-password")).to_have_attribute("aria-invalid", "true")
    page.context.close()
