"""A fork, replay or copy needs a reason unless the graph's policy says ``"reasons": {graph: {"time_travel":
"optional"}}``: an unmodified ``langgraph-sdk`` client (``threads.copy``, ``threads.update_state(...,
checkpoint_id=...)``) has no argument to send one, and was refused with a 422 on every graph (outside QA).
``three_steps`` opts out in tests/graphs/langgraph.json; the demo graphs keep the strict default."""

from __future__ import annotations

import pytest

from approvals.models import AuditAction, AuditEvent
from runtime.registry import GraphRegistryError, graphs_read
from tests.conftest import loan_input
from tests.lgplatform.conftest import lg_run_wait

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _first_checkpoint(operator, thread: str) -> str:
    history = operator.client.post(f"/lg/threads/{thread}/history", {"limit": 10}).json()
    return str(history[-1]["checkpoint"]["checkpoint_id"])


def test_a_graph_that_makes_the_reason_optional_takes_an_unmodified_clients_time_travel(operator):
    thread, _ = lg_run_wait(operator, "three_steps", {"x": 1})
    copied = operator.client.post(f"/lg/threads/{thread}/copy", {})
    assert copied.status_code == 200, copied.content
    event = AuditEvent.objects.get(thread_id=copied.json()["thread_id"], action=AuditAction.THREAD_COPIED)
    assert event.details["reason"] == ""  # audited all the same, with the reason nobody gave
    forked = operator.client.post(
        f"/lg/threads/{thread}/state", {"values": {"x": 5}, "checkpoint_id": _first_checkpoint(operator, thread)}
    )
    assert forked.status_code == 200, forked.content
    assert AuditEvent.objects.filter(thread_id=thread, action=AuditAction.THREAD_FORKED).get().details["reason"] == ""


def test_a_graph_without_the_policy_still_needs_a_reason(operator):
    thread, _ = lg_run_wait(operator, "loan_approval", loan_input())
    refused = operator.client.post(f"/lg/threads/{thread}/copy", {})
    assert refused.status_code == 422, refused.content
    assert refused.json()["error"]["field"] == "reason"


def test_the_policy_names_time_travel_for_a_graph_not_a_gate(tmp_path):
    (tmp_path / "g.py").write_text(
        "from typing import TypedDict\nfrom langgraph.graph import StateGraph\n"
        "class S(TypedDict):\n    x: int\n"
        "g = StateGraph(S)\ng.add_node('a', lambda s: s)\ng.set_entry_point('a')\ng.set_finish_point('a')\n"
    )
    spec = {"graphs": {"g": "./g.py:g"}, "gatehouse": {"reasons": {"g": {"gates": {"a": {"time_travel": "optional"}}}}}}
    (tmp_path / "langgraph.json").write_text(__import__("json").dumps(spec))
    with pytest.raises(GraphRegistryError, match="unknown decision 'time_travel'"):
        graphs_read(tmp_path / "langgraph.json")
