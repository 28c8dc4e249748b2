"""Push, not poll: waiters wake on the run's committed outcome (PostgreSQL NOTIFY), and the native
API's long polls (``GET /api/threads/{id}?wait_for=…``, ``POST /api/threads?wait_for=…``,
``POST …/decision?wait=…``) return the final status, respect their timeout and refuse bad values."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.test import override_settings

from approvals.models import Decision
from runtime.models import Thread
from runtime.notify import ThreadWatch, listener_ready, watchers
from runtime.runs import run_finish
from tests.conftest import ApiClient, api_decide, api_wait, loan_input, pending_tasks, scaled, thread_start
from tests.perf.test_query_counts import _claimed_run, _interrupt_outcome

pytestmark = pytest.mark.usefixtures("live_db")


def test_a_watch_is_woken_by_the_committed_run_outcome(operator):
    run = _claimed_run(operator)

    async def scenario() -> tuple[bool, bool]:
        async with ThreadWatch(run.thread_id) as watch:
            assert await sync_to_async(listener_ready)(scaled(10))
            before = await watch.changed(0.05)  # nothing happened yet
            await sync_to_async(run_finish)(run=run, outcome=_interrupt_outcome("notify"))
            # changed() gives up after the fallback interval without a notification: retry until one comes.
            deadline = time.monotonic() + scaled(10)
            woken = False
            while not woken and time.monotonic() < deadline:
                woken = await watch.changed(deadline - time.monotonic())
            return before, woken

    before, woken = asyncio.run(scenario())
    assert before is False
    assert woken is True


def test_another_threads_outcome_does_not_wake_a_watch(operator):
    mine, other = _claimed_run(operator), _claimed_run(operator)

    async def scenario() -> bool:
        async with ThreadWatch(mine.thread_id) as watch, ThreadWatch(other.thread_id) as other_watch:
            assert await sync_to_async(listener_ready)(scaled(10))
            await sync_to_async(run_finish)(run=other, outcome=_interrupt_outcome("other"))
            deadline = time.monotonic() + scaled(10)
            while not await other_watch.changed(deadline - time.monotonic()):
                assert time.monotonic() < deadline, "the other thread's notification never came"
            return await watch.changed(0.05)

    assert asyncio.run(scenario()) is False


def test_a_watch_on_a_thread_is_woken_by_the_committed_run_outcome(operator):
    """The long polls wait on their request's thread (``with``, ``wait``): the same wake-up."""
    run = _claimed_run(operator)
    with ThreadWatch(run.thread_id) as watch:
        assert listener_ready(scaled(10))
        before = watch.wait(0.05)
        run_finish(run=run, outcome=_interrupt_outcome("notify"))
        deadline = time.monotonic() + scaled(10)
        woken = False
        while not woken and time.monotonic() < deadline:
            woken = watch.wait(deadline - time.monotonic())
    assert before is False
    assert woken is True


def test_another_threads_outcome_does_not_wake_a_watch_on_a_thread(operator):
    mine, other = _claimed_run(operator), _claimed_run(operator)
    with ThreadWatch(mine.thread_id) as watch, ThreadWatch(other.thread_id) as other_watch:
        assert listener_ready(scaled(10))
        run_finish(run=other, outcome=_interrupt_outcome("other"))
        deadline = time.monotonic() + scaled(10)
        while not other_watch.wait(deadline - time.monotonic()):
            assert time.monotonic() < deadline, "the other thread's notification never came"
        assert watch.wait(0.05) is False


