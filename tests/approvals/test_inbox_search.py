"""Inbox search: the title, a task or thread id, and the thread metadata keys each graph names as searchable
in langgraph.json (``"gatehouse": {"search_metadata": ...}``) — no graph's keys are built into the product."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from approvals.inbox_filter import InboxFilter
from approvals.selectors import search_metadata_from_config
from console.selectors import inbox_list
from runtime.registry import GraphRegistryError, graph_get, graphs_read
from tests.factories import task_make

ROOT = Path(__file__).resolve().parent.parent.parent


def test_each_graph_gets_its_own_keys_or_the_default():
    section = {"search_metadata": {"loans": ["case", "applicant"], "*": ["ticket"]}}
    assert search_metadata_from_config("loans", section) == ("case", "applicant")
    assert search_metadata_from_config("kyc", section) == ("ticket",)
    assert search_metadata_from_config("kyc", {}) == ()


@pytest.mark.parametrize(
    "section,field",
    [
        (["case"], "gatehouse.search_metadata"),
        ({"loans": "case"}, "gatehouse.search_metadata.loans"),
        ({"loans": ["case", 7]}, "gatehouse.search_metadata.loans"),
        ({"loans": ["a__b c"]}, "gatehouse.search_metadata.loans"),
        ({"*": [""]}, r"gatehouse.search_metadata.\*"),
    ],
)
def test_a_bad_declaration_names_the_key(section, field):
    with pytest.raises(ValueError, match=field):
        search_metadata_from_config("loans", {"search_metadata": section})


def test_a_bad_declaration_in_langgraph_json_stops_start_up(tmp_path):
    config = {
        "graphs": {"loan_approval": str(ROOT / "demo" / "graphs" / "loan_approval.py") + ":make_graph"},
        "gatehouse": {"search_metadata": {"loan_approval": "case"}},
    }
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps(config))
    with pytest.raises(GraphRegistryError, match=r"gatehouse\.search_metadata\.loan_approval"):
        graphs_read(path)
    config["gatehouse"]["search_metadata"]["loan_approval"] = ["case"]
    path.write_text(json.dumps(config))
    assert graphs_read(path)["loan_approval"].options["search_metadata"] == ("case",)


@pytest.mark.usefixtures("live_db")
def test_only_the_keys_a_graph_names_are_searched(personas, monkeypatch):
    marker = uuid.uuid4().hex[:10]
    loan = task_make(metadata={"case": f"{marker}-L", "customer": f"{marker}-customer"})
    kyc = task_make(graph="kyc_onboarding", node="identity_check", metadata={"case": f"{marker}-K"})
    monkeypatch.setitem(graph_get("loan_approval").options, "search_metadata", ("case",))
    monkeypatch.setitem(graph_get("kyc_onboarding").options, "search_metadata", ())

    def found(q: str) -> set:
        return {t.pk for t in inbox_list(user=personas["approver"].user, filter=InboxFilter(q=q)).items} & {
            loan.pk,
            kyc.pk,
        }

    assert found(marker) == {loan.pk}  # kyc_onboarding names no key: its case is not searched
    assert found(f"{marker}-customer") == set()  # loan_approval does not name "customer"
    monkeypatch.setitem(graph_get("kyc_onboarding").options, "search_metadata", ("case",))
    assert found(marker.upper()) == {loan.pk, kyc.pk}  # case-insensitive, both graphs now
