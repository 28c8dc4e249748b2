"""Threat: what runs is not what was signed.

A reviewer signs an edit; the thread must execute exactly that edit, or
nothing. Each test is one way the signed intent could silently be lost or
replaced, run against the real stack (PostgreSQL, a Celery worker, the fake
bank), and each failed on the code before the fix.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from approvals.models import ApprovalTask, Decision, TaskStatus
from runtime.checkpointer import checkpointer_get
from runtime.models import Effect, Run, RunKind, RunStatus, Thread
from runtime.runs import run_enqueue
from tests.conftest import api_decide, loan_input, pending_tasks, thread_settled, thread_start, wait_for
from tests.factories import thread_make, triggers_off

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"


def _paused_loan(operator, reviewer, amount: int = 18000) -> tuple[dict, dict]:
    thread = thread_start(operator, "loan_approval", loan_input(amount=amount, income=40000))
    [task] = pending_tasks(reviewer, thread["id"])
    return thread, task


def _paid(bank, thread_id: str) -> list[int]:
    """Amounts the bank really paid for this thread's disbursement key."""
    key = f"gh:{thread_id}:disburse"
    if not bank.ledger.executions.get(key):
        return []
    _, _, response = bank.ledger.responses[key]
    return [response["request"]["amount"]] * bank.ledger.executions[key]


def _stored_writes(thread_id: str, checkpoint_id: str) -> list:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
    saved = checkpointer_get().get_tuple(config)
    return list(saved.pending_writes or []) if saved else []


# --- the checkpointer must be able to store every signed value -------------------------------


UNSTORABLE = [
    pytest.param({"decision": "edit", "reason": "r", "edits": {"amount": 2**64}}, "edits.amount", id="edit-2**64"),
    pytest.param(
        {"decision": "edit", "reason": "r", "action_args": {"amount": 2**64}}, "action_args.amount", id="args-2**64"
    ),
    pytest.param(
        {"decision": "edit", "reason": "r", "resume": {"decision": "edit", "action_args": {"amount": -(2**63) - 1}}},
        "resume.action_args.amount",
        id="exact-resume-below-int64",
    ),
    pytest.param(
        {"decision": "edit", "reason": "r", "action_args": {"term_months": float("inf")}},
        "action_args.term_months",
        id="args-infinity",
    ),
    pytest.param({"decision": "approve", "reason": "fine\x00"}, "reason", id="reason-NUL"),
]


@pytest.mark.parametrize("body,field", UNSTORABLE)
def test_a_decision_value_the_checkpointer_cannot_store_is_refused_naming_the_field(
    operator, reviewer, bank, body, field
):
    thread, task = _paused_loan(operator, reviewer)
    response = api_decide(reviewer, task, None, **body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field
    assert not Decision.objects.filter(task_id=task["id"]).exists()
    assert ApprovalTask.objects.get(pk=task["id"]).status == TaskStatus.PENDING
    assert not Run.objects.filter(thread_id=thread["id"], kind=RunKind.RESUME).exists()


# --- a failed resume is re-applied exactly, or the thread stays failed -------------------------


@pytest.fixture
def refuse_update_writes():
    """A fault in the checkpoint store: PostgreSQL refuses the write of a resume's state update for one thread.

    This is the window in which LangGraph has stored the gate's answer but not
    the signed edit (the ``2**64`` edit of the original report fails the same
    way, in the serializer); a crash or a lost connection there does too.
    """
    installed: list[str] = []

    def install(thread_id: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                """
                CREATE OR REPLACE FUNCTION gh_test_refuse_update() RETURNS trigger AS $$
                BEGIN
                  IF NEW.thread_id = TG_ARGV[0] AND NEW.task_id = TG_ARGV[1] THEN
                    RAISE EXCEPTION 'injected fault: state update write refused';
                  END IF;
                  RETURN NEW;
                END $$ LANGUAGE plpgsql
                """
            )
            name = f"gh_refuse_{thread_id.replace('-', '')[:12]}"
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE INSERT ON checkpoint_writes FOR EACH ROW "
                f"EXECUTE FUNCTION gh_test_refuse_update('{thread_id}', '{NULL_TASK_ID}')"
            )
            installed.append(name)

    def remove() -> None:
        with connection.cursor() as cursor:
            while installed:
                cursor.execute(f"DROP TRIGGER IF EXISTS {installed.pop()} ON checkpoint_writes")

    install.remove = remove  # type: ignore[attr-defined]
    yield install
    remove()


