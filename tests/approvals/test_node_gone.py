"""A node renamed while a thread waits in it: nothing is signed that the thread could not resume with.

An outside tester's find: ``finance_review`` renamed ``cfo_review`` (gates updated, restart) with a thread paused
there. Start-up said nothing; the task still offered ``can_decide: true``; an approval was a 201 whose resume
failed without naming the node; the operator's retry then completed the thread with nothing done, the
approval gone nowhere. Now: graphs_check and the worker's start warn, naming the graph, the node and the open
tasks; the task view says it cannot be decided and why; a decision is a 409 naming the node before anything is
signed or queued; a retry that would drop a decision signed before the rename is refused. With the old name
back, the task is decided and the thread resumes.

In-process: the registry is loaded from this test's files (a deploy and a restart), runs are executed here
by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

import io
import logging
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from approvals.assignment import assignees_able
from approvals.models import ApprovalTask, Decision, TaskStatus
from console.page_context import task_live_context
from runtime.executor import run_execute
from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.registry import GraphEntry, registry_load
from tests.approvals.handoffs import api, person
from tests.conftest import api_decide, graph_release_write, registry_restored, thread_start
from tests.console.conftest import console_client

pytestmark = pytest.mark.usefixtures("live_db")

MODULE = textwrap.dedent(
    """
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt


    class State(TypedDict, total=False):
        amount: int
        answer: str
        paid: bool


    def gate(state: State) -> dict:
        return {"answer": interrupt({"title": "Pay the invoice?", "amount": state.get("amount")})["decision"]}


    def pay(state: State) -> dict:
        return {"paid": state.get("answer") == "approve"}


    builder = StateGraph(State)
    builder.add_node("GATE", gate)
    builder.add_node("pay", pay)
    builder.add_edge(START, "GATE")
    builder.add_edge("GATE", "pay")
    builder.add_edge("pay", END)
    graph = builder
    """
)
GONE = "the graph no longer has node 'finance_review'"


@dataclass
class Deploy:
    graph: str  # its own name: a count of open tasks counts this test's
    before: Path  # the graph with finance_review
    after: Path  # the same graph with the node renamed cfo_review

    def restart(self, path: Path) -> dict[str, GraphEntry]:
        return registry_load(path)


@pytest.fixture
def deploy(tmp_path: Path) -> Iterator[Deploy]:
    graph = f"renamed_{uuid.uuid4().hex[:8]}"
    paths = [
        graph_release_write(tmp_path / name, graph, MODULE.replace("GATE", gate), [gate])
        for name, gate in (("before", "finance_review"), ("after", "cfo_review"))
    ]
    with registry_restored():
        yield Deploy(graph, *paths)


@pytest.fixture
def paused(deploy: Deploy, dispatched: list[str], operator, reviewer) -> ApprovalTask:
    """A thread paused in finance_review, then the node renamed and the registry reloaded (a restart)."""
    deploy.restart(deploy.before)
    thread = thread_start(operator, deploy.graph, {"amount": 120})
    run_execute(run_id=dispatched[-1])
    task = ApprovalTask.objects.get(thread_id=thread["id"], status=TaskStatus.PENDING)
    assert task.node == "finance_review"
    deploy.restart(deploy.after)
    return task


def _nothing_signed_or_queued(task: ApprovalTask) -> None:
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING
    assert not Decision.objects.filter(task=task).exists()
    assert not Run.objects.filter(thread_id=task.thread_id).exclude(kind=RunKind.START).exists()


def test_a_decision_on_a_task_at_a_renamed_node_is_refused_naming_it_before_anything_is_signed(paused, reviewer):
    answer = api_decide(reviewer, paused, "approve", checkpoint_id=paused.checkpoint_id)
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["message"].startswith(f"{GONE}; graph '{paused.graph}' must have it again")
    _nothing_signed_or_queued(paused)


def test_the_task_view_says_it_cannot_be_decided_and_why(paused, reviewer, personas):
    body = reviewer.client.get(f"/api/tasks/{paused.pk}").json()
    assert body["can_decide"] is False
    assert body["decide_refused"]["rule"] == "graph.node_gone"
    assert body["decide_refused"]["message"].startswith(GONE)
    live = task_live_context(personas["reviewer"].user, paused.pk)
    assert live["can_decide"] is False and live["decide_refused"].message.startswith(GONE)
    page = console_client(personas["reviewer"]).get(f"/tasks/{paused.pk}/").content.decode()
    assert "console:task-decide" not in page and f"/tasks/{paused.pk}/decide" not in page  # no decision form
    # It says why, not that the reviewer's role cannot decide.
    assert "This task cannot be decided: " + GONE in unescape(page) and "your role can inspect" not in page


def test_graphs_check_and_the_workers_start_warn_naming_the_graph_the_node_and_the_open_tasks(
    paused, deploy, settings, caplog
):
    from console.celery import _graphs_load

    warning = (
        f"graph '{deploy.graph}' no longer has node 'finance_review': 1 open task waits there and cannot be decided "
        "until it has it again (docs/schema-evolution.md, rule 5)"
    )
    settings.GATEHOUSE_GRAPHS = str(deploy.after)
    out, err = io.StringIO(), io.StringIO()
    call_command("graphs_check", stdout=out, stderr=err)  # exit status 0: the graphs load
    assert f"{deploy.graph}: ./review.py:graph (built once)" in out.getvalue()
    assert err.getvalue().splitlines() == [f"warning: {warning}"]
    with caplog.at_level(logging.WARNING, logger="gatehouse.worker"):
        _graphs_load()
    assert [r.getMessage() for r in caplog.records if r.name == "gatehouse.worker"] == [warning]


def test_with_the_old_name_back_the_task_is_decided_and_the_thread_resumes(paused, deploy, reviewer, dispatched):
    deploy.restart(deploy.before)
    assert reviewer.client.get(f"/api/tasks/{paused.pk}").json()["decide_refused"] is None
    assert api_decide(reviewer, paused, "approve", checkpoint_id=paused.checkpoint_id).status_code == 201
    run_execute(run_id=dispatched[-1])
    thread = Thread.objects.get(pk=paused.thread_id)
    assert thread.status == ThreadStatus.COMPLETED and thread.values["paid"] is True


def test_a_retry_that_would_drop_an_approval_signed_before_the_rename_is_refused(
    paused, deploy, reviewer, operator, dispatched
):
    """Signed before the restart, resumed after it: the resume fails; the retry then completed the thread
    without the approval. It is refused until the node is back, and then applies the approval."""
    deploy.restart(deploy.before)
    assert api_decide(reviewer, paused, "approve", checkpoint_id=paused.checkpoint_id).status_code == 201
    deploy.restart(deploy.after)
    run_execute(run_id=dispatched[-1])
    resume = Run.objects.get(thread_id=paused.thread_id, kind=RunKind.RESUME)
    assert resume.status == RunStatus.FAILED and "not pending" in resume.error
    refused = operator.client.post(f"/api/threads/{paused.thread_id}/retry", {})
    assert refused.status_code == 409, refused.content
    assert refused.json()["error"]["message"].startswith(f"the retry would drop a signed decision: {GONE}")
    assert not Run.objects.filter(thread_id=paused.thread_id, kind=RunKind.RETRY).exists()
    deploy.restart(deploy.before)
    assert operator.client.post(f"/api/threads/{paused.thread_id}/retry", {}).status_code == 202
    run_execute(run_id=dispatched[-1])
    thread = Thread.objects.get(pk=paused.thread_id)
    assert thread.status == ThreadStatus.COMPLETED and thread.values["paid"] is True


def test_a_task_at_a_renamed_node_is_handed_to_nobody_and_mails_nobody(paused, reviewer):
    """A lead's reassignment and a deadline's reminder chose among those who may decide the task by every rule
    but this one: a task nobody may decide went to a reviewer's queue, and its reminders to their mailbox."""
    lead = person("lead")
    answer = api(lead).post(f"/api/tasks/{paused.pk}/reassign", {"to_user": reviewer.username, "note": "yours"})
    assert answer.status_code == 403, answer.content  # as every assignee refusal (approvals.assignment)
    assert GONE in answer.json()["error"]["message"] and answer.json()["error"]["field"] == "to_user"
    paused.refresh_from_db()
    assert paused.assigned_user_id is None
    assert assignees_able(task=paused, among=User.objects.filter(pk=reviewer.user.pk)) == []


def test_a_bulk_decision_skips_a_task_at_a_renamed_node_as_undecidable_not_decided(paused, reviewer, monkeypatch):
    """An outside tester's bulk approval skipped four pending tasks of a renamed node as ``already_decided``."""
    from django.utils import timezone

    from approvals import bulk, services

    # Run here, on this test's registry: a worker another test started would take the bulk on its own.
    monkeypatch.setattr(bulk, "bulk_dispatch", lambda *, bulk_id: None)

    started = bulk.bulk_decide(
        actor=reviewer.user,
        outcome="approve",
        reason="batch",
        task_ids=[str(paused.pk)],
        signer=services.Signer(authenticated_at=timezone.now()),
    )
    done = bulk.bulk_run(bulk_id=started.pk)
    [skipped] = done.skipped
    assert skipped["code"] == "undecidable" and GONE in skipped["reason"]
    _nothing_signed_or_queued(paused)