def test_a_held_long_poll_gives_its_database_connection_back_while_it_waits(operator):
    """A request waiting for its thread must not hold one of the process's pooled connections for its
    whole wait: with the pool's size in long polls every other request would queue for a connection."""
    from django.db import connection

    from console.request_threads import ReusedThreadASGIHandler
    from tests.perf.test_request_hops import _scope

    assert connection.pool is not None, "the test settings use the pool, as production does"
    Thread.objects.exists()  # this test's own connection, checked out before the count
    stats = connection.pool.get_stats

    def in_use() -> int:
        now = stats()
        return int(now["pool_size"] - now["pool_available"])

    held = in_use()
    marker, wait = uuid.uuid4().hex, api_wait(20)
    body = json.dumps({"graph": "loan_approval", "input": loan_input(), "metadata": {"marker": marker}})
    app = ReusedThreadASGIHandler()
    answered: dict[str, Any] = {}

    async def serve() -> None:
        request = ApplicationCommunicator(
            app,
            _scope(
                "POST",
                "/api/threads",
                f"wait_for=completed,failed&timeout={wait}",
                [(b"authorization", f"Bearer {operator.token}".encode()), (b"content-type", b"application/json")],
            ),
        )
        await request.send_input({"type": "http.request", "body": body.encode(), "more_body": False})
        answered["start"] = await request.receive_output(wait + scaled(30))
        answered["body"] = await request.receive_output(scaled(10))

    with override_settings(ALLOWED_HOSTS=["testserver"]):
        server = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
        server.start()
        # No worker runs the thread: the request waits out its timeout. Once the thread is written and
        # read, the request's connection is back in the pool for the rest of the wait.
        deadline = time.monotonic() + scaled(10)
        while not (Thread.objects.filter(metadata__marker=marker).exists() and in_use() == held):
            assert time.monotonic() < deadline, f"the waiting request still holds a connection ({in_use()})"
            time.sleep(0.01)
        assert server.is_alive(), answered  # still waiting
        # The wait ends: the thread is marked failed (its next read, at the latest the fallback poll's).
        # If the session's worker runs (an earlier test started it), it claims the queued run and its
        # finish can write the thread's status over ours: mark it again until the request answers,
        # rather than let the request wait out its whole timeout.
        deadline = time.monotonic() + scaled(30)
        while server.is_alive():
            assert time.monotonic() < deadline, "the waiting request did not see its thread fail"
            Thread.objects.filter(metadata__marker=marker).update(status="failed")
            server.join(scaled(0.2))
    assert answered["start"]["status"] == 201, answered
    assert json.loads(answered["body"]["body"])["status"] == "failed", answered


def _long_poll(app: Any, persona: Any, thread_id: Any, seconds: float) -> ApplicationCommunicator:
    from tests.perf.test_request_hops import _scope

    return ApplicationCommunicator(
        app,
        _scope(
            "GET",
            f"/api/threads/{thread_id}",
            f"wait_for=completed&timeout={seconds}",
            [(b"authorization", f"Bearer {persona.token}".encode())],
        ),
    )


async def _until_true(check: Any, patience: float, what: str) -> None:
    deadline = time.monotonic() + patience
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


@override_settings(ALLOWED_HOSTS=["testserver"])
def test_a_long_poll_whose_client_leaves_stops_waiting_at_once(operator):
    """A sync wait cannot be cancelled: the client's ``http.disconnect`` ends it (runtime.notify.WaitsEnd).
    Otherwise a left long poll holds its thread, and its watch, to its whole timeout."""
    from console.request_threads import ReusedThreadASGIHandler

    run = _claimed_run(operator)  # busy, and nothing will finish it
    app, patience = ReusedThreadASGIHandler(), scaled(10)

    async def scenario() -> None:
        request = _long_poll(app, operator, run.thread_id, api_wait(10 * 6))
        await request.send_input({"type": "http.request", "body": b"", "more_body": False})
        await _until_true(lambda: watchers(run.thread_id) == 1, patience, "the long poll never started waiting")
        await request.send_input({"type": "http.disconnect"})
        await _until_true(lambda: watchers(run.thread_id) == 0, patience, "the left long poll still waits")
        await request.wait(patience)

    asyncio.run(scenario())


