"""The attack: a graph speaks its sensitive value in message text (``chatty_secret``: ``AIMessage(f"I know
{secret} well")``), and a reader without reveal rights reads every surface that shows state. The raw bytes
of every response must hold no piece of the value; the auditor and the admin still see it.

Read through a real server (daphne) and worker, as the LangGraph SDK reads ``/lg/``: every stream mode of
a run, its join and join stream, the thread's stream, ``runs.wait``, ``threads.get``, ``threads.search``,
``get_state`` (also with subgraphs and at a checkpoint), ``get_history``; the native API's thread, history and task; the
console's thread and task pages; the audit export.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from approvals.tokens import token_issue
from tests.conftest import Persona, scaled, wait_for
from tests.integration.test_platform_sdk import server  # noqa: F401 - the live daphne fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

GRAPH = "chatty_secret"
ALL_MODES = ["values", "updates", "messages", "messages-tuple", "events", "debug", "custom", "tasks", "checkpoints"]


def _pieces(canary: str) -> list[str]:
    """The value, each half (the two tokens a chat model streams it in) and its middle."""
    half = len(canary) // 2
    return [canary, canary[:half], canary[half:], canary[2:-2]]


@dataclass
class Reader:
    name: str
    user: Any
    token: str

    def http(self, base: str) -> httpx.Client:
        return httpx.Client(base_url=base, headers={"x-api-key": self.token}, timeout=scaled(60))


def _audit_reader() -> Reader:
    """Reads the audit trail and its exports without "view sensitive"."""
    user = User.objects.create_user(f"messages-audit-reader-{uuid.uuid4().hex[:6]}")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_audit", "view_all_graphs", "view_approvaltask", "view_thread"])
    )
    return Reader("audit_reader", user, token_issue(user=user))


def _reader(persona: Persona) -> Reader:
    return Reader(persona.username, persona.user, persona.token)


@dataclass
class World:
    canary: str
    thread_id: str
    run_ids: list[str]
    task_id: str
    checkpoint_ids: list[str]
    tag: str
    bodies: dict[str, bytes]  # what the operator was sent while making it


def _settled(http: httpx.Client, thread_id: str, status: str) -> None:
    wait_for(
        lambda: http.get(f"/threads/{thread_id}").json()["status"] == status,
        timeout=30,
        what=f"thread {thread_id} to be {status}",
    )


@pytest.fixture(scope="module")
def world(server: str, personas: dict[str, Persona], django_db_blocker: Any) -> World:  # noqa: F811
    """A thread of chatty_secret, started and streamed by the operator, resumed by the admin, its value
    replaced by the admin's ``update_state``, run once more by the operator with ``runs.wait``: paused at
    its gate, with messages speaking the value in its state and history, though its state no longer holds it."""
    canary = f"cnry{uuid.uuid4().hex[:12]}spk"
    tag = uuid.uuid4().hex
    bodies: dict[str, bytes] = {}
    operator, admin = _reader(personas["operator"]).http(server), _reader(personas["admin"]).http(server)
    with operator, admin:
        created = operator.post("/threads", json={"metadata": {"graph_id": GRAPH, "tag": tag}})
        assert created.status_code == 200, created.text
        thread_id = created.json()["thread_id"]
        body = {"assistant_id": GRAPH, "input": {"secret": canary}, "stream_mode": ALL_MODES, "stream_subgraphs": True}
        streamed = operator.post(f"/threads/{thread_id}/runs/stream", json=body)
        assert streamed.status_code == 200, streamed.text
        bodies["runs.stream (every mode)"] = streamed.content
        _settled(operator, thread_id, "interrupted")
        resumed = admin.post(
            f"/threads/{thread_id}/runs/wait",
            json={"assistant_id": GRAPH, "command": {"resume": {"decision": "approve"}}, "stream_mode": ALL_MODES},
        )
        assert resumed.status_code == 200, resumed.text
        assert canary in resumed.text, "the admin sees the value"
        _settled(operator, thread_id, "idle")
        # The value is replaced: the messages that spoke it stay, the state no longer holds it.
        replaced = admin.post(f"/threads/{thread_id}/state", json={"values": {"secret": f"other{uuid.uuid4().hex}"}})
        assert replaced.status_code == 200, replaced.text
        again = operator.post(f"/threads/{thread_id}/runs/wait", json={"assistant_id": GRAPH, "input": {}})
        assert again.status_code == 200, again.text
        bodies["runs.wait"] = again.content
        runs = operator.get(f"/threads/{thread_id}/runs").json()
        history = operator.post(f"/threads/{thread_id}/history", json={"limit": 100}).json()
    with django_db_blocker.unblock():
        from approvals.models import ApprovalTask

        task_id = str(ApprovalTask.objects.filter(thread_id=thread_id).order_by("created_at").first().pk)
    return World(
        canary=canary,
        thread_id=thread_id,
        run_ids=[r["run_id"] for r in runs],
        task_id=task_id,
        checkpoint_ids=[h["checkpoint"]["checkpoint_id"] for h in history],
        tag=tag,
        bodies=bodies,
    )


def _read_everything(server: str, reader: Reader, world: World) -> dict[str, bytes]:  # noqa: F811
    """Every surface that shows the thread's state, as ``reader``: the raw bytes of each response."""
    out = _Bodies()
    tid = world.thread_id
    with reader.http(server) as lg:
        out["threads.get"] = lg.get(f"/threads/{tid}")
        out["threads.search"] = lg.post("/threads/search", json={"metadata": {"tag": world.tag}})
        out["get_state"] = lg.get(f"/threads/{tid}/state")
        out["get_state subgraphs"] = lg.get(f"/threads/{tid}/state", params={"subgraphs": "true"})
        out["get_history"] = lg.post(f"/threads/{tid}/history", json={"limit": 100})
        out["get_history GET"] = lg.get(f"/threads/{tid}/history", params={"limit": 100})
        for checkpoint_id in world.checkpoint_ids:
            out[f"get_state {checkpoint_id}"] = lg.get(f"/threads/{tid}/state/{checkpoint_id}")
            out[f"get_state checkpoint {checkpoint_id}"] = lg.post(
                f"/threads/{tid}/state/checkpoint",
                json={"checkpoint": {"checkpoint_id": checkpoint_id}, "subgraphs": True},
            )
        for run_id in world.run_ids:
            out[f"runs.join {run_id}"] = lg.get(f"/threads/{tid}/runs/{run_id}/join")
            out[f"join_stream {run_id}"] = lg.get(
                f"/threads/{tid}/runs/{run_id}/stream", params=[("stream_mode", m) for m in ALL_MODES]
            )
        # Every run of the thread from its start, each in the modes it published, and its state updates.
        out["threads.join_stream"] = lg.get(
            f"/threads/{tid}/stream",
            params=[("stream_mode", m) for m in ("run_modes", "lifecycle", "state_update")] + [("follow", "false")],
            headers={"Last-Event-ID": "0"},
        )
    api_base = server.removesuffix("/lg") + "/api"
    with httpx.Client(
        base_url=api_base, headers={"Authorization": f"Bearer {reader.token}"}, timeout=scaled(60)
    ) as api:
        out["api thread"] = api.get(f"/threads/{tid}")
        out["api history"] = api.get(f"/threads/{tid}/history", params={"limit": 100})
        out["api task"] = api.get(f"/tasks/{world.task_id}")
        out["api audit"] = api.get("/audit", params={"thread": tid})
        for fmt in ("jsonl", "csv"):
            out[f"audit export {fmt}"] = api.get("/audit/export", params={"thread": tid, "format": fmt})
    console = Client()
    console.force_login(reader.user)
    out["console thread"] = console.get(f"/threads/{tid}/")
    for checkpoint_id in world.checkpoint_ids:
        out[f"console thread {checkpoint_id}"] = console.get(f"/threads/{tid}/", {"checkpoint": checkpoint_id})
    out["console task"] = console.get(f"/tasks/{world.task_id}/")
    return out


