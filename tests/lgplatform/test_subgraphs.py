"""``assistants.get_subgraphs`` (``GET /lg/assistants/{id}/subgraphs[/{namespace}]``): each subgraph's schemas by
namespace, as LangGraph Server lists them. LangGraph Studio asks it to draw and inspect a graph's subgraphs; it
was a 404, so a client could not tell the subgraphs' state from the parent's."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from django.test import Client
from langgraph.graph import START, StateGraph

from lgplatform.services import subgraph_schemas
from runtime.registry import graph_get
from tests.conftest import Persona

pytestmark = pytest.mark.usefixtures("live_db")


def _get(persona: Persona, path: str) -> Any:
    return Client().get(f"/lg{path}", headers={"x-api-key": persona.token})


def test_the_subgraphs_are_listed_by_namespace_as_langgraph_lists_them(personas: dict[str, Persona]) -> None:
    admin = personas["admin"]
    deep = graph_get("travel_deep").compiled()
    for recurse in (False, True):
        answer = _get(admin, f"/assistants/travel_deep/subgraphs?recurse={str(recurse).lower()}")
        assert answer.status_code == 200, answer.content
        assert list(answer.json()) == [ns for ns, _ in deep.get_subgraphs(recurse=recurse)]
    assert len(_get(admin, "/assistants/travel_deep/subgraphs?recurse=true").json()) > 1  # recursion went deeper

    under = _get(admin, "/assistants/travel_deep/subgraphs/outer?recurse=true").json()
    assert list(under) == [ns for ns, _ in deep.get_subgraphs(namespace="outer", recurse=True)]
    assert _get(admin, "/assistants/travel_deep/subgraphs/nowhere").json() == {}  # as LangGraph Server answers
    assert _get(admin, "/assistants/loan_approval/subgraphs").json() == {}  # no subgraph


def test_a_subgraph_s_schemas_describe_its_own_state(personas: dict[str, Persona]) -> None:
    child = graph_get("nested_review").compiled()
    (namespace, subgraph), *_ = list(child.get_subgraphs())
    schemas = _get(personas["admin"], "/assistants/nested_review/subgraphs").json()[namespace]
    assert set(schemas) == {"input_schema", "output_schema", "state_schema", "config_schema", "context_schema"}
    assert set(schemas["state_schema"]["properties"]) == set(subgraph.builder.state_schema.__annotations__)

    # A subgraph whose state differs from its parent's (the registered ones share theirs) is described by its own.
    class Inner(TypedDict):
        score: int

    class Outer(TypedDict):
        applicant: str
        score: int

    inner = StateGraph(Inner).add_node("rate", lambda state: {"score": 1}).add_edge(START, "rate").compile()
    outer = StateGraph(Outer).add_node("inner", inner).add_edge(START, "inner").compile()
    (_, found), *_ = list(outer.get_subgraphs())
    described = subgraph_schemas(found)
    assert described.state_schema is not None and set(described.state_schema["properties"]) == {"score"}
    assert described.state_schema["properties"]["score"] == {"type": "integer"}


def test_an_unseen_assistant_and_a_bad_recurse_are_refused(personas: dict[str, Persona]) -> None:
    assert _get(personas["admin"], "/assistants/nope/subgraphs").status_code == 404
    refused = _get(personas["admin"], "/assistants/travel_deep/subgraphs?recurse=maybe")
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "recurse"
