"""A deadline passes while a reviewer's inbox is open, in real Chromium against daphne, PostgreSQL and Redis.

The badge counts down in the browser and turns overdue on time (no reload); the test then runs the
sweep (as beat would, scoped to its graph) and the task moves to the escalation group through the live
event path (audit_record → approvals.events → console.live → the inbox's websocket).
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone
from playwright.sync_api import expect

from approvals.deadlines import deadlines_sweep
from approvals.models import ApprovalTask, AuditAction, AuditEvent, GraphAssignment
from tests.conftest import scaled
from tests.console.test_browser import SCREENSHOTS, _live, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

GRAPH = "deadline_review"  # tests/graphs/langgraph.json: compliance_review escalates to "deadline-leads"


def test_a_deadline_passes_while_the_inbox_is_open(browser, server, personas):  # noqa: F811
    leads, _ = Group.objects.get_or_create(name="deadline-leads")
    # A lead who may decide the task: escalation, like a lead's reassignment, hands it only to a group that can.
    lead = User.objects.create_user(f"dl-lead-{uuid.uuid4().hex[:6]}")
    lead.groups.add(Group.objects.get(name="reviewer"), leads)
    GraphAssignment.objects.create(user=lead, graph=GRAPH)
    case = f"DL-{uuid.uuid4().hex[:6]}"
    # Long enough to see "due in" after sign-in on a busy machine, short enough to watch it pass.
    task = task_make(
        graph=GRAPH,
        node="compliance_review",
        metadata={"case": case},
        due_at=timezone.now() + timedelta(seconds=scaled(8)),
        title="Compliance review",
    )
    page = _sign_in(browser, server, personas["reviewer"], f"/?q={case}")
    row = page.locator(f'#inbox-results tr[data-task-id="{task.pk}"]')
    badge = row.locator("[data-due-badge]")
    _live(page)
    expect(badge).to_contain_text("due in")
    page.screenshot(path=str(SCREENSHOTS / "deadline-due.png"), full_page=True)

    # The countdown crosses the deadline in the page itself: no reload, no server event.
    expect(badge).to_contain_text("overdue", timeout=scaled(20) * 1000)
    expect(badge).to_have_class(re.compile(r"\bbadge-danger\b"))
    expect(row).to_have_class(re.compile(r"\bis-overdue\b"))
    page.screenshot(path=str(SCREENSHOTS / "deadline-overdue.png"), full_page=True)

    # Beat's step, driven here: the escalation arrives live and names the group.
    result = deadlines_sweep(graphs=[GRAPH])
    assert result.escalated >= 1
    escalated = row.locator("[data-escalated]")
    expect(escalated).to_contain_text("escalated → deadline-leads", timeout=scaled(20) * 1000)
    assert "reassigned to deadline-leads" in (escalated.get_attribute("title") or "")
    page.screenshot(path=str(SCREENSHOTS / "deadline-escalated.png"), full_page=True)

    # The filter shows it under "escalated"; the database agrees with the page.
    task.refresh_from_db()
    assert task.assigned_group == leads and task.escalated_at is not None
    assert AuditEvent.objects.filter(subject_id=str(task.pk), action=AuditAction.DEADLINE_ESCALATED).count() == 1
    page.goto(f"{server}/?q={case}&due=escalated")
    expect(page.locator(f'#inbox-results tr[data-task-id="{task.pk}"]')).to_contain_text("deadline-leads")
    assert ApprovalTask.objects.filter(pk=task.pk, status="pending").exists()
    page.context.close()
