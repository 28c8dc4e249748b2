"""The thread, task and audit pages say what happened in words, with identifiers only in titles and details.

In-process: runs are executed here by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import transaction

from approvals.models import ApprovalTask, AuditEvent, TaskStatus
from approvals.time_travel import thread_fork, thread_replay
from console import selectors
from console.selectors import timeline_for
from runtime import runs
from runtime.executor import run_execute
from runtime.models import Effect, RunKind, RunStatus, Thread
from runtime.state import thread_history_read
from tests.console.conftest import console_client
from tests.factories import task_make, thread_make

pytestmark = pytest.mark.usefixtures("live_db")


def _paused(graph_input: dict[str, Any], **thread: Any) -> tuple[Thread, ApprovalTask]:
    made = thread_make(graph="travel_pay", **thread)
    with transaction.atomic():
        run = runs.run_enqueue(thread=made, kind=RunKind.START, input=graph_input)
    run_execute(run_id=str(run.id))
    run.refresh_from_db()
    assert run.status == RunStatus.INTERRUPTED, run.error
    made.refresh_from_db()
    [task] = ApprovalTask.objects.filter(thread=made, status=TaskStatus.PENDING)
    return made, task


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _section(html: str, marker: str) -> str:
    return html.split(marker, 1)[1].split("</section>", 1)[0]


def test_the_timeline_says_what_each_checkpoint_was(dispatched, personas):
    thread, _ = _paused({"amount": 40})
    html = console_client(personas["reviewer"]).get(f"/threads/{thread.pk}/").content.decode()
    timeline = _text(_section(html, 'class="timeline"'))
    assert "Input received" in timeline and "Started" in timeline and "Ran prepare" in timeline
    assert "Start run — paused for a decision" in timeline
    assert "Paused for a decision: Pay 40" in timeline
    for jargon in ("__start__", "Step -1", "Step 0:", ": input", "interrupted", "checkpoint "):
        assert jargon not in timeline, jargon


def test_the_current_state_says_where_the_thread_waits_not_its_checkpoint_source(dispatched, personas):
    thread, _ = _paused({"amount": 40})
    html = console_client(personas["reviewer"]).get(f"/threads/{thread.pk}/").content.decode()
    card = _text(_section(html, 'id="checkpoint-view"'))
    assert "Ran prepare · Waiting at gate" in card
    assert "· loop ·" not in card and "next: gate" not in card


def test_a_fork_and_a_replay_are_said_as_an_operators_change_and_a_replay(dispatched, personas):
    thread, task = _paused({"amount": 40})
    operator = personas["operator"].user
    [*_, started, _input] = thread_history_read(thread)  # newest first: the step before the gate's
    # An update at a past checkpoint (the thread branches there), then a replay from the gate's checkpoint.
    thread_fork(actor=operator, thread_id=thread.pk, checkpoint_id=started.checkpoint_id, values={}, reason="r")
    thread_replay(actor=operator, thread_id=thread.pk, checkpoint_id=task.checkpoint_id, reason="again")
    run_execute(run_id=dispatched[-1])
    titles = [e.title for e in timeline_for(user=personas["reviewer"].user, thread=thread)]
    assert "State changed by an operator (fork)" in titles
    assert "Replayed from an earlier checkpoint" in titles
    assert not [t for t in titles if t.startswith("Step ")]


def test_a_failed_action_shows_its_name_status_and_a_one_line_error(dispatched, personas):
    thread, _ = _paused({"amount": 40})
    error = (
        "demo.bank_client.BankUnavailable: core banking timed out\n"
        "During task with name 'pay' and id '1f0c2b4e-0000-6000-8000-000000000000'"
    )
    key = f"gh:{thread.pk}:pay"
    # The effect ledger's row of a call that failed (runtime.effects records it so; no bank here).
    Effect.objects.create(key=key, name="pay", thread=thread, status="failed", error=error, calls=1)
    Thread.objects.filter(pk=thread.pk).update(status="failed", error=error)
    html = console_client(personas["reviewer"]).get(f"/threads/{thread.pk}/").content.decode()
    actions = html.split("<h3>Actions performed</h3>", 1)[1].split("</ul>", 1)[0]
    shown = _text(actions)
    assert "pay" in shown and "failed" in shown and "1 call" in shown and "core banking timed out" in shown
    assert key not in shown and "null" not in shown and f'title="Idempotency key {key}"' in actions
    status = _text(_section(html, 'id="ts-h"').split("Full error", 1)[0])
    assert "core banking timed out" in status
    assert "During task" not in status and "demo.bank_client" not in status
    assert "<summary>Full error</summary><pre>demo.bank_client.BankUnavailable" in html  # for operators


def test_the_task_pages_runs_say_their_outcome_once(personas):
    task = task_make()
    html = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    runs_list = html.split('<ul class="runs">', 1)[1].split("</ul>", 1)[0]
    assert "Start run — " in runs_list and "paused for a decision" in runs_list
    assert _text(runs_list).lower().count("interrupted") == 0


def test_a_thread_page_is_titled_by_its_case_with_its_id_aside(personas):
    task = task_make(metadata={"case": "C-1042", "applicant": "Ada Lovelace"})
    html = console_client(personas["reviewer"]).get(f"/threads/{task.thread_id}/").content.decode()
    assert re.search(r"<title>C-1042 · Ada Lovelace", html)
    assert "<h1>C-1042 · Ada Lovelace</h1>" in html and str(task.thread_id) in html
    assert f"Thread {str(task.thread_id)[:12]}" not in html.split("<h1>", 1)[1].split("</h1>", 1)[0]


def test_an_external_tasks_thread_labels_its_metadata(personas):
    thread = thread_make(graph="external:pay", metadata={"external_source": "pay", "external_key": "INV-9"})
    html = console_client(personas["admin"]).get(f"/threads/{thread.pk}/").content.decode()
    meta = html.split('<p class="meta">', 1)[1].split("</p>", 1)[0]
    assert "Source <strong>pay</strong>" in meta and "Key <strong>INV-9</strong>" in meta
    assert ">external_source " not in meta and ">external_key " not in meta
    assert "<h1>pay INV-9</h1>" in html


def test_the_audit_trail_names_a_worker_and_a_user_subject(personas):
    task = task_make()  # its start run's claim is audited as the factory's worker
    admin = personas["admin"]
    client = console_client(admin)  # signing in is audited: subject "user <id>"
    html = client.get("/audit/", {"actor": admin.username, "action": "auth.login"}).content.decode()
    assert f"user {admin.username}</span>" in html and f'title="user {admin.user.pk}"' in html
    html = client.get("/audit/", {"thread": str(task.thread_id), "action": "run.claimed"}).content.decode()
    assert ">worker (tests.factories)</td>" in html and 'title="worker:tests.factories"' in html


def test_a_failed_sign_in_is_not_named_as_the_account_whose_id_was_typed(personas):
    admin = personas["admin"]
    event = AuditEvent(id=1, subject_type="user", subject_id=str(admin.user.pk), action="auth.login_failed")
    assert selectors.audit_subject_names(events=[event]) == {}