class _Bodies(dict[str, bytes]):
    """Response bodies by surface, and each one's status (a refusal is no reading)."""

    def __init__(self) -> None:
        super().__init__()
        self.status: dict[str, int] = {}

    def __setitem__(self, surface: str, response: Any) -> None:
        self.status[surface] = response.status_code
        super().__setitem__(surface, response.content)


def _found(bodies: dict[str, bytes], canary: str) -> dict[str, list[str]]:
    found = {}
    for surface, body in bodies.items():
        text = body.decode(errors="replace").lower()
        hits = [piece for piece in _pieces(canary) if piece.lower() in text]
        if hits:
            found[surface] = hits
    return found


def test_the_operator_streaming_the_run_is_never_sent_the_spoken_value(world):
    assert b"I know" in world.bodies["runs.stream (every mode)"], "the attack needs the messages streamed"
    assert _found(world.bodies, world.canary) == {}


# What each reader may read at all (the rest answers 403/404, which shows nothing): the test would
# pass vacuously if a surface it means to read refused it.
_AUDIT = {"api audit", "audit export jsonl", "audit export csv"}


def _must_read(role: str, bodies: _Bodies) -> set[str]:
    if role == "audit_reader":
        return _AUDIT
    return {s for s in bodies.status if s not in _AUDIT}


@pytest.mark.parametrize("role", ["operator", "reviewer", "audit_reader"])
def test_a_reader_without_reveal_rights_reads_the_spoken_value_on_no_surface(server, personas, world, role):  # noqa: F811
    reader = _audit_reader() if role == "audit_reader" else _reader(personas[role])
    bodies = _read_everything(server, reader, world)
    refused = {s: c for s, c in bodies.status.items() if s in _must_read(role, bodies) and c != 200}
    assert not refused, refused
    if role != "audit_reader":
        state = json.loads(bodies["get_state"])
        assert state["values"]["messages"][0]["content"] == "I know ••• well", "masked, not dropped"
    assert _found(bodies, world.canary) == {}


@pytest.mark.parametrize("role", ["auditor", "admin"])
def test_a_reader_with_reveal_rights_still_reads_it(server, personas, world, role):  # noqa: F811
    bodies = _read_everything(server, _reader(personas[role]), world)
    assert set(bodies.status.values()) == {200}, bodies.status
    found = _found(bodies, world.canary)
    surfaces = ("get_state", "get_state subgraphs", "get_history", "threads.get", "threads.join_stream", "api thread")
    for surface in (*surfaces, "console thread"):
        assert surface in found, f"{role} does not see the value on {surface}"