@override_settings(ALLOWED_HOSTS=["testserver"])
def test_an_external_tasks_long_poll_whose_client_leaves_stops_at_once(operator, monkeypatch):
    """The external task's long poll is an async view that re-reads the task between short sleeps, not a
    ``ThreadWatch``: the client's ``http.disconnect`` ends it too, instead of a left poll reading the task
    every quarter second to its whole ``wait`` (up to a minute) and holding a stopping server as long."""
    from approvals import external_api
    from console.request_threads import ReusedThreadASGIHandler
    from tests.perf.test_request_hops import _scope

    created = operator.client.post(
        "/api/external-tasks", {"source": f"leave-{uuid.uuid4().hex[:8]}", "key": "k1", "title": "Wire 9"}
    )
    assert created.status_code == 201, created.content
    polls: list[int] = []
    poll = external_api._decision_poll

    def counted(*args: Any) -> Any:
        polls.append(1)
        return poll(*args)

    monkeypatch.setattr(external_api, "_decision_poll", counted)
    app, patience = ReusedThreadASGIHandler(), scaled(10)

    async def scenario() -> None:
        request = ApplicationCommunicator(
            app,
            _scope(
                "GET",
                f"/api/external-tasks/{created.json()['id']}/decision",
                f"wait={external_api.MAX_WAIT_SECONDS}",
                [(b"authorization", f"Bearer {operator.token}".encode())],
            ),
        )
        await request.send_input({"type": "http.request", "body": b"", "more_body": False})
        await _until_true(lambda: len(polls) >= 1, patience, "the long poll never read the task")
        await request.send_input({"type": "http.disconnect"})
        await request.wait(patience)  # the request ends: far sooner than its wait of a minute

    asyncio.run(scenario())


@override_settings(ALLOWED_HOSTS=["testserver"])
def test_a_long_poll_ends_when_the_server_cancels_its_requests(operator):
    """daphne cancels its requests as it stops: the long poll answers at once, and its thread is free,
    instead of holding the stopping server up to the poll's timeout (``make run``'s Ctrl-C killed the
    web process after its grace while a client waited)."""
    from console.request_threads import ReusedThreadASGIHandler

    run = _claimed_run(operator)
    app, patience = ReusedThreadASGIHandler(), scaled(10)

    async def scenario() -> None:
        request = _long_poll(app, operator, run.thread_id, api_wait(10 * 6))
        await request.send_input({"type": "http.request", "body": b"", "more_body": False})
        await _until_true(lambda: watchers(run.thread_id) == 1, patience, "the long poll never started waiting")
        request.future.cancel()
        await _until_true(lambda: watchers(run.thread_id) == 0, patience, "the cancelled long poll still waits")
        # Its thread finished the call (the answer goes nowhere) and is given back idle.
        await _until_true(lambda: app.threads_kept == 1, patience, "the request's thread was not given back")

    asyncio.run(scenario())


@pytest.mark.integration
@pytest.mark.usefixtures("live_worker")
def test_the_long_poll_returns_once_the_thread_pauses_and_the_decision_waits_for_its_run(operator, reviewer):
    thread = thread_start(operator, "loan_approval", loan_input())
    timeout = api_wait(30)
    paused = reviewer.client.get(f"/api/threads/{thread['id']}", wait_for="interrupted,failed", timeout=timeout)
    assert paused.status_code == 200, paused.content
    body = paused.json()
    assert body["status"] == "interrupted"
    [task] = body["pending_tasks"]

    decided = reviewer.client.client.post(
        f"/api/tasks/{task['id']}/decision?wait={timeout}",
        '{"decision": "approve", "reason": "ok"}',
        content_type="application/json",
        headers=reviewer.client.headers,
    )
    assert decided.status_code == 201, decided.content
    assert decided.json()["run_status"] == "succeeded"
    # The response came after the run's outcome committed: a plain read sees the thread completed.
    done = reviewer.client.get(f"/api/threads/{thread['id']}").json()
    assert done["status"] == "completed" and done["values"]["status"] == "disbursed"


