"""A run's stream log (runtime.stream): replayable from its start, followed live, on Redis and on SQLite;
the executor's hook leaves the executor's own view of the stream unchanged; publishing never fails a run."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from pathlib import Path
from typing import Any, TypedDict

import pytest
from django.conf import settings
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from runtime.models import Run
from runtime.stream import RedisRunLog, RunLog, SqliteRunLog, event_mode, run_log
from runtime.stream_tap import stream_tap


@pytest.fixture(params=["redis", "sqlite"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> RunLog:
    if request.param == "redis":
        return RedisRunLog(settings.REDIS_URL)
    return SqliteRunLog(str(tmp_path / "run_streams.sqlite3"))


def _read(log: RunLog, run_id: str, after: str = "0", wait: float = 0) -> list[Any]:
    return asyncio.run(log.read(run_id, after, wait=wait))


def test_a_reader_gets_every_entry_from_the_start_then_only_what_follows(log):
    run_id = str(uuid.uuid4())
    log.append(run_id, [("updates", '{"a":1}'), ("values", '{"a":1}')])
    log.append(run_id, [("updates", '{"b":2}')])
    entries = _read(log, run_id)
    assert [(e.event, json.loads(e.data)) for e in entries] == [
        ("updates", {"a": 1}),
        ("values", {"a": 1}),
        ("updates", {"b": 2}),
    ]
    assert all(log.valid_id(e.id) for e in entries)
    assert [e.event for e in _read(log, run_id, entries[0].id)] == ["values", "updates"]
    assert _read(log, run_id, entries[-1].id) == []
    assert _read(log, str(uuid.uuid4())) == [], "another run's log is its own"


def test_a_waiting_reader_wakes_for_the_next_entry(log):
    run_id = str(uuid.uuid4())
    timer = threading.Timer(0.2, lambda: log.append(run_id, [("custom", '"late"')]))
    timer.start()
    try:
        entries = _read(log, run_id, wait=10)
    finally:
        timer.join()
    assert [e.data for e in entries] == ['"late"']


def test_processes_opening_a_fresh_embedded_log_together_all_publish(tmp_path):
    # The web process (a stream's reader) and a worker (its run's publisher) open a fresh var dir's
    # log at the same moment: switching the new file to WAL raced, and the loser's first write failed
    # ("database is locked", at once), so that run published nothing. Four openers per file, many
    # files: the race was lost about once in fifty opens.
    failures: list[str] = []
    for attempt in range(150):
        path = str(tmp_path / f"run_streams-{attempt}.sqlite3")
        ready = threading.Barrier(4)
        failed_before = len(failures)

        def publish(path: str = path, ready: threading.Barrier = ready) -> None:
            opener = SqliteRunLog(path)  # each its own connection, as each process has
            ready.wait()
            try:
                opener.append("run", [("values", "{}")])
            except Exception as exc:  # collected, asserted below
                failures.append(repr(exc))

        openers = [threading.Thread(target=publish) for _ in range(4)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join()
        assert len(_read(SqliteRunLog(path), "run")) == 4 - (len(failures) - failed_before)
    assert failures == []


@pytest.mark.parametrize("entry_id", ["", "x", "1-", "-1", "1-2-3", "0-0; DEL", "9" * 30])
def test_a_malformed_event_id_is_not_taken_for_one(entry_id):
    assert not RedisRunLog(settings.REDIS_URL).valid_id(entry_id)
    assert not SqliteRunLog(":memory:").valid_id(entry_id)


def test_event_names_map_to_the_modes_a_client_asks_for():
    assert [event_mode(e) for e in ("messages/partial|child:1", "messages", "updates|a|b", "values")] == [
        "messages",
        "messages-tuple",
        "updates",
        "values",
    ]


class _State(TypedDict, total=False):
    n: int
    answer: str


def _graph() -> Any:
    def count(state: _State) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1}

    def ask(state: _State) -> dict[str, Any]:
        return {"answer": str(interrupt({"question": "ok?"}))}

    builder = StateGraph(_State)
    builder.add_node(count)
    builder.add_node(ask)
    builder.add_edge(START, "count")
    builder.add_edge("count", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("stream_mode", ["updates", ["updates", "values"]])
def test_the_executor_sees_the_same_chunks_whether_or_not_a_client_streams(stream_mode):
    plain = list(_graph().stream({"n": 0}, {"configurable": {"thread_id": "a"}}, stream_mode=stream_mode))
    run = Run(id=uuid.uuid4(), stream={"modes": ["values", "debug", "custom"], "subgraphs": True})
    config = {"configurable": {"thread_id": "b"}}
    tapped = list(stream_tap(run, _graph(), {"n": 0}, config, stream_mode=stream_mode))
    assert _shape(tapped) == _shape(plain)
    published = _read(run_log(), str(run.id))
    assert {e.event for e in published} == {"values", "debug", "updates"}, "the client's modes, and updates"
    last = json.loads([e for e in published if e.event == "values"][-1].data)
    assert last["n"] == 1 and [i["value"] for i in last["__interrupt__"]] == [{"question": "ok?"}]
    # as LangGraph Server streams an interrupt: its response_schema too, null when none was declared
    assert last["__interrupt__"][0]["response_schema"] is None
    assert set(last["__interrupt__"][0]) == {"value", "id", "response_schema"}, "as the Platform API shows it"


def _shape(chunks: list[Any]) -> list[Any]:
    # Interrupt ids differ between two threads; everything else must match.
    return json.loads(json.dumps(chunks, default=lambda o: {"interrupt": getattr(o, "value", repr(o))}))


def test_a_run_nobody_streams_publishes_nothing():
    run = Run(id=uuid.uuid4(), stream=None)
    chunks = list(stream_tap(run, _graph(), {"n": 0}, {"configurable": {"thread_id": "c"}}, stream_mode="updates"))
    assert chunks and _read(run_log(), str(run.id)) == []


def test_a_log_that_cannot_be_written_never_fails_the_run(monkeypatch):
    import runtime.stream_tap as tap

    down = RedisRunLog("redis://127.0.0.1:1/0")  # nothing listens there
    monkeypatch.setattr(tap, "run_log", lambda: down)
    run = Run(id=uuid.uuid4(), stream={"modes": ["values"], "subgraphs": False})
    chunks = list(stream_tap(run, _graph(), {"n": 0}, {"configurable": {"thread_id": "d"}}, stream_mode="updates"))
    assert [list(c) for c in chunks] == [["count"], ["__interrupt__"]]


# --- a slow or silent Redis: a read answers late or says so, never fails at random -------------------------


@pytest.fixture
def redis_behind_proxy():
    """A ``RedisRunLog`` whose connections pass a proxy the test can pause (tests/faults/proxy.py)."""
    from urllib.parse import urlsplit

    from tests.faults.proxy import PausableProxy

    parts = urlsplit(settings.REDIS_URL)
    proxy = PausableProxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    try:
        yield proxy, RedisRunLog(f"redis://127.0.0.1:{proxy.port}{parts.path or '/0'}")
    finally:
        proxy.close()


def _blocked_in_xread(key: str) -> bool:
    import redis

    with redis.Redis.from_url(settings.REDIS_URL) as client:
        return any(c.get("cmd") == "xread" and "b" in c.get("flags", "") for c in client.client_list())


def test_a_read_whose_empty_answer_comes_after_five_seconds_still_gets_it(redis_behind_proxy):
    """Redis's empty answer to a 5 s XREAD BLOCK, delivered a second late (a loaded machine, a slow link):
    redis-py 8 reads with a 5 s socket timeout by default, so the read raised at random under load and the
    /lg/ stream following it died mid-response (one in a few hundred; its client waited 120 s)."""
    from lgplatform.stream import READ_WAIT_SECONDS
    from tests.conftest import wait_for

    proxy, log = redis_behind_proxy
    run_id = str(uuid.uuid4())

    async def late() -> list[Any]:
        reading = asyncio.ensure_future(log.read(run_id, "0", wait=READ_WAIT_SECONDS))
        # Held from the moment Redis has the command until a second after its block ends.
        await asyncio.to_thread(wait_for, lambda: _blocked_in_xread(run_id), what="the read blocked in Redis")
        proxy.pause()
        await asyncio.sleep(READ_WAIT_SECONDS + 1.0)
        proxy.resume()
        return await reading

    assert asyncio.run(late()) == []


def test_a_log_that_does_not_answer_is_unreadable_after_the_wait_and_its_slack(redis_behind_proxy, monkeypatch):
    from runtime import stream

    proxy, log = redis_behind_proxy
    monkeypatch.setattr(stream, "READ_SLACK_SECONDS", 0.3)
    proxy.pause()
    with pytest.raises(stream.RunLogUnreadable, match="did not answer"):
        _read(log, str(uuid.uuid4()), wait=0.2)


def test_a_log_nobody_listens_for_is_unreadable():
    from runtime.stream import RunLogUnreadable

    with pytest.raises(RunLogUnreadable):
        _read(RedisRunLog("redis://127.0.0.1:1/0"), str(uuid.uuid4()))