def test_a_retried_resume_pays_the_signed_edit_not_the_original_amount(operator, reviewer, bank, refuse_update_writes):
    thread, task = _paused_loan(operator, reviewer, amount=18000)
    refuse_update_writes(thread["id"])
    response = api_decide(reviewer, task, "edit", reason="cap the exposure", edits={"amount": 15000})
    assert response.status_code == 201, response.content
    failed = thread_settled(reviewer, thread["id"], statuses=("failed", "completed", "interrupted"))
    assert failed["status"] == "failed", failed
    # The failed attempt may have paid already, from the state it held in memory: the signed amount or nothing.
    assert _paid(bank, thread["id"]) in ([], [15000])
    refuse_update_writes.remove()

    retry = operator.client.post(f"/api/threads/{thread['id']}/retry")
    assert retry.status_code == 202, retry.content
    retry_run = Run.objects.get(pk=retry.json()["id"])
    assert retry_run.command["update"] == {"amount": 15000}  # the retry carries the signed command
    done = thread_settled(reviewer, thread["id"], statuses=("failed", "completed", "interrupted"))
    assert done["status"] == "completed", done
    assert _paid(bank, thread["id"]) == [15000]
    assert done["values"]["amount"] == 15000


def test_a_queued_resume_the_checkpointer_cannot_store_never_completes_with_unsigned_values(operator, reviewer, bank):
    """A resume queued by an older version (before decisions were checked) fails whole, and so does its retry."""
    thread, task = _paused_loan(operator, reviewer, amount=18000)
    row = ApprovalTask.objects.get(pk=task["id"])
    with transaction.atomic():
        ApprovalTask.objects.filter(pk=row.pk).update(status=TaskStatus.DECIDED)
        run_enqueue(
            thread=Thread.objects.get(pk=thread["id"]),
            kind=RunKind.RESUME,
            command={
                "resume": {row.interrupt_id: {"decision": "edit", "reason": "legacy", "reviewer": "r"}},
                "update": {"amount": 2**64},
                "checkpoint_id": row.checkpoint_id,
            },
        )
    failed = thread_settled(reviewer, thread["id"])
    assert failed["status"] == "failed"
    assert "cannot be stored" in Thread.objects.get(pk=thread["id"]).error
    stored = _stored_writes(thread["id"], row.checkpoint_id)
    assert not [w for w in stored if w[0] == NULL_TASK_ID or w[1] == "__resume__"]  # nothing of it was applied

    retry = operator.client.post(f"/api/threads/{thread['id']}/retry")
    assert retry.status_code == 202, retry.content
    wait_for(
        lambda: Run.objects.get(pk=retry.json()["id"]).status == RunStatus.FAILED,
        what="the retry to fail as well",
    )
    assert thread_settled(reviewer, thread["id"])["status"] == "failed"
    assert _paid(bank, thread["id"]) == []


def test_a_quorum_keeps_the_action_arguments_one_approver_proposed(operator, personas):
    """Under separation of duties an edit is a proposal; the final approval approves it, it must not drop it."""
    first, second, last = personas["approver"], personas["reviewer"], personas["approver2"]
    thread = thread_start(operator, "four_eyes", {"subject": "quorum-args", "amount": 5000})
    [task] = pending_tasks(first, thread["id"])
    proposal = api_decide(first, task, "edit", reason="release less", action_args={"amount": 4000})
    assert proposal.status_code == 201, proposal.content
    for signer in (second, last):
        final = api_decide(signer, task, reason="ok")
        assert final.status_code == 201, final.content
    run = Decision.objects.get(pk=final.json()["id"]).run
    resume = run.command["resume"][ApprovalTask.objects.get(pk=task["id"]).interrupt_id]
    assert resume["action_args"] == {"amount": 4000}
    assert Decision.objects.get(pk=final.json()["id"]).signed_digest


