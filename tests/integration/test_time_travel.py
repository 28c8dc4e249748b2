"""Time travel end to end: the real worker, the fake bank, the API, the console; redaction of forked and subgraph state.

- A paid loan forked at its gate pays again on the fork as a new effect, exactly
  once even when the fork's worker is killed mid-payment; the original decision
  and payment are untouched.
- A replay re-runs from the past checkpoint and pauses again on a new task.
- Attackers: a role without "view sensitive" never sees a value planted by a
  fork, or a subgraph's sensitive state, on any surface that shows them.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from approvals.models import ApprovalTask, AuditEvent, Decision
from runtime.models import Branch, Effect, Run
from runtime.registry import graph_get
from tests.conftest import Persona, api_decide, loan_input, pending_tasks, thread_settled, thread_start, wait_for
from tests.console.conftest import console_client

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


@pytest.fixture
def secret_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``secret`` is a sensitive path of the time-travel graphs, for this process's reads.

    Set here rather than in langgraph.json: redaction happens where state is read (this
    process), and the redaction canary plants every graph that declares sensitive paths,
    which these graphs' dedicated attacker tests make redundant.
    """
    for graph in ("travel_pay", "travel_nested"):
        monkeypatch.setattr(graph_get(graph), "sensitive_paths", ["secret"])


def _paid_loan(operator: Persona, reviewer: Persona) -> tuple[str, dict[str, Any]]:
    """A loan approved and disbursed: (thread id, the task it paused on)."""
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"])
    assert api_decide(reviewer, task).status_code == 201
    assert thread_settled(reviewer, thread["id"])["values"]["status"] == "disbursed"
    return thread["id"], task


def _checkpoint_of(task: dict[str, Any]) -> str:
    return str(ApprovalTask.objects.get(pk=task["id"]).checkpoint_id)


def test_a_forked_loan_pays_as_a_new_effect_once_even_when_its_worker_is_killed(worker, personas, bank):
    if not worker.alive:
        worker.start()
    operator, reviewer = personas["operator"], personas["reviewer"]
    thread_id, task = _paid_loan(operator, reviewer)
    original_key = f"gh:{thread_id}:disburse"
    decision = Decision.objects.get(task_id=task["id"])
    before = (decision.pk, decision.outcome, decision.checkpoint_id, decision.payload_digest, decision.evidence_digest)
    effect = Effect.objects.get(key=original_key)
    effect_before = (effect.pk, effect.result, effect.calls, effect.args, effect.status)

    forked = operator.client.post(
        f"/api/threads/{thread_id}/fork",
        {"checkpoint_id": _checkpoint_of(task), "values": {"amount": 21000}, "reason": "amount corrected", "run": True},
    )
    assert forked.status_code == 201, forked.content
    branch = forked.json()
    assert branch["kind"] == "fork" and branch["update_keys"] == ["amount"] and branch["reason"] == "amount corrected"
    [new_task] = pending_tasks(reviewer, thread_id)
    assert new_task["id"] != task["id"]
    new_checkpoint = _checkpoint_of(new_task)
    assert new_checkpoint != _checkpoint_of(task)
    at = (
        graph_get("loan_approval")
        .compiled()
        .get_state({"configurable": {"thread_id": thread_id, "checkpoint_id": new_checkpoint}})
    )
    assert at.metadata["gatehouse_branch_id"] == branch["id"] and at.values["amount"] == 21000

    fork_key = f"{original_key}@{branch['id']}"
    with bank.held():  # the fork's worker dies while its payment call is in flight
        response = api_decide(reviewer, new_task)
        assert response.status_code == 201, response.content
        wait_for(lambda: bank.holding(fork_key) == 1, what="the fork's payment to reach the bank")
        worker.kill()
    wait_for(lambda: bank.ledger.executions.get(fork_key) == 1, timeout=10, what="the bank to execute it")
    worker.start()
    done = thread_settled(reviewer, thread_id, timeout=30)

    assert done["values"]["status"] == "disbursed" and done["values"]["amount"] == 21000
    assert bank.ledger.executions[fork_key] == 1  # the retry replayed the fork's key
    assert bank.ledger.executions[original_key] == 1  # the original payment is not repeated
    assert Effect.objects.get(key=fork_key).status == "done"
    effect.refresh_from_db()
    assert (effect.pk, effect.result, effect.calls, effect.args, effect.status) == effect_before
    decision.refresh_from_db()
    assert (
        decision.pk,
        decision.outcome,
        decision.checkpoint_id,
        decision.payload_digest,
        decision.evidence_digest,
    ) == before
    assert Decision.objects.filter(task__thread_id=thread_id).count() == 2
    assert AuditEvent.objects.filter(thread_id=thread_id, action="thread.forked").count() == 1