@pytest.mark.integration
@pytest.mark.usefixtures("live_worker")
def test_the_long_poll_returns_the_current_state_when_its_timeout_passes(operator, reviewer):
    thread = thread_start(operator, "loan_approval", loan_input())
    pending_tasks(reviewer, thread["id"])
    t0 = time.monotonic()
    response = reviewer.client.get(f"/api/threads/{thread['id']}", wait_for="completed", timeout=0.3)
    assert response.status_code == 200
    assert response.json()["status"] == "interrupted"
    assert time.monotonic() - t0 >= 0.3


def _without_message(error: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in error.items() if key != "message"}


def test_a_reader_who_may_not_see_the_thread_gets_the_404_at_once_and_nothing_else(personas, operator):
    """The long poll checks visibility before it waits: no status, no wait that would tell the thread exists."""
    thread = thread_start(operator, "four_eyes", {"subject": "wire", "amount": 5000})
    missing = personas["reviewer"].client.get(f"/api/threads/{uuid.uuid4()}", wait_for="completed", timeout=0)
    assert missing.status_code == 404
    patience = api_wait(30)
    for who in ("loan_reviewer", "outsider"):  # assigned to another graph only; no role at all
        t0 = time.monotonic()
        response = personas[who].client.get(f"/api/threads/{thread['id']}", wait_for="completed", timeout=patience)
        assert response.status_code == 404, (who, response.content)
        # The same error as for a thread that does not exist (code and field; the message names the id).
        assert _without_message(response.json()["error"]) == _without_message(missing.json()["error"])
        assert thread["id"] in response.json()["error"]["message"] and "status" not in response.json()
        assert time.monotonic() - t0 < patience, f"{who}: the 404 waited out the long poll"
    # The same request from a reader who may see it answers (the thread exists: the 404s were the rule).
    seen = personas["reviewer"].client.get(f"/api/threads/{thread['id']}", wait_for="completed", timeout=0)
    assert seen.status_code == 200 and seen.json()["id"] == thread["id"]


@pytest.mark.parametrize(
    "params,field",
    [
        ({"wait_for": "finished"}, "wait_for"),
        ({"wait_for": ","}, "wait_for"),
        ({"wait_for": "completed", "timeout": "-1"}, "timeout"),
        ({"wait_for": "completed", "timeout": "100000"}, "timeout"),
        ({"wait_for": "completed", "timeout": "soon"}, "timeout"),
    ],
)
def test_bad_long_poll_values_are_refused_naming_the_field(operator, params, field):
    thread = thread_start(operator, "loan_approval", loan_input())
    response = operator.client.get(f"/api/threads/{thread['id']}", **params)
    assert 400 <= response.status_code < 500, response.content
    assert field in response.content.decode()


@pytest.mark.parametrize("wait", ["-1", "100000", "later"])
def test_a_bad_decision_wait_is_refused_and_decides_nothing(operator, reviewer, wait):
    run = _claimed_run(operator)
    run_finish(run=run, outcome=_interrupt_outcome("bad-wait"))
    task = run.thread.tasks.get()
    response = reviewer.client.client.post(
        f"/api/tasks/{task.id}/decision?wait={wait}",
        '{"decision": "approve", "reason": "ok"}',
        content_type="application/json",
        headers=reviewer.client.headers,
    )
    assert 400 <= response.status_code < 500, response.content
    assert "wait" in response.content.decode()
    assert not Decision.objects.filter(task=task).exists()


def _start(who: Any, query: str, marker: str) -> Any:
    """POST /api/threads?<query> as ``who`` (a persona or an ApiClient), the thread marked ``marker``."""
    client = who if isinstance(who, ApiClient) else who.client
    body = {"graph": "loan_approval", "input": loan_input(), "metadata": {"marker": marker}}
    return client.client.post(
        f"/api/threads?{query}", json.dumps(body), content_type="application/json", headers=client.headers
    )


