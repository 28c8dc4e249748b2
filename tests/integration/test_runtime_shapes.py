"""Interrupt shapes the runtime must turn into tasks: parallel, nested, static breakpoints, failures."""

from __future__ import annotations

import pytest

from approvals.models import ApprovalTask
from runtime.models import Run
from tests.conftest import api_decide, pending_tasks, thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_parallel_interrupts_are_resumed_together_once_all_are_decided(operator, reviewer):
    thread = thread_start(operator, "parallel_review", {"subject": "merger"})
    tasks = pending_tasks(reviewer, thread["id"], count=2)
    assert sorted(t["node"] for t in tasks) == ["legal", "risk"]
    assert len({t["checkpoint_id"] for t in tasks}) == 1

    first, second = tasks
    api_decide(reviewer, first)
    # One of two answered: nothing resumes yet, the other task stays open.
    assert Run.objects.filter(thread_id=thread["id"], kind="resume").count() == 0
    assert reviewer.client.get(f"/api/threads/{thread['id']}").json()["status"] == "interrupted"

    api_decide(reviewer, second, "reject", reason="missing memo")
    resume = Run.objects.get(thread_id=thread["id"], kind="resume")
    assert set(resume.command["resume"]) == {first["interrupt_id"], second["interrupt_id"]}

    done = thread_settled(reviewer, thread["id"])
    assert sorted(done["values"]["answers"]) == sorted([f"{first['node']}:approve", f"{second['node']}:reject"])
    assert done["values"]["done"] is True


def test_an_interrupt_inside_a_subgraph_becomes_a_namespaced_task(operator, reviewer):
    thread = thread_start(operator, "nested_review", {"subject": "nested"})
    [task] = pending_tasks(reviewer, thread["id"])
    assert task["node"] == "inner_gate"
    assert task["checkpoint_ns"].startswith("child:")
    assert task["checkpoint_id"] == reviewer.client.get(f"/api/threads/{thread['id']}").json()["checkpoint_id"]

    api_decide(reviewer, task)
    done = thread_settled(reviewer, thread["id"])
    assert "inner_gate:approve" in done["values"]["answers"]
    assert done["values"]["done"] is True


def test_a_static_breakpoint_waits_for_approval_and_applies_edits(operator, reviewer):
    thread = thread_start(operator, "breakpoint_review", {"subject": "bp", "amount": 10})
    [task] = pending_tasks(reviewer, thread["id"])
    assert task["kind"] == "breakpoint"
    assert task["node"] == "commit"
    detail = reviewer.client.get(f"/api/tasks/{task['id']}").json()
    assert detail["payload_kind"] == "breakpoint"
    assert detail["allowed_decisions"] == ["approve", "edit", "reject"]

    response = api_decide(reviewer, task, "edit", reason="smaller", edits={"amount": 7})
    assert response.status_code == 201, response.content
    done = thread_settled(reviewer, thread["id"])
    assert done["values"]["answers"] == ["prepared", "committed:7"]


def test_rejecting_a_static_breakpoint_cancels_the_thread(operator, reviewer):
    thread = thread_start(operator, "breakpoint_review", {"subject": "bp-reject", "amount": 10})
    [task] = pending_tasks(reviewer, thread["id"])
    response = api_decide(reviewer, task, "reject", reason="no")
    assert response.status_code == 201
    body = reviewer.client.get(f"/api/threads/{thread['id']}").json()
    assert body["status"] == "cancelled"
    assert "committed" not in str(body["values"])
    assert not Run.objects.filter(thread_id=thread["id"], kind="resume").exists()


def test_a_failing_node_marks_the_run_failed_and_a_retry_completes_it(operator, reviewer, tmp_path):
    marker = tmp_path / "fixed"
    thread = thread_start(operator, "flaky", {"subject": "ledger", "marker": str(marker)})
    failed = thread_settled(operator, thread["id"], statuses=("failed",))
    assert "downstream system unavailable for ledger" in failed["error"]
    run = Run.objects.get(thread_id=thread["id"], kind="start")
    assert run.status == "failed" and "RuntimeError" in run.error

    refused = reviewer.client.post(f"/api/threads/{thread['id']}/retry")
    assert refused.status_code == 403  # reviewers decide; operators retry

    marker.write_text("ok")
    response = operator.client.post(f"/api/threads/{thread['id']}/retry")
    assert response.status_code == 202, response.content
    done = thread_settled(operator, thread["id"])
    assert done["values"]["done"] is True
    assert operator.client.post(f"/api/threads/{thread['id']}/retry").status_code == 409


def test_an_exact_resume_value_is_validated_against_the_response_schema(operator, reviewer):
    thread = thread_start(operator, "schema_reply", {"subject": "limits"})
    [task] = pending_tasks(reviewer, thread["id"])
    detail = reviewer.client.get(f"/api/tasks/{task['id']}").json()
    assert detail["response_schema"]["properties"]["limit"]["type"] == "integer"

    bad = api_decide(reviewer, task, resume={"approved": True, "limit": "lots"})
    assert bad.status_code == 422
    assert bad.json()["error"]["field"] == "resume.limit"
    assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"

    ok = api_decide(reviewer, task, resume={"approved": True, "limit": 500})
    assert ok.status_code == 201, ok.content
    done = thread_settled(reviewer, thread["id"])
    assert done["values"]["amount"] == 500 and done["values"]["done"] is True
    statuses = dict(Run.objects.filter(thread_id=thread["id"]).values_list("kind", "status"))
    assert statuses == {"start": "interrupted", "resume": "succeeded"}
