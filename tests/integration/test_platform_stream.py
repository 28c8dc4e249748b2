"""``/lg/`` stream modes through the official ``langgraph_sdk`` client: every mode, several at once,
subgraphs, a late join from the start or after an event id, and what a reader without the right to
see sensitive fields never receives (the attacker's view of every mode).

The worker publishes each chunk as LangGraph yields it (``runtime.stream``); the web process follows
the run's log and masks each chunk for its reader (``lgplatform.stream``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from approvals.models import AuditEvent
from runtime.models import Run
from runtime.stream import run_log
from tests.conftest import loan_input, scaled, wait_for
from tests.integration.test_platform_sdk import server  # noqa: F401 - the live daphne fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

TIMEOUT = httpx.Timeout(scaled(30.0))
ALL_MODES = ["values", "updates", "messages", "messages-tuple", "events", "debug", "custom", "tasks", "checkpoints"]


def _parts(url: str, token: str, thread_graph: str, **kwargs: Any) -> tuple[str, list[Any]]:
    """Create a thread, stream one run on it, return (thread id, the parts the SDK yielded)."""

    async def flow() -> tuple[str, list[Any]]:
        client = get_client(url=url, api_key=token, timeout=TIMEOUT)
        try:
            thread = await client.threads.create(metadata={"graph_id": thread_graph})
            parts = [p async for p in client.runs.stream(thread["thread_id"], thread_graph, **kwargs)]
            return thread["thread_id"], parts
        finally:
            await client.aclose()

    return asyncio.run(flow())


def _canary() -> str:
    return f"cnry{uuid.uuid4().hex[:10]}dob"


@pytest.mark.parametrize(
    "mode,events",
    [
        ("values", {"values"}),
        ("updates", {"updates"}),
        ("messages", {"messages/metadata", "messages/partial", "messages/complete"}),
        ("messages-tuple", {"messages"}),
        ("events", {"events"}),
        ("debug", {"debug"}),
        ("custom", {"custom"}),
        ("tasks", {"tasks"}),
        ("checkpoints", {"checkpoints"}),
    ],
)
def test_each_stream_mode_arrives_as_langgraph_server_names_it(server, personas, mode, events):  # noqa: F811
    born = "1970-01-02"
    _, parts = _parts(
        server, personas["admin"].token, "chatty_review", input={"applicant": {"date_of_birth": born}}, stream_mode=mode
    )
    names = [p.event for p in parts]
    assert names[0] == "metadata" and names[-1] == "end", names
    assert set(names[1:-1]) == events, names
    ids = [p.id for p in parts[1:-1]]
    assert None not in ids and len(set(ids)) == len(ids), "each chunk has its own id, to resume after"
    if mode == "custom":
        assert [p.data for p in parts if p.event == "custom"] == [
            {"applicant": {"date_of_birth": born}},
            f"screening someone born {born}",
        ]
    if mode == "messages":
        partials = [p.data[0]["content"] for p in parts if p.event == "messages/partial"]
        assert partials[-1] == f"The applicant was born on {born}, it says."
    if mode == "messages-tuple":
        chunks = [p.data[0] for p in parts if p.event == "messages"]
        text = "".join(m["content"] for m in chunks if m["type"] == "AIMessageChunk")
        assert text == f"The applicant was born on {born}, it says."
    if mode == "debug":
        assert {p.data["type"] for p in parts if p.event == "debug"} == {"checkpoint", "task", "task_result"}
        checkpoint = next(p.data["payload"] for p in parts if p.event == "debug" and p.data["type"] == "checkpoint")
        assert checkpoint["checkpoint"]["checkpoint_id"]
    if mode == "events":
        events = [p.data for p in parts if p.event == "events"]
        kinds = {e["event"] for e in events}
        assert {"on_chain_start", "on_chain_stream", "on_chain_end", "on_chat_model_stream"} <= kinds
        # The graph's own run under its registered name, as LangGraph Server names an unnamed graph.
        root = events[0]
        assert (root["event"], root["name"], root["parent_ids"]) == ("on_chain_start", "chatty_review", [])
        streamed = [e for e in events if e["event"] == "on_chain_stream"]
        assert streamed and all(any(t.startswith("graph:step:") for t in e["tags"]) for e in streamed), "nodes only"
    if mode == "values":
        assert parts[-2].data["__interrupt__"][0]["value"]["title"] == "Open the account?"


def test_several_modes_at_once_and_subgraph_chunks_are_named_by_namespace(server, personas):  # noqa: F811
    _, parts = _parts(
        server,
        personas["operator"].token,
        "nested_review",
        input={"amount": 5},
        stream_mode=["updates", "values"],
        stream_subgraphs=True,
    )
    names = {p.event.split("|")[0] for p in parts}
    assert {"metadata", "updates", "values", "end"} <= names
    assert any(p.event.startswith("updates|") for p in parts), [p.event for p in parts]


def test_a_subgraph_task_is_named_as_langgraph_server_names_it_in_checkpoints_and_debug(server, personas):  # noqa: F811
    # LangGraph Server (langgraph dev 0.16.7, bench/sdk_shapes.py): a ``checkpoints`` chunk is LangGraph's
    # own, its subgraph task's ``state`` the config naming the subgraph's checkpoints; a ``debug``
    # checkpoint names the same task by ``checkpoint`` instead.
    thread_id, parts = _parts(
        server,
        personas["operator"].token,
        "nested_review",
        input={"amount": 5},
        stream_mode=["checkpoints", "debug"],
        stream_subgraphs=True,
    )
    # The graph's subgraph node runs in one task: the same id in both modes' checkpoints.
    in_checkpoints = {t["id"]: t for p in parts if p.event == "checkpoints" for t in p.data["tasks"] if t["state"]}
    in_debug = {
        t["id"]: t
        for p in parts
        if p.event == "debug" and p.data["type"] == "checkpoint"
        for t in p.data["payload"]["tasks"]
    }
    assert in_checkpoints, "no root checkpoint names a subgraph task"
    for task_id, task in in_checkpoints.items():
        named = {"thread_id": thread_id, "checkpoint_ns": f"{task['name']}:{task_id}"}
        assert task["state"] == {"configurable": named} and "checkpoint" not in task, task
        assert in_debug[task_id]["checkpoint"] == named and "state" not in in_debug[task_id], in_debug[task_id]


def test_a_late_reader_joins_from_the_start_and_resumes_after_an_event_id(server, personas):  # noqa: F811
    token = personas["operator"].token

    async def flow() -> tuple[list[Any], list[Any], list[Any]]:
        client = get_client(url=server, api_key=token, timeout=TIMEOUT)
        try:
            thread = await client.threads.create()
            run = await client.runs.create(
                thread["thread_id"], "loan_approval", input=loan_input(), stream_mode=["updates", "values"]
            )
            await client.runs.join(thread["thread_id"], run["run_id"])  # it has finished: nothing is live any more
            whole = [p async for p in client.runs.join_stream(thread["thread_id"], run["run_id"])]
            only_updates = [
                p async for p in client.runs.join_stream(thread["thread_id"], run["run_id"], stream_mode="updates")
            ]
            middle = next(p for p in whole if p.event == "updates")
            rest = [
                p async for p in client.runs.join_stream(thread["thread_id"], run["run_id"], last_event_id=middle.id)
            ]
            return whole, only_updates, rest
        finally:
            await client.aclose()

    whole, only_updates, rest = asyncio.run(flow())
    chunks = whole[1:-1]
    assert whole[0].event == "metadata" and whole[-1].event == "end"
    assert {p.event for p in chunks} == {"updates", "values"}
    assert chunks[-1].event == "values" and chunks[-1].data["__interrupt__"]
    assert {p.event for p in only_updates[1:-1]} == {"updates"}
    first = next(i for i, p in enumerate(chunks) if p.event == "updates")
    assert [p.id for p in rest[:-1]] == [p.id for p in chunks[first + 1 :]], "a resumed stream goes on where it was"


def test_a_reader_joining_mid_run_gets_the_chunks_so_far_then_the_rest_live(server, personas):  # noqa: F811
    # slow_steps: a super-step every 0.2 s, stopped by its 1 s run timeout (langgraph.json).
    token = personas["operator"].token
    with httpx.Client(base_url=server, headers={"x-api-key": token}, timeout=scaled(30)) as http:
        thread = http.post("/threads", json={}).json()["thread_id"]
        run = http.post(
            f"/threads/{thread}/runs", json={"assistant_id": "slow_steps", "input": {}, "stream_mode": "updates"}
        ).json()["run_id"]
    wait_for(lambda: asyncio.run(run_log().read(run, "0", wait=0)), timeout=20, what="the first chunk")
    assert Run.objects.get(pk=run).status == "running", "joined while the run goes on"

    async def join() -> list[Any]:
        client = get_client(url=server, api_key=token, timeout=TIMEOUT)
        try:
            return [p async for p in client.runs.join_stream(thread, run)]
        finally:
            await client.aclose()

    parts = asyncio.run(join())
    steps = [p.data["slowly"]["steps"] for p in parts if p.event == "updates"]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 2, steps
    assert [p.event for p in parts][-2:] == ["error", "end"]


def test_a_run_nobody_streamed_joins_with_its_final_values(server, personas):  # noqa: F811
    with httpx.Client(base_url=server, headers={"x-api-key": personas["operator"].token}, timeout=scaled(30)) as http:
        thread = http.post("/threads", json={}).json()
        run = http.post(
            f"/threads/{thread['thread_id']}/runs/wait", json={"assistant_id": "loan_approval", "input": loan_input()}
        )
        run_id = run.headers["content-location"].rsplit("/", 1)[-1]
        assert Run.objects.get(pk=run_id).stream is None
        body = http.get(f"/threads/{thread['thread_id']}/runs/{run_id}/stream").text
    events = [line.removeprefix("event: ") for line in body.splitlines() if line.startswith("event: ")]
    assert events == ["metadata", "values", "end"]


def test_a_failed_run_streams_an_error_before_the_end(server, personas):  # noqa: F811
    _, parts = _parts(server, personas["operator"].token, "always_fails", input={"to": "x"}, stream_mode="updates")
    assert [p.event for p in parts][-2:] == ["error", "end"]


@pytest.mark.parametrize(
    "body,field",
    [
        ({"stream_mode": "telepathy"}, "stream_mode"),
        ({"stream_mode": ["values", "nope"]}, "stream_mode"),
        ({"stream_mode": ["values", 5]}, "stream_mode[1]"),  # not stream_mode.str, a member of the union
    ],
)
def test_an_unknown_stream_mode_is_refused_before_a_run_starts(server, personas, body, field):  # noqa: F811
    with httpx.Client(base_url=server, headers={"x-api-key": personas["operator"].token}, timeout=scaled(30)) as http:
        thread = http.post("/threads", json={}).json()
        response = http.post(
            f"/threads/{thread['thread_id']}/runs/stream",
            json={"assistant_id": "loan_approval", "input": loan_input(), **body},
        )
        assert response.status_code == 422 and response.json()["error"]["field"] == field
        assert not Run.objects.filter(thread_id=thread["thread_id"]).exists()
        joined = http.get(f"/threads/{thread['thread_id']}/runs/{uuid.uuid4()}/stream")
        assert joined.status_code == 404


def test_a_malformed_last_event_id_is_a_422_naming_it(server, personas):  # noqa: F811
    with httpx.Client(base_url=server, headers={"x-api-key": personas["operator"].token}, timeout=scaled(30)) as http:
        thread = http.post("/threads", json={}).json()
        run = http.post(
            f"/threads/{thread['thread_id']}/runs",
            json={"assistant_id": "loan_approval", "input": loan_input(), "stream_mode": "values"},
        ).json()
        response = http.get(
            f"/threads/{thread['thread_id']}/runs/{run['run_id']}/stream", headers={"Last-Event-ID": "x'; DROP"}
        )
    assert response.status_code == 422 and response.json()["error"]["field"] == "Last-Event-ID"


# --- the attacker: a reader without the right to see sensitive fields ------------------------------


def test_a_reader_without_reveal_rights_never_receives_a_sensitive_value_in_any_mode(server, personas):  # noqa: F811
    """The operator (who may start runs, not see sensitive fields) streams every mode at once, with
    subgraphs; the date of birth is in the state, a task's input and result, a debug checkpoint, a custom
    event (structured and as text), a tool call's arguments, events' inputs and outputs, and a chat model's
    reply streamed three characters at a time. It must reach the reader in none of them, not even in part."""
    canary = _canary()
    thread_id, parts = _parts(
        server,
        personas["operator"].token,
        "chatty_review",
        input={"applicant": {"name": "Ada", "date_of_birth": canary}},
        stream_mode=ALL_MODES,
        stream_subgraphs=True,
    )
    body = json.dumps([[p.event, p.data] for p in parts], ensure_ascii=False)
    assert {p.event for p in parts} >= {"values", "updates", "debug", "custom", "events", "messages/partial"}
    for piece in (canary, canary[:6], canary[4:], canary[-6:]):
        assert piece not in body, f"{piece!r} leaked"
    assert "•••• redacted" in body
    # the text around the value still streams, and the masked value's place is marked
    partials = [p.data[0]["content"] for p in parts if p.event == "messages/partial"]
    assert partials[-1] == "The applicant was born on •••, it says."
    tuples = "".join(p.data[0]["content"] for p in parts if p.event == "messages" and "Chunk" in p.data[0]["type"])
    assert tuples == "The applicant was born on •••, it says."
    assert [p.data for p in parts if p.event == "custom"][1] == "screening someone born •••"

    # The same run joined later by the operator again, and resumed mid-way: still nothing.
    run_id = Run.objects.filter(thread_id=thread_id).values_list("pk", flat=True).get()
    middle = next(p.id for p in parts if p.event == "messages")

    async def join() -> list[Any]:
        client = get_client(url=server, api_key=personas["operator"].token, timeout=TIMEOUT)
        try:
            return [
                p
                async for p in client.runs.join_stream(
                    thread_id, str(run_id), stream_mode=["messages-tuple", "custom"], last_event_id=middle
                )
            ]
        finally:
            await client.aclose()

    rest = asyncio.run(join())
    text = json.dumps([[p.event, p.data] for p in rest], ensure_ascii=False)
    assert rest and canary[:6] not in text and canary[-6:] not in text
    assert not AuditEvent.objects.filter(thread_id=thread_id, action="sensitive.revealed").exists()


def test_a_reader_with_reveal_rights_sees_the_values_and_the_reveal_is_audited(server, personas):  # noqa: F811
    canary = _canary()
    thread_id, _ = _parts(
        server,
        personas["operator"].token,
        "chatty_review",
        input={"applicant": {"date_of_birth": canary}},
        stream_mode="updates",
    )
    run_id = str(Run.objects.filter(thread_id=thread_id).values_list("pk", flat=True).get())

    async def join() -> list[Any]:
        client = get_client(url=server, api_key=personas["auditor"].token, timeout=TIMEOUT)
        try:
            return [p async for p in client.runs.join_stream(thread_id, run_id)]
        finally:
            await client.aclose()

    parts = asyncio.run(join())
    assert canary in json.dumps([p.data for p in parts])
    reveals = AuditEvent.objects.filter(thread_id=thread_id, action="sensitive.revealed", subject_type="run")
    paths = [p for event in reveals for p in event.details["paths"]]
    assert paths and all(p.endswith("applicant.date_of_birth") for p in paths), paths
