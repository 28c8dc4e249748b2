"""Masked message text written back must never replace the stored text (``services._messages_kept``).

A reader without "view sensitive" is shown each sensitive value in message text as ``•••`` (``I know ••• well``:
``approvals.redaction.state_redact``). Sending the state they read back, as LangGraph clients do (``update_state``
with the same message ids, a new run's input, a fork, a decision's edits or ``command.update``), stored the
masked text: the value was gone. Now a message sent back as shown keeps its stored text, byte for byte; changed
text around the mask is a 422 naming it, with nothing written; a writer who may see the values writes as sent.

In-process: runs are executed here by the worker's executor (dispatch recorded, not sent), as
``tests/runtime/test_state_validators.py`` does.
"""

from __future__ import annotations

import copy
import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from approvals.models import ApprovalTask, Decision, TaskStatus
from approvals.redaction import MASK, TEXT_MASK
from runtime import runs
from runtime.executor import run_execute
from runtime.models import Thread, ThreadStatus
from runtime.registry import registry_load
from runtime.store import store_close
from tests.conftest import Persona, api_decide, thread_start

pytestmark = pytest.mark.usefixtures("live_db")

GRAPH = "chatty_secret"
SPOKEN = f"I know {TEXT_MASK} well"  # the first message as a reader without "view sensitive" is shown it


def _canary() -> str:
    return f"cnry{uuid.uuid4().hex[:10]}wbk"


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: sent.append(str(run_id)))
    return sent


def _pending(thread_id: Any) -> ApprovalTask:
    return ApprovalTask.objects.get(thread_id=thread_id, status=TaskStatus.PENDING)


@pytest.fixture
def finished(dispatched: list[str], operator: Persona, reviewer: Persona) -> tuple[str, str]:
    """A chatty_secret thread run to its end (its messages speak the value): (thread id, the value)."""
    canary = _canary()
    thread = thread_start(operator, GRAPH, {"secret": canary})
    run_execute(run_id=dispatched[-1])
    assert api_decide(reviewer, _pending(thread["id"]), "approve", reason="ok").status_code == 201
    run_execute(run_id=dispatched[-1])
    assert Thread.objects.get(pk=thread["id"]).status == ThreadStatus.COMPLETED
    return thread["id"], canary


def _state(persona: Persona, thread_id: str, checkpoint_id: str = "") -> dict[str, Any]:
    path = f"/lg/threads/{thread_id}/state" + (f"/{checkpoint_id}" if checkpoint_id else "")
    response = persona.client.get(path)
    assert response.status_code == 200, response.content
    return dict(response.json())


def _shown(persona: Persona, thread_id: str, canary: str) -> dict[str, Any]:
    """The values as ``persona`` (no "view sensitive") reads them: the value masked in the messages' text."""
    values = _state(persona, thread_id)["values"]
    assert canary.lower() not in json.dumps(values).lower()
    assert values["messages"][0]["content"] == SPOKEN and values["secret"] == MASK
    return dict(values)


def _messages_json(values: dict[str, Any]) -> str:
    return json.dumps(values["messages"], sort_keys=True, ensure_ascii=False)


# Every write that goes through ``state_write_guard``: (what it sends the values as, how it is sent).
def _update_state(persona: Persona, thread_id: str, values: dict[str, Any]) -> Any:
    return persona.client.post(f"/lg/threads/{thread_id}/state", {"values": values})


def _run_input(persona: Persona, thread_id: str, values: dict[str, Any]) -> Any:
    return persona.client.post(f"/lg/threads/{thread_id}/runs", {"assistant_id": GRAPH, "input": values})


def _fork(persona: Persona, thread_id: str, values: dict[str, Any]) -> Any:
    checkpoint = Thread.objects.get(pk=thread_id).checkpoint_id
    body = {"checkpoint_id": checkpoint, "values": values, "reason": "round trip"}
    return persona.client.post(f"/api/threads/{thread_id}/fork", body)


WRITES = [("update_state", _update_state, "values"), ("run input", _run_input, "input"), ("fork", _fork, "values")]


def _written(response: Any, thread_id: str, dispatched: list[str]) -> str:
    """The checkpoint the write made (a run's input: once its run has run)."""
    assert response.status_code in (200, 201), response.content
    body = response.json()
    if "head_checkpoint_id" in body:  # a fork: its branch's head
        return str(body["head_checkpoint_id"])
    if "run_id" in body:
        run_execute(run_id=dispatched[-1])
    return str(Thread.objects.get(pk=thread_id).checkpoint_id)


