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