@pytest.mark.integration
@pytest.mark.usefixtures("live_worker")
def test_a_start_can_wait_until_the_thread_pauses_and_answer_with_its_task(operator, reviewer):
    """``POST /api/threads?wait_for=…``: one request where a client made a start and a long poll."""
    response = _start(operator, f"wait_for=interrupted,failed&timeout={api_wait(30)}", uuid.uuid4().hex)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "interrupted", body
    [task] = body["pending_tasks"]
    assert body["run_id"] and body["values"]["amount"] == loan_input()["amount"]
    # The task it names is the one a reviewer decides.
    decided = api_decide(reviewer, task)
    assert decided.status_code == 201, decided.content


@pytest.mark.integration
@pytest.mark.usefixtures("live_worker")
def test_a_start_whose_wait_times_out_answers_with_the_thread_as_it_is(operator):
    t0 = time.monotonic()
    response = _start(operator, "wait_for=completed&timeout=0.2", uuid.uuid4().hex)
    assert response.status_code == 201, response.content
    assert response.json()["status"] in ("busy", "interrupted")  # not completed: it waits for a reviewer
    assert time.monotonic() - t0 >= 0.2


@pytest.mark.parametrize(
    "query,field",
    [
        ("wait_for=finished", "wait_for"),
        ("wait_for=,", "wait_for"),
        ("wait_for=completed&timeout=-1", "timeout"),
        ("wait_for=completed&timeout=100000", "timeout"),
        ("wait_for=completed&timeout=soon", "timeout"),
    ],
)
def test_a_bad_start_wait_is_refused_naming_the_field_and_starts_nothing(operator, query, field):
    marker = uuid.uuid4().hex
    response = _start(operator, query, marker)
    assert 400 <= response.status_code < 500, response.content
    assert response.json()["error"]["field"] == field
    assert not Thread.objects.filter(metadata__marker=marker).exists()


def test_a_start_only_token_may_start_but_not_wait_for_what_it_may_not_read(operator):
    """Waiting answers with the thread's state: a token scoped to ``start`` gets a 403 and no thread."""
    from approvals.tokens import token_issue

    starter = ApiClient(token_issue(user=operator.user, actions=["start"]))
    marker = uuid.uuid4().hex
    refused = _start(starter, "wait_for=interrupted", marker)
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"]["field"] == "wait_for"
    assert not Thread.objects.filter(metadata__marker=marker).exists()
    # Without the wait it starts the thread and is told its id and status, not its values (it was a 404).
    started = _start(starter, "", marker)
    assert started.status_code == 201, started.content
    assert started.json()["values"] == {} and started.json()["status"] == "busy"
    assert Thread.objects.filter(pk=started.json()["id"], metadata__marker=marker).exists()


def test_a_watch_entered_while_its_listener_starts_is_listening_before_the_caller_reads(monkeypatch):
    """The listener closes when nobody waits; the next watch starts one. A change committed between
    that watch's first read and the new connection's LISTEN would never be delivered (the waiter would
    sleep until the fallback poll), so entering a watch waits until the listener listens."""
    from runtime import notify

    async def one_watch() -> None:
        async with ThreadWatch(uuid.uuid4()):
            pass

    asyncio.run(one_watch())  # a listener is up (started here or earlier)
    monkeypatch.setattr(notify, "IDLE_SECONDS", 0.0)
    deadline = time.monotonic() + scaled(20)
    while notify._listener.listening.is_set():  # closes within its 5 s notifies() round
        assert time.monotonic() < deadline, "the idle listener never closed"
        time.sleep(0.05)
    monkeypatch.setattr(notify, "IDLE_SECONDS", 30.0)

    async def entered_listening() -> bool:
        async with ThreadWatch(uuid.uuid4()):
            return notify._listener.listening.is_set()

    assert asyncio.run(entered_listening()) is True