@pytest.mark.parametrize("name,write,field", WRITES, ids=[w[0] for w in WRITES])
def test_a_masked_reader_round_tripping_the_state_keeps_every_stored_message_byte_for_byte(
    finished, operator, personas, dispatched, name, write, field
):
    thread_id, canary = finished
    admin = personas["admin"]
    before = _state(admin, thread_id)["values"]
    assert canary in before["messages"][0]["content"], "the attack needs the value in the text"
    response = write(operator, thread_id, _shown(operator, thread_id, canary))
    after = _state(admin, thread_id, _written(response, thread_id, dispatched))["values"]
    assert after["secret"] == canary
    stored = {m["id"]: m for m in after["messages"]}
    for message in before["messages"]:  # a run's input adds the new run's messages after them
        _same_message(stored[message["id"]], message)
    assert TEXT_MASK not in json.dumps(after["messages"], ensure_ascii=False)


def _same_message(after: dict[str, Any], before: dict[str, Any]) -> None:
    """Every field of ``before`` as it was, byte for byte. LangChain reads a message sent as a dict with the
    fields it does not take as arguments (``invalid_tool_calls``, ``usage_metadata``) into
    ``additional_kwargs``, whoever sends it: those may be added, nothing else."""
    for key, value in before.items():
        if key == "additional_kwargs":
            assert after[key] | value == after[key] and set(after[key]) - set(value) <= set(before), after[key]
        else:
            assert json.dumps(after[key], sort_keys=True) == json.dumps(value, sort_keys=True), key


@pytest.mark.parametrize("name,write,field", WRITES, ids=[w[0] for w in WRITES])
def test_changed_text_around_the_mask_is_a_422_naming_it_and_nothing_is_written(
    finished, operator, personas, dispatched, name, write, field
):
    thread_id, canary = finished
    thread = Thread.objects.get(pk=thread_id)
    before = _messages_json(_state(personas["admin"], thread_id)["values"])
    values = _shown(operator, thread_id, canary)
    values["messages"][0]["content"] = f"I know {TEXT_MASK} very well"
    response = write(operator, thread_id, values)
    assert response.status_code == 422, response.content
    error = response.json().get("error") or response.json()
    assert error["field"] == f"{field}.messages[0].content", error
    assert TEXT_MASK in error["message"]
    assert Thread.objects.get(pk=thread_id).checkpoint_id == thread.checkpoint_id
    assert _messages_json(_state(personas["admin"], thread_id)["values"]) == before


def test_a_tool_call_argument_changed_around_the_mask_is_refused_naming_it(finished, operator):
    thread_id, canary = finished
    values = _shown(operator, thread_id, canary)
    call = values["messages"][1]["tool_calls"][0]
    assert call["args"] == {"query": f"who knows {TEXT_MASK}"}
    call["args"]["query"] = f"who else knows {TEXT_MASK}"
    response = _update_state(operator, thread_id, values)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "values.messages[1].tool_calls[0].args.query"


def test_a_message_rewritten_without_the_mask_is_the_writers_own_text(finished, operator, personas):
    thread_id, canary = finished
    values = _shown(operator, thread_id, canary)
    values["messages"][0]["content"] = "I know nobody"
    assert _update_state(operator, thread_id, values).status_code == 200
    after = _state(personas["admin"], thread_id)["values"]
    assert after["messages"][0]["content"] == "I know nobody"
    assert canary in after["messages"][1]["content"][0]["text"], "the messages sent back as shown are kept"


def test_a_writer_who_may_see_the_values_writes_as_sent(finished, personas):
    thread_id, canary = finished
    admin = personas["admin"]
    values = copy.deepcopy(_state(admin, thread_id)["values"])
    assert values["messages"][0]["content"] == f"I know {canary} well"
    values["messages"][0]["content"] = f"I know {TEXT_MASK} and {canary} very well"
    assert _update_state(admin, thread_id, values).status_code == 200
    after = _state(admin, thread_id)["values"]
    assert after["messages"][0]["content"] == f"I know {TEXT_MASK} and {canary} very well"


# --- a decision's edits (native API) and ``command.update`` (/lg/): a gate that lets messages be edited ---

EDITABLE = textwrap.dedent(
    """
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, AnyMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    from runtime.gatekeeper import request_review


    class State(TypedDict, total=False):
        secret: str
        messages: Annotated[list[AnyMessage], add_messages]
        status: str


    def speak(state: State) -> dict:
        return {"messages": [AIMessage(content=f"I know {state['secret']} well"), AIMessage(content="Plain.")]}


    def review(state: State) -> dict:
        return {"status": request_review(title="Send the replies?", editable=["messages"]).decision}


    builder = StateGraph(State)
    builder.add_node("speak", speak)
    builder.add_node("review", review)
    builder.add_edge(START, "speak")
    builder.add_edge("speak", "review")
    builder.add_edge("review", END)
    graph = builder
    """
)