# --- one edit, said once ---------------------------------------------------------------------


def test_an_amount_edited_differently_as_state_and_as_action_argument_is_refused(operator, reviewer):
    _thread, task = _paused_loan(operator, reviewer)
    response = api_decide(reviewer, task, "edit", reason="r", edits={"amount": 15000}, action_args={"amount": 12000})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "action_args.amount"
    assert not Decision.objects.filter(task_id=task["id"]).exists()


# --- the proof: decisions_verify ---------------------------------------------------------------


def _verify(*thread_ids: str) -> str:
    out = StringIO()
    args = [arg for t in thread_ids for arg in ("--thread", t)]
    call_command("decisions_verify", "--verbose-matches", *args, stdout=out, stderr=out)
    return out.getvalue()


def test_a_signed_edit_that_was_paid_verifies_clean(operator, reviewer, bank):
    thread, task = _paused_loan(operator, reviewer, amount=21000)
    response = api_decide(reviewer, task, "edit", reason="less", action_args={"amount": 15000})
    assert response.status_code == 201, response.content
    assert thread_settled(reviewer, thread["id"])["status"] == "completed"
    decision = Decision.objects.get(pk=response.json()["id"])
    assert decision.signed_action == {"name": "disburse", "args": {"amount": 15000, "term_months": 24}}
    assert len(decision.signed_digest) == 64
    effect = Effect.objects.get(thread_id=thread["id"])
    assert effect.args["amount"] == 15000
    assert len(effect.args_digest) == 64

    output = _verify(thread["id"])
    assert "signed intent proven" in output, output
    assert "1 effects matched" in output and "amount=15000" in output, output


def test_a_graph_that_pays_an_amount_nobody_signed_is_named(operator, reviewer, bank):
    thread = thread_start(operator, "buggy_payout", {"loan_id": "L-buggy", "amount": 18000})
    [task] = pending_tasks(reviewer, thread["id"])
    response = api_decide(reviewer, task, "edit", reason="less", edits={"amount": 15000})
    assert response.status_code == 201, response.content
    assert thread_settled(reviewer, thread["id"])["status"] == "completed"
    assert _paid(bank, thread["id"]) == [18000]  # the bug: the signed 15000 never reached the bank

    with pytest.raises(CommandError) as failure:
        _verify(thread["id"])
    assert thread["id"] in str(failure.value)
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("decisions_verify", "--thread", thread["id"], stdout=out, stderr=out)
    assert f"MISMATCH thread {thread['id']}" in out.getvalue()
    assert "amount=18000 (signed 15000)" in out.getvalue()


@pytest.mark.parametrize("tamper", ["effect_args", "decision_resume"])
def test_a_ledger_or_decision_row_altered_after_the_fact_is_named(operator, reviewer, bank, tamper):
    thread, task = _paused_loan(operator, reviewer, amount=21000)
    response = api_decide(reviewer, task, reason="ok")
    assert response.status_code == 201, response.content
    assert thread_settled(reviewer, thread["id"])["status"] == "completed"
    assert "signed intent proven" in _verify(thread["id"])
    if tamper == "effect_args":
        effect = Effect.objects.get(thread_id=thread["id"])
        Effect.objects.filter(pk=effect.pk).update(args={**effect.args, "amount": 1})
    else:
        decision = Decision.objects.get(pk=response.json()["id"])
        forged = {**decision.resume_value, "action_args": {"amount": 99}}
        with triggers_off():  # the database refuses it otherwise (migration 0035)
            Decision.objects.filter(pk=decision.pk).update(resume_value=forged)
    with pytest.raises(CommandError) as failure:
        _verify(thread["id"])
    assert thread["id"] in str(failure.value)