def test_a_listener_that_cannot_connect_retries_while_someone_waits_and_stops_when_nobody_does(monkeypatch):
    """PostgreSQL unreachable: a waiter's listener keeps reconnecting (its fallback poll covers the gap),
    but once nobody waits it stops instead of retrying every second for the life of the process."""
    from runtime import checkpointer, notify

    attempts: list[float] = []

    def unreachable(_: Any) -> str:
        attempts.append(time.monotonic())
        return "host=127.0.0.1 port=1 dbname=nothing user=nobody connect_timeout=2"  # nothing listens on port 1

    monkeypatch.setattr(checkpointer, "checkpointer_conninfo", unreachable)
    listener = notify._Listener()  # its own, not the process's
    callback = lambda: None  # noqa: E731
    listener.subscribe("a-thread", callback)
    deadline = time.monotonic() + scaled(20)
    while len(attempts) < 2:  # failed once, and tried again because someone waits
        assert time.monotonic() < deadline, "the listener did not retry while a watch waited"
        time.sleep(0.02)
    thread = listener._thread
    assert thread is not None and thread.is_alive() and not listener.listening.is_set()
    listener.unsubscribe("a-thread", callback)
    thread.join(scaled(20))
    assert not thread.is_alive(), "the listener kept retrying with nobody waiting"
    assert listener._thread is None  # the next watch starts a listener
    tried = len(attempts)
    listener.subscribe("another", callback)
    again = listener._thread
    deadline = time.monotonic() + scaled(20)
    while len(attempts) == tried:
        assert time.monotonic() < deadline, "a new watch started no listener"
        time.sleep(0.02)
    listener.unsubscribe("another", callback)
    assert again is not None
    again.join(scaled(20))  # ended while the address is still unreachable: no session outlives the test
    assert not again.is_alive()


def test_the_wake_that_ends_a_long_poll_reads_the_thread_once(operator, reviewer, monkeypatch):
    """Each read of a waiting ``GET /api/threads/{id}?wait_for=`` is the visible row and, once its status
    is wanted, the answer: the wake the outcome causes makes one read, not a status read and then the row."""
    from approvals import permissions, selectors

    reads: list[str] = []  # appended once each read has been made
    by_key, status_read = permissions._thread_by_key, selectors.status_read

    def row_read(*args: Any, **kwargs: Any) -> Any:
        row = by_key(*args, **kwargs)
        reads.append("row")
        return row

    def status_only(**kwargs: Any) -> Any:
        status = status_read(**kwargs)
        reads.append("status")
        return status

    monkeypatch.setattr(permissions, "_thread_by_key", row_read)
    monkeypatch.setattr(selectors, "status_read", status_only)
    patience = api_wait(30)
    # Only the outcome's notification wakes the poll: no fallback re-read between the mark and the wake.
    monkeypatch.setattr("runtime.notify.FALLBACK_SECONDS", patience * 4)
    run = _claimed_run(operator)
    answered: dict[str, Any] = {}

    def poll() -> None:
        response = reviewer.client.get(f"/api/threads/{run.thread_id}", wait_for="interrupted", timeout=patience)
        answered["response"] = response

    waiting = threading.Thread(target=poll, daemon=True)
    waiting.start()
    deadline = time.monotonic() + scaled(10)
    while not (reads and watchers(run.thread_id) and listener_ready(0)):  # its first read made, it waits
        assert time.monotonic() < deadline, "the long poll never started waiting"
        time.sleep(0.01)
    before = len(reads)
    run_finish(run=run, outcome=_interrupt_outcome("one read"))
    waiting.join(patience + scaled(10))
    response = answered["response"]
    assert response.status_code == 200 and response.json()["status"] == "interrupted", response.content
    assert reads[before:] == ["row"], reads