@pytest.fixture
def editable_graph(tmp_path: Path) -> Iterator[str]:
    """A graph like chatty_secret whose gate lets its messages be edited, loaded into the registry."""
    graph = f"spoken_edits_{uuid.uuid4().hex[:8]}"
    (tmp_path / "spoken.py").write_text(EDITABLE)
    config = {
        "graphs": {graph: "./spoken.py:graph"},
        "gatehouse": {"gates": {graph: ["review"]}, "sensitive_paths": {graph: ["secret"]}},
    }
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    configured = django_settings.GATEHOUSE_GRAPHS
    registry_load(tmp_path / "langgraph.json")
    try:
        yield graph
    finally:
        store_close()  # read again from the session's file when next used
        registry_load(configured)


@pytest.fixture
def paused(editable_graph: str, dispatched: list[str], operator: Persona) -> tuple[ApprovalTask, str]:
    canary = _canary()
    thread = thread_start(operator, editable_graph, {"secret": canary})
    run_execute(run_id=dispatched[-1])
    return _pending(thread["id"]), canary


def _task_messages(persona: Persona, task: ApprovalTask) -> list[dict[str, Any]]:
    response = persona.client.get(f"/api/tasks/{task.pk}")
    assert response.status_code == 200, response.content
    return list(response.json()["state"]["messages"])


def _native(persona: Persona, task: ApprovalTask, messages: list[dict[str, Any]]) -> Any:
    return api_decide(persona, task, "edit", reason="r", edits={"messages": messages})


def _platform(persona: Persona, task: ApprovalTask, messages: list[dict[str, Any]]) -> Any:
    command = {"resume": {"decision": "edit", "reason": "r"}, "update": {"messages": messages}}
    return persona.client.post(f"/lg/threads/{task.thread_id}/runs", {"assistant_id": task.graph, "command": command})


DECISIONS = [("native edits", _native, "edits"), ("command.update", _platform, "command.update")]


@pytest.mark.parametrize("name,decide,field", DECISIONS, ids=[d[0] for d in DECISIONS])
def test_a_decision_sending_the_messages_back_as_shown_keeps_their_text(
    paused, reviewer, personas, dispatched, name, decide, field
):
    task, canary = paused
    shown = _task_messages(reviewer, task)
    assert shown[0]["content"] == SPOKEN and canary not in json.dumps(shown)
    stored = _task_messages(personas["admin"], task)
    response = decide(reviewer, task, shown)
    assert response.status_code in (200, 201), response.content
    decision = Decision.objects.get(task=task)
    assert decision.state_patch["messages"] == stored, "what is signed is the stored text"
    run_execute(run_id=dispatched[-1])
    thread = Thread.objects.get(pk=task.thread_id)
    assert thread.status == ThreadStatus.COMPLETED
    after = {m["id"]: m for m in _state(personas["admin"], str(task.thread_id))["values"]["messages"]}
    for message in stored:
        _same_message(after[message["id"]], message)
    assert canary in after[stored[0]["id"]]["content"]


@pytest.mark.parametrize("name,decide,field", DECISIONS, ids=[d[0] for d in DECISIONS])
def test_a_decision_changing_text_around_the_mask_is_a_422_and_nothing_is_signed(paused, reviewer, name, decide, field):
    task, _ = paused
    shown = _task_messages(reviewer, task)
    shown[0]["content"] = f"I know {TEXT_MASK} too well"
    response = decide(reviewer, task, shown)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == f"{field}.messages[0].content"
    assert not Decision.objects.filter(task=task).exists()
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING


@pytest.mark.parametrize("name,decide,field", DECISIONS, ids=[d[0] for d in DECISIONS])
def test_a_masked_reader_of_the_task_is_not_shown_the_text_the_decision_kept(
    paused, reviewer, personas, name, decide, field
):
    task, canary = paused
    decided = decide(reviewer, task, _task_messages(reviewer, task))
    assert decided.status_code in (200, 201) and canary not in decided.content.decode()
    for who in ("reviewer", "operator"):
        shown = personas[who].client.get(f"/api/tasks/{task.pk}")
        assert shown.status_code == 200 and canary not in shown.content.decode(), who
