"""A gate's policy is read once from its payload; values of the wrong type fall back to the defaults."""

import pytest

from approvals.gate_policy import GatePolicy, gate_policy
from approvals.payloads import GATE_MARKER
from runtime.deadlines import Deadline


def _gate(**keys):
    return {"type": GATE_MARKER, "proposed_action": {"name": "pay", "args": {}}, **keys}


def test_a_payload_that_is_not_an_object_has_the_defaults():
    assert gate_policy(["not", "a", "gate"]) == GatePolicy()


def test_a_gate_states_its_whole_policy():
    policy = gate_policy(
        _gate(
            required_approvals=2,
            rejections_required=2,
            separation_of_duties=True,
            editable=["amount"],
            sla_seconds=60,
            correlation_key="case-7",
        ),
        "interrupt",
    )
    assert policy == GatePolicy(
        approvals_required=2,
        rejections_required=2,
        separation_of_duties=True,
        editable=("amount",),
        sla_seconds=60,
        correlation_key="case-7",
        deadline=Deadline(due_seconds=60),  # sla_seconds still sets the due time (approvals.deadlines)
    )


@pytest.mark.parametrize("value", [0, 11, True, "2", None, -1])
def test_an_unusable_quorum_means_one_approval(value):
    assert gate_policy(_gate(required_approvals=value)).approvals_required == 1


@pytest.mark.parametrize("value", [0, True, "2", -3])
def test_an_unusable_rejection_count_means_one_rejection(value):
    assert gate_policy(_gate(rejections_required=value)).rejections_required == 1


def test_editable_fields_and_deadlines_are_gate_keys_only():
    other = {"editable": ["amount"], "sla_seconds": 60, "required_approvals": 3}
    policy = gate_policy(other)
    assert policy.editable is None and policy.sla_seconds is None
    assert policy.approvals_required == 3  # a quorum holds on any payload shape, as it always has


def test_a_breakpoint_never_restricts_edits_by_its_payload():
    assert gate_policy(_gate(editable=["amount"]), "breakpoint").editable is None


@pytest.mark.usefixtures("live_db")
def test_a_gate_with_no_editable_fields_allows_none_through_the_api(personas):
    """``request_review()``'s default ``editable=[]`` read as "no limit": the console offered no state edits,
    while an API client's edit of any state field (``income`` here) was signed and applied."""
    from runtime.gatekeeper import gate_payload
    from tests.factories import task_make

    payload = gate_payload(title="Loan", proposed_action={"name": "disburse", "args": {"amount": 1}}, editable=[])
    assert gate_policy(payload).editable == ()
    task = task_make(payload=payload)
    body = {"decision": "edit", "reason": "r", "edits": {"income": 1}, "checkpoint_id": task.checkpoint_id}
    answer = personas["reviewer"].client.post(f"/api/tasks/{task.pk}/decision", body)
    assert answer.status_code == 422, answer.content
    assert answer.json()["error"]["field"] == "edits.income" and "editable: none" in answer.json()["error"]["message"]
    task.refresh_from_db()
    assert task.status == "pending"
    # A payload that names no ``editable`` key at all is not a gate's: the state schema decides, as before.
    assert gate_policy({"title": "x"}, "interrupt").editable is None
