"""Start → pause → decide via the API → resume on a real worker → action once → completed."""

from __future__ import annotations

import pytest

from approvals.models import AuditEvent, Decision
from runtime.models import Effect
from tests.conftest import api_decide, loan_input, pending_tasks, thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _audit_actions(thread_id: str) -> list[str]:
    return list(AuditEvent.objects.filter(thread_id=thread_id).order_by("id").values_list("action", flat=True))


def test_an_approved_loan_is_disbursed_exactly_once(operator, reviewer, bank):
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000), case="C-1")
    [task] = pending_tasks(reviewer, thread["id"])
    assert task["node"] == "human_review"

    detail = reviewer.client.get(f"/api/tasks/{task['id']}").json()
    assert detail["payload_kind"] == "gatehouse"
    assert detail["allowed_decisions"] == ["approve", "reject", "edit"]  # a reply would decline it: not offered
    assert detail["state"]["amount"] == 20000
    assert detail["can_decide"] is True

    response = api_decide(reviewer, task, reason="income verified", checkpoint_id=detail["checkpoint_id"])
    assert response.status_code == 201, response.content

    done = thread_settled(reviewer, thread["id"])
    assert done["status"] == "completed"
    assert done["values"]["status"] == "disbursed"
    key = f"gh:{thread['id']}:disburse"
    assert bank.ledger.executions[key] == 1
    effect = Effect.objects.get(key=key)
    assert effect.status == "done" and effect.calls == 1
    assert done["values"]["disbursement"] == effect.result

    from runtime.models import Thread
    from runtime.state import thread_history_read

    ran = [sorted(v.writes) for v in thread_history_read(Thread.objects.get(pk=thread["id"])) if v.writes]
    assert ["disburse"] in ran and ["human_review"] in ran and ["score_risk"] in ran  # timeline labels

    # The thread page's timeline puts each run's outcome after what the run did: the start run's pause
    # after its steps (before the task it opened), the resume's success after the payment and its step.
    from console.selectors import timeline_for

    timeline = timeline_for(user=reviewer.user, thread=Thread.objects.get(pk=thread["id"]))
    titles = [entry.title for entry in timeline]
    assert (
        titles.index("Ran score_risk")
        < titles.index("Start run — paused for a decision")
        < titles.index(next(t for t in titles if t.startswith("Paused for a decision:")))
    )
    assert titles.index("Action disburse: done") < titles.index("Ran disburse") < titles.index("Resume run — succeeded")

    actions = _audit_actions(thread["id"])
    for expected in [
        "thread.started",
        "run.claimed",
        "task.opened",
        "decision.made",
        "run.queued",
        "effect.executed",
        "thread.completed",
    ]:
        assert expected in actions, (expected, actions)
    assert actions.index("decision.made") < actions.index("effect.executed") < actions.index("thread.completed")
    # The trail binds the payment to the signed decision it followed.
    executed = AuditEvent.objects.get(thread_id=thread["id"], action="effect.executed")
    assert executed.details["follows_decision"] == response.json()["id"]


def test_the_action_sees_the_reviewers_edits(operator, reviewer, bank):
    thread = thread_start(operator, "loan_approval", loan_input(amount=21000))
    [task] = pending_tasks(reviewer, thread["id"])
    response = api_decide(
        reviewer, task, "edit", reason="lower the exposure", edits={"amount": 15000, "term_months": 36}
    )
    assert response.status_code == 201, response.content
    assert response.json()["state_patch"] == {"amount": 15000, "term_months": 36}

    done = thread_settled(reviewer, thread["id"])
    assert done["values"]["amount"] == 15000
    assert done["values"]["disbursement"]["request"] == {"loan_id": done["values"]["loan_id"], "amount": 15000}
    assert bank.ledger.executions[f"gh:{thread['id']}:disburse"] == 1


