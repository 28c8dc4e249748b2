"""Assistants and threads in LangGraph Server's shapes where Gatehouse had placeholders.

An assistant was created and updated on 1970-01-01, listed in the registry's alphabetical order (LangGraph
Server: newest first), with a null ``config_schema`` (LangGraph Server: ``{}``); a thread's ``config`` was
``{}`` even after a run (LangGraph Server: ``{"configurable": {}}``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from runtime import runs
from runtime.executor import run_execute
from tests.conftest import loan_input

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

GRAPHS = Path(__file__).resolve().parent.parent / "graphs"


def _search(persona, **body) -> list[dict]:
    response = persona.client.post("/lg/assistants/search", {"limit": 1000, **body})
    assert response.status_code == 200, response.content
    return response.json()


def test_an_assistant_was_created_and_updated_when_its_graph_s_file_last_changed(operator):
    [assistant] = _search(operator, graph_id="parallel_review")
    changed = datetime.fromtimestamp((GRAPHS / "shapes.py").stat().st_mtime, tz=UTC)
    assert datetime.fromisoformat(assistant["created_at"]) == changed
    assert assistant["updated_at"] == assistant["created_at"]


def test_assistants_are_listed_newest_first_by_default_as_langgraph_server_lists_them(operator):
    listed = _search(operator)
    times = [datetime.fromisoformat(a["created_at"]) for a in listed]
    assert times == sorted(times, reverse=True)
    names = [a["graph_id"] for a in listed]
    # one file, one time: as LangGraph Server creates them in langgraph.json's order, the later first
    assert names.index("deadline_review") < names.index("loan_approval")
    assert [a["graph_id"] for a in _search(operator, sort_order="asc")] == names[::-1]
    assert [a["graph_id"] for a in _search(operator, sort_by="created_at")] == names


def test_a_graph_without_a_config_schema_has_an_empty_one(operator):
    [assistant] = _search(operator, graph_id="loan_approval")
    schemas = operator.client.get(f"/lg/assistants/{assistant['assistant_id']}/schemas").json()
    assert schemas["config_schema"] == {}


def test_a_thread_s_config_is_set_by_its_first_run(operator, monkeypatch):
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: None)  # runs are executed here
    thread = operator.client.post("/lg/threads", {}).json()
    assert thread["config"] == {}
    created = operator.client.post(
        f"/lg/threads/{thread['thread_id']}/runs", {"assistant_id": "loan_approval", "input": loan_input()}
    )
    run_execute(run_id=created.json()["run_id"])
    assert operator.client.get(f"/lg/threads/{thread['thread_id']}").json()["config"] == {"configurable": {}}


def test_a_copied_thread_s_config_is_unset_until_its_own_first_run(operator, monkeypatch):
    # LangGraph Server's threads.copy answers config {}: the copy has the checkpoints but no run of its own.
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: None)  # runs are executed here
    thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    created = operator.client.post(
        f"/lg/threads/{thread}/runs", {"assistant_id": "loan_approval", "input": loan_input()}
    )
    run_execute(run_id=created.json()["run_id"])
    copied = operator.client.client.post(
        f"/lg/threads/{thread}/copy",
        "{}",
        content_type="application/json",
        headers={**operator.client.headers, "X-Gatehouse-Reason": "a copy to try a fix on"},
    )
    assert copied.status_code == 200, copied.content
    assert copied.json()["config"] == {}
    assert operator.client.get(f"/lg/threads/{copied.json()['thread_id']}").json()["config"] == {}
