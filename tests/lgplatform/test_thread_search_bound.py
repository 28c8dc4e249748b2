"""``threads.search`` / ``threads.count`` with ``metadata.graph_id`` or ``metadata.assistant_id`` find what
``threads.get`` reports: a thread bound to a graph by its first run carries both, as LangGraph Server
sets them (``lgplatform.services._metadata_filter``); agent-chat-ui and Studio list an assistant's threads
this way."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lgplatform.services import assistant_id_for
from tests.conftest import Persona

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


@pytest.fixture
def case() -> str:
    return f"bound-{uuid.uuid4().hex[:8]}"


def _bound_by_run(persona: Persona, case: str) -> str:
    thread = persona.client.post("/lg/threads", {"metadata": {"case": case}}).json()["thread_id"]
    body = {"assistant_id": "breakpoint_review", "input": {"subject": case}}
    assert persona.client.post(f"/lg/threads/{thread}/runs", body).status_code == 200
    return str(thread)


def _found(persona: Persona, metadata: dict[str, Any]) -> tuple[list[str], int]:
    found = persona.client.post("/lg/threads/search", {"metadata": metadata, "limit": 100}).json()
    count = persona.client.post("/lg/threads/count", {"metadata": metadata}).json()
    return [t["thread_id"] for t in found], count


@pytest.mark.parametrize(
    "key,value",
    [("graph_id", "breakpoint_review"), ("assistant_id", assistant_id_for("breakpoint_review"))],
)
def test_a_thread_bound_by_its_first_run_is_found_by_what_threads_get_reports(operator, case, key, value):
    thread = _bound_by_run(operator, case)
    assert operator.client.get(f"/lg/threads/{thread}").json()["metadata"][key] == value
    assert _found(operator, {"case": case, key: value}) == ([thread], 1)


@pytest.mark.parametrize("key,value", [("graph_id", "loan_approval"), ("assistant_id", assistant_id_for("flaky"))])
def test_another_graph_s_name_or_assistant_does_not_match(operator, case, key, value):
    _bound_by_run(operator, case)
    assert _found(operator, {"case": case, key: value}) == ([], 0)


def test_a_thread_created_with_its_graph_id_is_still_found(operator, case):
    thread = operator.client.post("/lg/threads", {"metadata": {"case": case, "graph_id": "flaky"}}).json()
    assert _found(operator, {"case": case, "graph_id": "flaky"}) == ([thread["thread_id"]], 1)
    assert _found(operator, {"case": case, "assistant_id": assistant_id_for("flaky")}) == ([thread["thread_id"]], 1)


def test_the_filters_keep_to_the_threads_the_caller_may_see(operator, personas, case):
    _bound_by_run(operator, case)
    assert _found(personas["loan_reviewer"], {"case": case, "graph_id": "breakpoint_review"}) == ([], 0)
