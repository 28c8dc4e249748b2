"""The rows written out in Python (console.rows_html): their links, and escaping of every value shown."""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace as NS

from django.urls import clear_script_prefix, reverse, set_script_prefix
from django.utils import timezone

from console.rows_html import audit_row_html, due_badge_html, inbox_row_html, task_url, thread_url

HOSTILE = '<img src=x onerror="alert(1)">&\''


class _User:
    def __init__(self, pk: int, name: str) -> None:
        self.pk, self.name = pk, name

    def get_username(self) -> str:
        return self.name


class _Task(NS):
    def get_status_display(self) -> str:
        return HOSTILE


def _task(**fields):
    now = timezone.now()
    column = NS(type=HOSTILE, key=HOSTILE, scale=(0, 100), label="Risk")
    base = {
        "pk": uuid.uuid4(),
        "title": HOSTILE,
        "node": "human_review",
        "graph": HOSTILE,
        "thread": NS(metadata={"case": HOSTILE, "applicant": HOSTILE}),
        "created_at": now - timedelta(hours=2),
        "due_at": now - timedelta(minutes=5),
        "remind_at": None,
        "is_open": True,
        "escalated_at": now - timedelta(minutes=1),
        "escalation_reason": HOSTILE,
        "escalated_to": HOSTILE,
        "assigned_group": NS(name=HOSTILE),
        "assigned_user": _User(7, HOSTILE),
        "assigned_user_id": 7,
        "status": HOSTILE,
        "inbox_cells": [
            NS(column=column, masked=True, text=HOSTILE, fraction=None),
            NS(column=column, masked=False, text=HOSTILE, fraction=0.5, low=30, high=70, value=50),
            NS(column=column, masked=False, text=HOSTILE, fraction=None),
        ],
    }
    return _Task(**{**base, **fields})


def test_the_rows_link_where_the_console_routes_a_task_and_a_thread() -> None:
    pk = uuid.uuid4()
    assert task_url(pk) == reverse("console:task", args=[pk])
    assert thread_url(pk) == reverse("console:thread", args=[pk])
    set_script_prefix("/gatehouse/")  # served under a path, as reverse() would link
    try:
        assert task_url(pk) == reverse("console:task", args=[pk]) == f"/gatehouse/tasks/{pk}/"
        assert thread_url(pk) == reverse("console:thread", args=[pk])
    finally:
        clear_script_prefix()


def test_every_value_in_a_row_is_escaped() -> None:
    task = _task()
    claim = NS(user_id=9, user=_User(9, HOSTILE), expires_at=timezone.now() + timedelta(minutes=30))
    conversation = NS(waiting={task.pk}, mentioned={task.pk})
    html = inbox_row_html(task, claim, me=NS(pk=1), bulk_enabled=True, conversation=conversation)
    assert "<img" not in html and 'onerror="' not in html
    # Every place a value is shown: title (link, checkbox label), graph (label, title), case, applicant,
    # status (class, text), claim holder, assignee (and the bulk checkbox's data-assignee), group (assignee,
    # escalation), escalation reason, and per gate column cell (masked, meter, text) its type, key and text.
    assert html.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&#x27;") == 23
    assert "waiting for answer" in html and "mentioned" in html and 'class="is-overdue"' in html


def test_a_row_says_you_for_the_viewers_own_claim_and_assignment() -> None:
    task = _task(assigned_user=_User(1, "me"), assigned_user_id=1, assigned_group=None, inbox_cells=[])
    claim = NS(user_id=1, user=_User(1, "me"), expires_at=timezone.now() + timedelta(minutes=30))
    html = inbox_row_html(task, claim, me=NS(pk=1), bulk_enabled=False, conversation=None)
    assert html.count(">you</span>") == 2
    assert 'class="badge badge-mine"' in html
    assert 'name="task_ids"' not in html  # no bulk selection without bulk


def test_a_due_badge_counts_down_only_on_an_open_task() -> None:
    due = timezone.now() + timedelta(minutes=20)
    sooner, later = due - timedelta(minutes=10), due + timedelta(minutes=10)
    open_badge = due_badge_html(_task(due_at=due, escalated_at=None))
    assert "data-due-badge" in open_badge and "badge-warn" in open_badge and "due in 2" in open_badge
    late = due_badge_html(_task(due_at=due, escalated_at=None, is_open=False, status="decided", decided_at=later))
    assert "data-due-badge" not in late and "UTC</time>" in late
    # Past tense, not "due 2026-…" beside an open task's "Due …": a decided task's deadline no longer applies.
    assert f">was due {due:%Y-%m-%d %H:%M} UTC</time>" in late
    # ...and "was due" only once it had passed: decided (or closed) before it, the badge says so.
    early = due_badge_html(_task(due_at=due, escalated_at=None, is_open=False, status="decided", decided_at=sooner))
    assert f">decided before its due time ({due:%Y-%m-%d %H:%M} UTC)</time>" in early
    cancelled = due_badge_html(_task(due_at=due, escalated_at=None, is_open=False, status="cancelled", decided_at=None))
    assert f">closed before its due time ({due:%Y-%m-%d %H:%M} UTC)</time>" in cancelled
    assert due_badge_html(_task(due_at=None)) == '<span class="muted">—</span>'


