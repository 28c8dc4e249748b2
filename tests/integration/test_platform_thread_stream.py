"""``threads.join_stream`` (``GET /lg/threads/{id}/stream``) through the official ``langgraph_sdk`` client and
raw SSE: every run of a thread in one stream, each from its ``metadata`` to its ``run_done``; a replay after an
event id; lifecycle only; runs and state updates that happen while a reader is joined; and what a reader
without the right to see sensitive fields never receives in a state update.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from approvals.redaction import MASK
from runtime.models import Run
from tests.conftest import loan_input, scaled, wait_for
from tests.integration.test_cancel_running import _input, _reached, _release, _stopped, hold_dir  # noqa: F401
from tests.integration.test_platform_sdk import server  # noqa: F401 - the live daphne fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

TIMEOUT = httpx.Timeout(scaled(30.0))
RESUME = {"resume": {"decision": "approve", "reason": "ok"}}
REPLAY = {"follow": "false"}  # Gatehouse's own: end once the runs found have settled


def _loan_thread(server: str, personas: Any) -> tuple[str, list[str]]:  # noqa: F811
    """A loan started by the operator (its run publishes updates and values), paused at its gate, and
    approved by the reviewer (the SDK's default: values): the thread and its two runs, oldest first."""

    async def flow() -> tuple[str, list[str]]:
        op = get_client(url=server, api_key=personas["operator"].token, timeout=TIMEOUT)
        rv = get_client(url=server, api_key=personas["reviewer"].token, timeout=TIMEOUT)
        try:
            thread = (await op.threads.create())["thread_id"]
            first = await op.runs.create(thread, "loan_approval", input=loan_input(), stream_mode=["updates", "values"])
            await op.runs.join(thread, first["run_id"])
            second = await rv.runs.create(thread, "loan_approval", command=RESUME)
            await rv.runs.join(thread, second["run_id"])
            return thread, [first["run_id"], second["run_id"]]
        finally:
            await op.aclose()
            await rv.aclose()

    return asyncio.run(flow())


def _streamed(server: str, token: str, opened: Any) -> list[Any]:  # noqa: F811
    """What the SDK yields of the stream ``opened(client)`` opens (a coroutine, or an async iterator)."""

    async def read() -> list[Any]:
        client = get_client(url=server, api_key=token, timeout=TIMEOUT)
        try:
            stream = opened(client)
            return [p async for p in (await stream if asyncio.iscoroutine(stream) else stream)]
        finally:
            await client.aclose()

    return asyncio.run(read())


def _thread_parts(server: str, token: str, thread: str, **kwargs: Any) -> list[Any]:  # noqa: F811
    return _streamed(server, token, lambda client: client.threads.join_stream(thread, params=REPLAY, **kwargs))


def _run_parts(server: str, token: str, thread: str, run: str) -> list[Any]:  # noqa: F811
    return _streamed(server, token, lambda client: client.runs.join_stream(thread, run))


def _shape(parts: list[Any]) -> list[tuple[str, Any]]:
    """Each part's event, and its id, or its data for ``metadata`` (which carries no id: SSE readers such as
    the SDK's report the last id seen before it)."""
    return [(p.event, p.data if p.event == "metadata" else p.id) for p in parts]


def test_a_replayed_thread_stream_is_each_runs_stream_in_turn_as_langgraph_server_sends_it(server, personas):  # noqa: F811
    token = personas["operator"].token
    thread, (first, second) = _loan_thread(server, personas)
    parts = _thread_parts(server, token, thread, last_event_id="0")
    first_run, second_run = _run_parts(server, token, thread, first), _run_parts(server, token, thread, second)
    # Each run as its own stream sends it, its ``end`` replaced by a run_done ``metadata``.
    expected = [
        *_shape(first_run[:-1]),
        ("metadata", {"status": "run_done", "run_id": first}),
        *_shape(second_run[:-1]),
        ("metadata", {"status": "run_done", "run_id": second}),
    ]
    assert _shape(parts) == expected
    assert first_run[0].data == {"run_id": first, "attempt": 1} and first_run[-1].event == "end"
    assert {p.event for p in first_run[1:-1]} == {"updates", "values"}, "the modes the first run published"
    assert {p.event for p in second_run[1:-1]} == {"values"} and second_run[-2].data["status"] == "disbursed"

    # Resumed after an event of the first run: the rest of it, no second metadata for it, then the second run.
    middle = next(i for i, p in enumerate(parts) if p.event == "updates")
    rest = _thread_parts(server, token, thread, last_event_id=parts[middle].id)
    assert _shape(rest) == _shape(parts[middle + 1 :])

    # Resumed after the first run's last event: the first run is not announced again.
    last = max(i for i, p in enumerate(parts[: expected.index(("metadata", {"status": "run_done", "run_id": first}))]))
    tail = _thread_parts(server, token, thread, last_event_id=parts[last].id)
    assert _shape(tail) == _shape(parts[last + 1 :])

    lifecycle = _thread_parts(server, token, thread, last_event_id="0", stream_mode="lifecycle")
    assert _shape(lifecycle) == [
        ("metadata", {"run_id": first, "attempt": 1}),
        ("metadata", {"status": "run_done", "run_id": first}),
        ("metadata", {"run_id": second, "attempt": 1}),
        ("metadata", {"status": "run_done", "run_id": second}),
    ]
    # Joined now, without an id and with no run active: nothing has happened since.
    assert _thread_parts(server, token, thread) == []


class _Sse:
    """A raw SSE reader of one response: events as (event, data, id), comments as ("", text, None)."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.iter_lines()

    def __iter__(self) -> Iterator[tuple[str, Any, str | None]]:
        event, data, entry_id = "", None, None
        for line in self.lines:
            if line.startswith(":"):
                yield "", line[1:].strip(), None
            elif line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("id: "):
                entry_id = line.removeprefix("id: ")
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
            elif line == "" and event:
                yield event, data, entry_id
                event, data, entry_id = "", None, None

    def until(self, done: Any) -> list[tuple[str, Any, str | None]]:
        """The events read until (and with) the first for which ``done(event, data)`` holds."""
        seen = []
        for event, data, entry_id in self:
            if event:
                seen.append((event, data, entry_id))
                if done(event, data):
                    return seen
        raise AssertionError(f"the stream ended before the awaited event: {seen}")


def _joined(stream: _Sse) -> None:
    for event, data, _ in stream:
        if not event and data == "joined":
            return
    raise AssertionError("the stream ended before it was joined")


def _run_done(run_id: str) -> Any:
    return lambda event, data: event == "metadata" and data == {"status": "run_done", "run_id": run_id}


def test_a_joined_reader_gets_each_new_run_and_state_update_live(server, personas):  # noqa: F811
    operator, reviewer, admin = (personas[n].token for n in ("operator", "reviewer", "admin"))
    modes = [("stream_mode", m) for m in ("run_modes", "lifecycle", "state_update")]

    def lg(token: str) -> httpx.Client:
        return httpx.Client(base_url=server, headers={"x-api-key": token}, timeout=scaled(30))

    with lg(operator) as op, lg(reviewer) as rv, lg(admin) as ad:
        thread = op.post("/threads", json={}).json()["thread_id"]
        with op.stream("GET", f"/threads/{thread}/stream", params=modes) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            stream = _Sse(response)
            _joined(stream)
            first = op.post(
                f"/threads/{thread}/runs",
                json={"assistant_id": "loan_approval", "input": loan_input(), "stream_mode": "values"},
            ).json()["run_id"]
            seen = stream.until(_run_done(first))
            assert seen[0][:2] == ("metadata", {"run_id": first, "attempt": 1})
            assert [e for e, _, _ in seen[1:-1]] and {e for e, _, _ in seen[1:-1]} == {"values"}
            assert seen[-2][1]["__interrupt__"], "the run ended at its gate"
            assert all(entry_id for _, _, entry_id in seen[1:-1]), "each chunk has an id to resume after"

            second = rv.post(f"/threads/{thread}/runs", json={"assistant_id": "loan_approval", "command": RESUME})
            assert second.status_code == 200, second.text
            seen = stream.until(_run_done(second.json()["run_id"]))
            # A run that published nothing (no stream_mode): its final values, as its own stream sends them.
            assert [e for e, _, _ in seen] == ["metadata", "values", "metadata"] and seen[1][2] is None
            assert seen[1][1]["status"] == "disbursed"

            updated = ad.post(f"/threads/{thread}/state", json={"values": {"route": "checked twice"}})
            assert updated.status_code == 200, updated.text
            [(_, data, entry_id)] = stream.until(lambda event, _: event == "state_update")
            assert data["thread_id"] == thread and entry_id is None
            assert data["state"]["values"]["route"] == "checked twice"
            assert data["state"]["checkpoint"]["checkpoint_id"] == updated.json()["checkpoint"]["checkpoint_id"]


def test_a_run_cancelled_by_the_next_ends_before_the_next_begins(server, personas, live_worker, hold_dir):  # noqa: F811
    """multitask_strategy=interrupt: the thread's running run (zombie_pay, held before its payment) is cancelled
    and the new one starts. The joined reader gets the first run to its run_done, with no error (it was
    cancelled, not failed), then the second whole: one run after the other, neither cut into the other."""

    def body(hold: str, payment: str) -> dict[str, Any]:
        return {"assistant_id": "zombie_pay", "input": _input(hold_dir, hold, payment), "stream_mode": "updates"}

    with httpx.Client(base_url=server, headers={"x-api-key": personas["operator"].token}, timeout=scaled(30)) as op:
        thread = op.post("/threads", json={}).json()["thread_id"]
        with op.stream("GET", f"/threads/{thread}/stream") as response:
            stream = _Sse(response)
            _joined(stream)
            first = op.post(f"/threads/{thread}/runs", json=body("before_effect", "T-a")).json()["run_id"]
            pid = wait_for(lambda: _reached(hold_dir, "before_effect"), timeout=30, what="the first run to hold")
            created = op.post(
                f"/threads/{thread}/runs", json={**body("none", "T-b"), "multitask_strategy": "interrupt"}
            )
            assert created.status_code == 200, created.text
            second = created.json()["run_id"]
            seen = stream.until(_run_done(second))
            _release(hold_dir, "before_effect", pid)
    _stopped(live_worker, first)
    names = [event for event, _, _ in seen]
    ends = [i for i, (event, data, _) in enumerate(seen) if event == "metadata" and "status" in data]
    starts = [i for i, (event, data, _) in enumerate(seen) if event == "metadata" and "attempt" in data]
    assert [seen[i][1]["run_id"] for i in starts] == [first, second], names
    assert [seen[i][1]["run_id"] for i in ends] == [first, second], names
    assert starts[0] == 0 < ends[0] < starts[1] < ends[1] == len(seen) - 1, "one run after the other"
    assert set(names[1 : ends[0]]) == {"updates"}, "the first run's chunks, and no error: it was cancelled"
    assert set(names[starts[1] + 1 : -1]) == {"updates"}, names
    assert seen[-2][1]["pay"]["paid_by"], "the second run paid"
    assert Run.objects.get(pk=first).status == "cancelled"


def test_a_reader_without_reveal_rights_gets_state_updates_masked(server, personas):  # noqa: F811
    """chatty_secret's ``secret`` is sensitive: the admin writes a new one while the operator and the auditor
    are joined. The operator's update holds none of it, the auditor's holds it."""
    canary = f"cnry{uuid.uuid4().hex[:12]}upd"

    def lg(persona: str) -> httpx.Client:
        return httpx.Client(base_url=server, headers={"x-api-key": personas[persona].token}, timeout=scaled(30))

    with lg("admin") as admin, lg("operator") as operator, lg("auditor") as auditor:
        thread = admin.post("/threads", json={"metadata": {"graph_id": "chatty_secret"}}).json()["thread_id"]
        paused = admin.post(
            f"/threads/{thread}/runs/wait", json={"assistant_id": "chatty_secret", "input": {"secret": "first"}}
        )
        assert paused.status_code == 200, paused.text
        done = admin.post(
            f"/threads/{thread}/runs/wait",
            json={"assistant_id": "chatty_secret", "command": {"resume": {"decision": "approve"}}},
        )
        assert done.status_code == 200, done.text
        wait_for(lambda: not Run.objects.filter(thread_id=thread, status__in=("queued", "running")).exists())
        params = {"stream_mode": "state_update"}
        with (
            operator.stream("GET", f"/threads/{thread}/stream", params=params) as blind,
            auditor.stream("GET", f"/threads/{thread}/stream", params=params) as seeing,
        ):
            blind_events, seeing_events = _Sse(blind), _Sse(seeing)
            _joined(blind_events)
            _joined(seeing_events)
            updated = admin.post(f"/threads/{thread}/state", json={"values": {"secret": canary}})
            assert updated.status_code == 200, updated.text
            [(_, masked, _)] = blind_events.until(lambda event, _: event == "state_update")
            [(_, shown, _)] = seeing_events.until(lambda event, _: event == "state_update")
    assert masked["state"]["values"]["secret"] == MASK
    assert canary[4:-3] not in json.dumps(masked)
    assert shown["state"]["values"]["secret"] == canary


def test_an_unknown_mode_a_malformed_event_id_or_an_unseen_thread_is_refused_before_the_stream(server, personas):  # noqa: F811
    with httpx.Client(base_url=server, headers={"x-api-key": personas["operator"].token}, timeout=scaled(30)) as http:
        thread = http.post("/threads", json={}).json()["thread_id"]
        for params, field in (
            ({"stream_mode": "values"}, "stream_mode"),
            ([("stream_mode", "lifecycle"), ("stream_mode", "telepathy")], "stream_mode"),
            ({"stream_modes": "run_modes,nope"}, "stream_modes"),
        ):
            response = http.get(f"/threads/{thread}/stream", params=params)
            assert response.status_code == 422, (params, response.text)
            assert response.json()["error"]["field"] == field and "run_modes" in response.json()["error"]["message"]
        response = http.get(f"/threads/{thread}/stream", headers={"Last-Event-ID": "x'; DROP"})
        assert response.status_code == 422 and response.json()["error"]["field"] == "Last-Event-ID"
        assert http.get(f"/threads/{uuid.uuid4()}/stream").status_code == 404
        # LangGraph Server's own spelling of several modes is taken too
        ok = http.get(f"/threads/{thread}/stream", params={"stream_modes": "lifecycle,state_update", **REPLAY})
        assert ok.status_code == 200 and ok.text == ": joined\n\n", ok.text