def test_an_effect_whose_signed_decision_was_deleted_is_a_mismatch_not_unverifiable(operator, reviewer, bank):
    """It was "unverifiable … gate has no carried decisions" and exit 0 after ``TRUNCATE approvals_decision``;
    the trail still records the decision.made the effect followed."""
    thread, task = _paused_loan(operator, reviewer, amount=21000)
    response = api_decide(reviewer, task, reason="ok")
    assert response.status_code == 201, response.content
    assert thread_settled(reviewer, thread["id"])["status"] == "completed"
    assert _paid(bank, thread["id"]) == [21000]
    with triggers_off(), connection.cursor() as cursor:  # the insider: a superuser with triggers off
        cursor.execute("DELETE FROM approvals_decision WHERE task_id = %s", [task["id"]])

    out = StringIO()
    with pytest.raises(CommandError) as failure:
        call_command("decisions_verify", "--thread", thread["id"], stdout=out, stderr=out)
    assert thread["id"] in str(failure.value)
    assert f"MISMATCH thread {thread['id']}" in out.getvalue()
    assert f"decision {response.json()['id']}" in out.getvalue()
    assert "effect disburse" in out.getvalue() and "whose signing decision" in out.getvalue(), out.getvalue()


def test_langgraph_still_names_the_input_task_and_answer_channel_as_the_executor_assumes():
    from langgraph._internal._constants import NULL_TASK_ID as LG_NULL
    from langgraph._internal._constants import RESUME

    from runtime import executor

    assert executor.NULL_TASK_ID == LG_NULL == NULL_TASK_ID
    assert executor.RESUME_CHANNEL == RESUME
    assert json.dumps(NULL_TASK_ID)


# --- the auditor sees every edit; the reviewer edits each value once ---------------------------


def test_an_auditor_sees_an_edit_of_the_action_arguments_as_a_diff(operator, reviewer, auditor, bank):
    from tests.console.conftest import console_client

    thread, task = _paused_loan(operator, reviewer, amount=18000)
    response = api_decide(reviewer, task, "edit", reason="cap", action_args={"amount": 15000})
    assert response.status_code == 201, response.content
    assert thread_settled(reviewer, thread["id"])["status"] == "completed"
    browser = console_client(auditor)

    page = browser.get(f"/decisions/{response.json()['id']}/").content.decode()
    assert "No edits" not in page
    assert 'data-action="disburse"' in page
    section = page.split('data-action="disburse"', 1)[1].split("</table>", 1)[0]
    assert "<code>amount</code>" in section and "18000" in section and "15000" in section

    listing = browser.get("/decisions/", {"node": "human_review"}).content.decode()
    assert "disburse.amount: 18000 → 15000" in listing

    task_page = browser.get(f"/tasks/{task['id']}/").content.decode()
    assert 'class="small action-edit"' in task_page and "15000" in task_page.split('class="small action-edit"', 1)[1]


def test_the_task_page_offers_one_input_per_value_saying_what_it_changes(operator, reviewer):
    from tests.console.conftest import console_client

    _thread, task = _paused_loan(operator, reviewer)
    page = console_client(reviewer).get(f"/tasks/{task['id']}/").content.decode()
    assert page.count('name="edits.amount"') == 1
    assert 'name="action_args.amount"' not in page and 'name="action_args.term_months"' not in page
    assert "state field, also the disburse argument" in page


def test_an_idempotency_key_is_never_replayed_for_an_effect_with_other_arguments(bank):
    """A replay that would pay a different amount under the key of a recorded payment is refused before any call."""
    import uuid
    from typing import TypedDict

    from langgraph.graph import START, StateGraph

    from runtime.effects import EffectArgsConflict, perform_effect

    class S(TypedDict, total=False):
        amount: int

    calls: list[int] = []
    key = f"gh:test:{uuid.uuid4().hex}"

    def pay(state: S) -> dict:
        amount = state["amount"]
        perform_effect("disburse", lambda k: calls.append(amount) or {"paid": amount}, key=key, args={"amount": amount})
        return {}

    builder = StateGraph(S)
    builder.add_node(pay)
    builder.add_edge(START, "pay")
    graph = builder.compile()
    thread = thread_make(graph="loan_approval")
    config = {"configurable": {"thread_id": str(thread.pk)}}
    graph.invoke({"amount": 15000}, config)
    graph.invoke({"amount": 15000}, config)  # a replay with the same arguments returns the recorded result
    with pytest.raises(EffectArgsConflict):
        graph.invoke({"amount": 18000}, config)
    assert calls == [15000]
    assert Effect.objects.get(key=key).args == {"amount": 15000}