def _event(**fields):
    base = {
        "id": 12,
        "at": timezone.now(),
        "actor_label": HOSTILE,
        "action": HOSTILE,
        "subject_type": HOSTILE,
        "subject_id": HOSTILE,
        "thread_id": None,
        "graph": HOSTILE,
        "hash": HOSTILE * 3,
        "prev_hash": HOSTILE * 3,
    }
    return NS(**{**base, **fields})


def test_every_value_in_an_audit_row_is_escaped() -> None:
    html = audit_row_html(_event(), {"note": HOSTILE})
    assert "<img" not in html and 'onerror="' not in html
    # actor (text and title), action, subject type and id, graph (the summary and the hashes are cut short)
    assert html.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&#x27;") == 6
    # the details in full, as JSON (its quotes backslashed), escaped as well
    shown = "&quot;&lt;img src=x onerror=\\&quot;alert(1)\\&quot;&gt;&amp;&#x27;&quot;"
    assert f"<pre>{{\n  &quot;note&quot;: {shown}\n}}</pre>" in html


def test_an_audit_row_links_its_task_or_thread_and_cuts_long_ids() -> None:
    task_id, thread_id = uuid.uuid4(), uuid.uuid4()
    task_row = audit_row_html(_event(subject_type="task", subject_id=str(task_id), thread_id=thread_id), {})
    assert f'<a href="/tasks/{task_id}/" title="task {task_id}">task {str(task_id)[:9]}…</a>' in task_row
    run_id = str(uuid.uuid4())
    run_row = audit_row_html(_event(subject_type="run", subject_id=run_id, thread_id=thread_id), {})
    assert f'<a href="/threads/{thread_id}/" title="run {run_id}">run {run_id[:13]}…</a>' in run_row
    user_row = audit_row_html(_event(subject_type="user", subject_id="42", hash="a" * 64, prev_hash="b" * 64), {})
    assert "<a " not in user_row and "user 42" in user_row
    assert f"hash {'a' * 16}… ← {'b' * 16}…" in user_row
    worker = _event(subject_type="user", subject_id="42", actor_label="worker:vm:1:2")
    named = audit_row_html(worker, {}, subject_name="ada")
    assert '<span title="user 42">user ada</span>' in named and '<td title="worker:vm:1:2">worker (vm)</td>' in named


def test_a_hostile_task_subject_id_cannot_break_out_of_its_link() -> None:
    html = audit_row_html(_event(subject_type="task", subject_id='x" onmouseover="alert(1)'), {})
    assert 'onmouseover="' not in html
    assert '<a href="/tasks/x&quot; onmouseover=&quot;alert(1)/" title="task x&quot; onmouseover' in html


def test_an_escalation_that_moved_nothing_says_so() -> None:
    """The inbox read "overdue · escalated · 7 min ago" beside "Assigned to —": the gate had no escalate_to,
    nothing was reassigned, yet the badge read as a hand-off."""
    now = timezone.now()
    task = _task(
        escalated_at=now - timedelta(minutes=7), assigned_group=None, escalated_to="", escalation_reason="past due"
    )
    badge = due_badge_html(task)
    assert ">escalated, not reassigned · <time" in badge and 'title="Escalated ' in badge
    moved = due_badge_html(_task(escalated_at=now, escalated_to="leads", escalation_reason="past due"))
    assert ">escalated → leads · <time" in moved
    # A refused escalation keeps the group the task had: that is not where the escalation moved it.
    kept = due_badge_html(
        _task(escalated_at=now, assigned_group=NS(name="approvers"), escalated_to="", escalation_reason="past due")
    )
    assert ">escalated, not reassigned · <time" in kept


def test_the_bulk_box_names_a_group_the_reader_is_not_in_as_the_tasks_assignee() -> None:
    """An outside QA's find: the bulk confirmation warned of tasks assigned to another person only; tasks a lead
    reassigned, or a deadline escalated, to a group the reviewer is not in were approved without a word."""
    leads = NS(name="leads")
    task = _task(assigned_user=None, assigned_user_id=None, assigned_group=leads, assigned_group_id=5, inbox_cells=[])
    outside = inbox_row_html(task, None, me=NS(pk=1, _gatehouse_group_ids={2}), bulk_enabled=True, conversation=None)
    assert 'data-assignee="group leads"' in outside
    inside = inbox_row_html(task, None, me=NS(pk=1, _gatehouse_group_ids={2, 5}), bulk_enabled=True, conversation=None)
    assert "data-assignee" not in inside
    # A person named beside the group is who it waits for: they are named, not the group.
    both = _task(assigned_user=_User(7, "ada"), assigned_user_id=7, assigned_group=leads, assigned_group_id=5)
    named = inbox_row_html(both, None, me=NS(pk=1, _gatehouse_group_ids=set()), bulk_enabled=True, conversation=None)
    assert 'data-assignee="ada"' in named