def test_a_replay_reruns_from_the_checkpoint_and_pauses_on_a_new_task(live_worker, personas, bank):
    operator, reviewer = personas["operator"], personas["reviewer"]
    thread_id, task = _paid_loan(operator, reviewer)
    replayed = operator.client.post(
        f"/api/threads/{thread_id}/replay", {"checkpoint_id": _checkpoint_of(task), "reason": "re-check"}
    )
    assert replayed.status_code == 202, replayed.content
    branch = replayed.json()
    [new_task] = pending_tasks(reviewer, thread_id)
    assert new_task["id"] != task["id"]
    assert Run.objects.get(pk=branch["run_id"]).status == "interrupted"
    assert Branch.objects.get(pk=branch["id"]).head_checkpoint_id == _checkpoint_of(new_task)
    listed = reviewer.client.get(f"/api/threads/{thread_id}/branches").json()
    assert [b["id"] for b in listed] == [branch["id"]] and listed[0]["created_by"] == operator.username


def test_a_replay_starts_from_the_checkpoint_as_saved_not_from_the_edit_decided_on_it(live_worker, personas, bank):
    # The decision's Command(update=...) is stored as pending writes of the checkpoint it paused at, and
    # LangGraph applied them to the replay: it re-ran with the reviewer's 15000, not the 18000 it paused on.
    operator, reviewer = personas["operator"], personas["reviewer"]
    thread = thread_start(operator, "loan_approval", loan_input(amount=18000))
    [task] = pending_tasks(reviewer, thread["id"])
    edited = api_decide(reviewer, task, "edit", reason="cap exposure", edits={"amount": 15000})
    assert edited.status_code == 201, edited.content
    assert thread_settled(reviewer, thread["id"])["values"]["amount"] == 15000
    replayed = operator.client.post(
        f"/api/threads/{thread['id']}/replay", {"checkpoint_id": _checkpoint_of(task), "reason": "re-check"}
    )
    assert replayed.status_code == 202, replayed.content
    [new_task] = pending_tasks(reviewer, thread["id"])
    state = reviewer.client.get(f"/api/tasks/{new_task['id']}").json()["state"]
    assert state["amount"] == 18000
    assert "18,000" in new_task["title"]  # the demo formats amounts as money


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"reason": "x"}, 422, "checkpoint_id"),
        ({"checkpoint_id": "nope", "reason": "x"}, 422, "checkpoint_id"),
        ({"checkpoint_id": "1f000000-0000-6000-8000-000000000000", "reason": "x"}, 404, "checkpoint_id"),
        ({"checkpoint_id": "1f000000-0000-6000-8000-000000000000"}, 422, "reason"),
        ({"checkpoint_id": "1f000000-0000-6000-8000-000000000000", "reason": ""}, 422, "reason"),
    ],
)
def test_bad_replay_requests_name_the_field_and_change_nothing(live_worker, personas, bank, body, status, field):
    operator = personas["operator"]
    thread = thread_start(operator, "loan_approval", loan_input())
    pending_tasks(operator, thread["id"])
    response = operator.client.post(f"/api/threads/{thread['id']}/replay", body)
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["field"] == field
    if status == 404:
        assert body["checkpoint_id"] in error["message"]
    assert not Branch.objects.filter(thread_id=thread["id"]).exists()
    assert ApprovalTask.objects.get(thread_id=thread["id"]).status == "pending"