def test_the_checkpoint_a_reviewer_decided_on_still_shows_what_they_saw(operator, reviewer, auditor, bank):
    """LangGraph keeps a resume's state update as pending writes of the paused checkpoint and applied them
    when reading it: after an edit of 21000 to 15000, "the state the signer saw" (the task's state, the
    checkpoint in the history) said 15000."""
    thread = thread_start(operator, "loan_approval", loan_input(amount=21000))
    [task] = pending_tasks(reviewer, thread["id"])
    assert auditor.client.get(f"/api/tasks/{task['id']}").json()["state"]["amount"] == 21000
    api_decide(reviewer, task, "edit", reason="lower the exposure", edits={"amount": 15000})
    assert thread_settled(reviewer, thread["id"])["values"]["amount"] == 15000

    assert auditor.client.get(f"/api/tasks/{task['id']}").json()["state"]["amount"] == 21000
    history = {c["checkpoint_id"]: c for c in auditor.client.get(f"/api/threads/{thread['id']}/history").json()}
    assert history[task["checkpoint_id"]]["values"]["amount"] == 21000
    assert history[next(iter(history))]["values"]["amount"] == 15000  # the newest: after the edit


@pytest.mark.parametrize(
    "edit,field",
    [({"edits": {"amount": -5}}, "edits.amount"), ({"action_args": {"amount": -5}}, "action_args.amount")],
)
def test_an_edit_the_action_cannot_take_is_refused_however_it_is_made(operator, reviewer, edit, field):
    """A state edit of the amount feeds the payment's argument: -5 typed into the state was paid."""
    thread = thread_start(operator, "loan_approval", loan_input(amount=21000))
    [task] = pending_tasks(reviewer, thread["id"])
    refused = api_decide(reviewer, task, "edit", reason="typo", **edit)
    assert refused.status_code == 422, refused.content
    assert refused.json()["error"]["field"] == field
    assert not Decision.objects.filter(task_id=task["id"]).exists()


def test_edited_action_arguments_reach_the_action(operator, reviewer, bank):
    thread = thread_start(operator, "loan_approval", loan_input(amount=21000))
    [task] = pending_tasks(reviewer, thread["id"])
    response = api_decide(reviewer, task, "edit", reason="approve a smaller amount", action_args={"amount": 12500})
    assert response.status_code == 201, response.content
    done = thread_settled(reviewer, thread["id"])
    assert done["values"]["disbursement"]["request"]["amount"] == 12500


def test_a_rejected_loan_is_declined_and_nothing_is_paid(operator, reviewer, bank):
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    [task] = pending_tasks(reviewer, thread["id"])
    response = api_decide(reviewer, task, "reject", reason="income not verifiable")
    assert response.status_code == 201, response.content
    done = thread_settled(reviewer, thread["id"])
    assert done["values"]["status"] == "declined"
    assert done["values"]["review"] == {
        "decision": "reject",
        "reason": "income not verifiable",
        "reviewer": reviewer.username,
    }
    assert f"gh:{thread['id']}:disburse" not in bank.ledger.executions
    assert not Effect.objects.filter(thread_id=thread["id"]).exists()


def test_a_response_is_passed_to_the_graph(operator, reviewer):
    thread = thread_start(operator, "parallel_review", {"subject": "respond-case"})
    tasks = pending_tasks(reviewer, thread["id"], count=2)
    for task in tasks:
        response = api_decide(reviewer, task, "respond", message="see attached memo")
        assert response.status_code == 201, response.content
    done = thread_settled(reviewer, thread["id"])
    assert sorted(done["values"]["answers"]) == ["legal:respond", "risk:respond"]


def test_an_exact_resume_is_stamped_with_the_signed_in_reviewer(operator, reviewer):
    thread = thread_start(operator, "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"])
    forged = {"decision": "reject", "reason": "exact resume", "reviewer": "someone-else"}
    body = {"decision": "reject", "reason": "exact resume", "resume": forged}
    response = api_decide(reviewer, task, None, **body)
    assert response.status_code == 201, response.content
    assert response.json()["resume_value"]["reviewer"] == reviewer.username
    done = thread_settled(reviewer, thread["id"])
    assert done["values"]["review"]["reviewer"] == reviewer.username
