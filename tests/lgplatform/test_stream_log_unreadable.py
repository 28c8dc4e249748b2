"""A ``/lg/`` stream whose run log (Redis) does not answer goes on from the database and ends as a stream
should: the run's final values, then ``end``. Before, the log's read raised inside the response, after its
headers were sent: the server could answer no 500, the stream stopped without its end, and langgraph-sdk
waited out its 120 s timeout before joining the run again (the 40-client benchmark's stall, one stream in a
few hundred, from redis-py 8's 5 s socket timeout on a 5 s XREAD BLOCK)."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings

from lgplatform import stream as lg_stream
from runtime import stream as run_stream
from runtime.executor import run_execute
from tests.conftest import Persona, scaled, wait_for
from tests.faults.proxy import PausableProxy

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


@pytest.fixture
def log_silent(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The web side reads the run log through a paused proxy to the real Redis: its reads never answer.
    The worker's side (``runtime.stream.run_log``) publishes to Redis as ever."""
    parts = urlsplit(settings.REDIS_URL)
    proxy = PausableProxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    proxy.pause()
    silent = run_stream.RedisRunLog(f"redis://127.0.0.1:{proxy.port}{parts.path or '/0'}")
    monkeypatch.setattr(lg_stream, "run_log", lambda: silent)
    monkeypatch.setattr(lg_stream, "READ_WAIT_SECONDS", 0.2)
    monkeypatch.setattr(run_stream, "READ_SLACK_SECONDS", 0.3)
    try:
        yield
    finally:
        proxy.close()


async def _read(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def _events(body: bytes) -> list[tuple[str, Any]]:
    blocks = [b for b in body.decode().strip().split("\n\n") if not b.startswith(":")]
    fields = [dict(line.split(": ", 1) for line in block.split("\n")) for block in blocks]
    return [(f["event"], json.loads(f["data"])) for f in fields]


def test_a_stream_whose_log_does_not_answer_ends_with_the_run_s_final_values(
    operator: Persona, dispatched: list[str], log_silent: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lgplatform.stream")
    thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    body = {"assistant_id": "three_steps", "input": {"x": 1}, "stream_mode": ["values", "updates"]}
    run_id = operator.client.post(f"/lg/threads/{thread}/runs", body).json()["run_id"]
    joined: dict[str, bytes] = {}

    def join() -> None:
        response = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/stream")
        assert response.status_code == 200
        joined["body"] = async_to_sync(_read)(response.streaming_content)

    reader = threading.Thread(target=join, daemon=True)
    reader.start()
    # The run is still queued: the stream is following it when its log is found not to answer.
    wait_for(lambda: "streaming on without its log" in caplog.text, what="the stream to give up on its log")
    run_execute(run_id=run_id)
    reader.join(scaled(30))
    assert "body" in joined, "the stream ended"
    events = _events(joined["body"])
    assert [name for name, _ in events] == ["metadata", "values", "end"]
    assert events[1][1] == {"x": 1, "seen": ["t1", "t2", "t3"]}


def test_a_stream_that_fails_after_its_headers_ends_with_an_error_and_its_end() -> None:
    run_id = uuid.uuid4()

    async def failing() -> AsyncIterator[bytes]:
        yield b"event: metadata\ndata: {}\n\n"
        raise RuntimeError("a bug")

    body = async_to_sync(_read)(lg_stream.events_ended(failing(), thread_id="t", run_id=run_id))
    events = _events(body)
    assert [name for name, _ in events] == ["metadata", "error", "end"]
    assert events[1][1]["error"] == "RuntimeError"
    assert f"/lg/threads/t/runs/{run_id}/join" in events[1][1]["message"]


def test_a_stream_that_loses_its_log_mid_run_ends_with_the_values_it_could_not_read(
    operator: Persona, dispatched: list[str], tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Values streamed before the log went silent are not the run's last: the stream must end with the
    final state from the database (here the interrupt the run paused at), not with what it had read."""
    caplog.set_level(logging.WARNING, logger="lgplatform.stream")
    parts = urlsplit(settings.REDIS_URL)
    proxy = PausableProxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    through_proxy = run_stream.RedisRunLog(f"redis://127.0.0.1:{proxy.port}{parts.path or '/0'}")
    thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    payload = {"payment_id": "P-1", "amount": 5, "review": True, "hold": "gate", "hold_dir": str(tmp_path)}
    body = {"assistant_id": "zombie_pay", "input": payload, "stream_mode": ["values"]}
    run_id = operator.client.post(f"/lg/threads/{thread}/runs", body).json()["run_id"]
    chunks: list[bytes] = []
    ended = threading.Event()

    async def follow(stream: AsyncIterator[bytes]) -> None:
        async for chunk in stream:
            chunks.append(chunk)

    def join() -> None:
        response = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/stream")
        async_to_sync(follow)(response.streaming_content)
        ended.set()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lg_stream, "run_log", lambda: through_proxy)
        patch.setattr(lg_stream, "READ_WAIT_SECONDS", 0.2)
        patch.setattr(run_stream, "READ_SLACK_SECONDS", 0.3)
        try:
            threading.Thread(target=join, daemon=True).start()
            runner = threading.Thread(target=run_execute, kwargs={"run_id": run_id}, daemon=True)
            runner.start()
            # The run holds at its gate, after ``prepare``'s values were published and read.
            wait_for(lambda: _reached(tmp_path), what="the run at its gate")
            wait_for(lambda: b"prepared_by" in b"".join(chunks), what="the stream to read prepare's values")
            proxy.pause()
            (tmp_path / _reached(tmp_path)[0].replace(".reached", ".go")).write_text("")
            runner.join(scaled(30))
            assert ended.wait(scaled(30)), "the stream ended"
        finally:
            proxy.close()
    assert "streaming on without its log" in caplog.text
    events = _events(b"".join(chunks))
    assert [name for name, _ in events][-1] == "end"
    values = [data for name, data in events if name == "values"]
    assert "__interrupt__" in values[-1], "the stream ends with the state the run paused at, read from the database"


def _reached(directory: Any) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".reached"))