# --- attackers: redaction of forked and subgraph state ------------------------------------------


def _surfaces(persona: Persona, thread_id: str) -> dict[str, str]:
    """Every surface that shows the thread's state, as ``persona`` reads it."""
    api, console = persona.client, console_client(persona)
    return {
        "api thread": api.get(f"/api/threads/{thread_id}").content.decode(),
        "api history": api.get(f"/api/threads/{thread_id}/history").content.decode(),
        "api branches": api.get(f"/api/threads/{thread_id}/branches").content.decode(),
        "api subgraphs": api.get(f"/api/threads/{thread_id}/subgraphs").content.decode(),
        "lg thread": api.get(f"/lg/threads/{thread_id}").content.decode(),
        "lg state": api.get(f"/lg/threads/{thread_id}/state", subgraphs="true").content.decode(),
        "lg history": api.post(f"/lg/threads/{thread_id}/history", {"limit": 50}).content.decode(),
        "console thread": console.get(f"/threads/{thread_id}/").content.decode(),
    }


def test_a_value_planted_by_a_fork_is_masked_on_every_surface(live_worker, personas, secret_masked):
    operator = personas["operator"]
    canary = f"cnry{uuid.uuid4().hex[:12]}"
    thread = thread_start(operator, "travel_pay", {"amount": 10})
    [task] = pending_tasks(operator, thread["id"])
    forked = operator.client.post(
        f"/api/threads/{thread['id']}/fork",
        {"checkpoint_id": _checkpoint_of(task), "values": {"secret": canary}, "reason": "plant"},
    )
    assert forked.status_code == 201, forked.content
    for persona in ("reviewer", "operator"):  # neither may see sensitive values
        leaks = [name for name, body in _surfaces(personas[persona], thread["id"]).items() if canary in body]
        assert leaks == [], (persona, leaks)
    # the crawl reaches the value: a role allowed to see it does
    assert canary in personas["approver"].client.get(f"/api/threads/{thread['id']}").content.decode()
    shown = personas["approver"].client.get(f"/lg/threads/{thread['id']}/state").json()
    assert shown["values"]["secret"] == canary


def test_a_subgraphs_sensitive_state_is_masked_on_every_surface(live_worker, personas, secret_masked):
    operator = personas["operator"]
    canary = f"cnry{uuid.uuid4().hex[:12]}"
    thread = thread_start(operator, "travel_nested", {"secret": canary, "amount": 3})
    pending_tasks(operator, thread["id"])
    for persona in ("reviewer", "operator"):
        surfaces = _surfaces(personas[persona], thread["id"])
        checkpoint = personas[persona].client.post(
            f"/lg/threads/{thread['id']}/state/checkpoint",
            {"checkpoint": {"checkpoint_id": None}, "subgraphs": True},
        )
        surfaces["lg state/checkpoint"] = checkpoint.content.decode()
        leaks = [name for name, body in surfaces.items() if canary in body]
        assert leaks == [], (persona, leaks)
    # the subgraph's state is there, and a permitted role sees the value in it
    [sub] = personas["reviewer"].client.get(f"/api/threads/{thread['id']}/subgraphs").json()
    assert sub["name"] == "child" and sub["checkpoint_ns"].startswith("child:") and sub["next"] == ["inner_gate"]
    [sub] = personas["approver"].client.get(f"/api/threads/{thread['id']}/subgraphs").json()
    assert sub["values"]["secret"] == canary
    state = personas["approver"].client.get(f"/lg/threads/{thread['id']}/state", subgraphs="true").json()
    [child] = [t for t in state["tasks"] if t["name"] == "child"]
    assert child["state"]["values"]["secret"] == canary
    assert child["state"]["checkpoint"]["checkpoint_ns"] == sub["checkpoint_ns"]
