"""Websockets and the live-event pipeline: who may subscribe, who receives what, the embedded relay."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.db import connection, transaction
from django.test import Client, override_settings
from django.utils import timezone

from approvals.audit import audit_record
from console import consumers, live
from console.asgi import application
from runtime import runs as runtime_runs
from runtime.models import ACTIVE_RUN_STATUSES, Run, RunStatus, Thread
from tests.approvals.handoffs import person
from tests.conftest import runs_settle, scaled, wait_for, workers_alive
from tests.factories import task_make
from tests.fake_resumes import fake_resumes_closed  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("live_db")

ORIGIN = (b"origin", b"http://testserver")


def _signed_in(user: Any) -> tuple[tuple[bytes, bytes], Client]:
    """A session for ``user``: the socket's cookie header, and the client that holds the session."""
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()), client


def _cookie(persona: Any) -> tuple[bytes, bytes]:
    return _signed_in(persona.user)[0]


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for every socket, in its own thread: the application task a
    communicator starts must keep running between the test's sync calls."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop

    async def _rest_cancelled() -> None:
        # A task still pending here (a consumer's render after its socket's test ended) would be destroyed
        # unawaited with the loop, and reported as an ERROR in whichever later test collected it.
        rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(_rest_cancelled(), loop).result(scaled(10))
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=scaled(5))
    loop.close()


class Socket:
    """A sync facade over WebsocketCommunicator (tests here are sync, like the rest of the suite)."""

    opened: ClassVar[list[Socket]] = []  # closed after each test, failed or not (``_sockets_closed``)

    def __init__(self, loop: asyncio.AbstractEventLoop, path: str, headers: list[tuple[bytes, bytes]]) -> None:
        self.loop = loop
        self.comm = self._run(self._make(path, headers))
        Socket.opened.append(self)

    async def _make(self, path: str, headers: list[tuple[bytes, bytes]]) -> WebsocketCommunicator:
        if not any(name == b"host" for name, _ in headers):  # a browser always sends Host
            headers = [(b"host", b"testserver"), *headers]
        return WebsocketCommunicator(application, path, headers=headers)

    def _run(self, coro: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(scaled(timeout))

    def connect(self) -> tuple[bool, Any]:
        return self._run(self.comm.connect(timeout=scaled(5)))

    def receive(self, timeout: float = 5) -> str:
        return self._run(self.comm.receive_from(timeout=scaled(timeout)))

    def output(self, timeout: float = 5) -> Any:
        return self._run(self.comm.receive_output(timeout=scaled(timeout)))

    def nothing(self, timeout: float = 0.6) -> bool:
        return self._run(self.comm.receive_nothing(timeout=scaled(timeout)))

    def settle(self) -> None:
        """Wait until no run of an earlier test is still executing on a worker (its events would
        re-render this socket), then drain what already arrived: "nothing" then means nothing.

        With no worker running (``make test-fast``) a run left queued by an earlier test stays queued
        and sends nothing: there is nothing to wait for. A ``running`` run with no lease at all is one a
        test wrote by hand (every claim sets a lease, every end clears the status with it): no worker
        executes it and no sweeper ever sends it, so it is not waited for either (an earlier test that
        left one must not fail a later one)."""
        active = Run.objects.filter(status__in=ACTIVE_RUN_STATUSES).exclude(
            status=RunStatus.RUNNING, lease_expires_at__isnull=True
        )
        try:
            wait_for(
                lambda: not workers_alive() or not active.exists(), timeout=60, what="earlier tests' runs to settle"
            )
        except AssertionError as exc:  # name them: which earlier test left a run no worker finishes
            stuck = list(active.values_list("id", "thread__graph", "status", "attempts", "lease_owner", "error")[:10])
            raise AssertionError(f"{exc}; still active: {stuck}") from None
        while not self.nothing(0.3):
            self.receive()

    def close(self) -> None:
        if self in Socket.opened:
            Socket.opened.remove(self)
        self._run(self.comm.disconnect())


@pytest.fixture(autouse=True)
def _sockets_closed(live_db: None) -> Iterator[None]:
    """A socket a failed assertion left open would keep its channel-layer receiver on the module's loop,
    which then raised ("Event loop is closed") in whichever test ran next on this process. Closed while the
    database is still open to the test (``live_db`` is torn down after this): an event arriving in between
    made a render that failed on "Database access not allowed", logged in a later test of the process."""
    yield
    for socket in list(Socket.opened):
        with contextlib.suppress(Exception):  # a socket the application already closed
            socket.close()
    Socket.opened.clear()


def _emit(graph: str, thread_id: Any, action: str = "task.opened") -> None:
    """A domain change as services make it: an audit row, published on commit."""
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label="test",
            action=action,
            subject_type="task",
            subject_id=uuid.uuid4(),
            thread_id=thread_id,
            graph=graph,
        )


def _socket_routes() -> list[str]:
    """Every websocket route a page opens (``console.routing``): its pattern, ids still to fill."""
    from console.routing import websocket_urlpatterns

    return [
        str(entry.pattern)
        for entry in websocket_urlpatterns
        if getattr(entry.callback, "consumer_class", None) is not consumers.NoSuchSocket
    ]


@pytest.mark.parametrize("route", _socket_routes())
def test_an_anonymous_socket_is_refused(loop, route):
    """Every socket route, a new one included: refused before anything is looked up."""
    path = "/" + re.sub(r"<(?:\w+:)?\w+>", str(uuid.uuid4()), route)
    socket = Socket(loop, path, [ORIGIN])
    connected, code = socket.connect()
    assert not connected and code == 4401


@pytest.mark.parametrize("path", ["/ws/nope/", "/ws/tasks/not-a-uuid/", "/anything", "/ws/inbox/extra/"])
def test_a_socket_to_a_path_no_page_opens_is_refused_not_an_error(personas, loop, path):
    """Channels' router raised for an unknown path: daphne answered the handshake with a 500."""
    for headers in ([ORIGIN], [ORIGIN, _cookie(personas["reviewer"])]):
        connected, code = Socket(loop, path, headers).connect()
        assert not connected and code == 4404, (path, headers)


def test_a_foreign_origin_is_refused(personas, loop):
    socket = Socket(loop, "/ws/inbox/", [(b"origin", b"https://evil.example"), _cookie(personas["reviewer"])])
    connected, _ = socket.connect()
    assert not connected


def test_an_outsider_cannot_subscribe_to_the_inbox_or_a_thread(personas, loop):
    task = task_make()
    for path in (
        "/ws/inbox/",
        "/ws/threads/",
        "/ws/dashboard/",
        f"/ws/threads/{task.thread_id}/",
        f"/ws/tasks/{task.pk}/",
    ):
        connected, code = Socket(loop, path, [ORIGIN, _cookie(personas["outsider"])]).connect()
        assert not connected and code == 4403, path


def test_a_reviewer_cannot_subscribe_to_a_thread_of_a_graph_it_is_not_assigned_to(personas, loop):
    task = task_make(graph="kyc_onboarding")
    socket = Socket(loop, f"/ws/threads/{task.thread_id}/", [ORIGIN, _cookie(personas["loan_reviewer"])])
    connected, code = socket.connect()
    assert not connected and code == 4403


def test_settle_waits_for_no_run_that_nothing_will_execute(personas, loop, live_worker):
    """A ``running`` run with no lease is a row a test wrote by hand: no worker executes it and no sweeper
    sends it. ``settle`` waited for it, and every live-list test after the test that left one failed (CI)."""
    thread = Thread.objects.create(graph="loan_approval")
    orphan = Run.objects.create(thread=thread, kind="resume", status=RunStatus.RUNNING)
    assert orphan.lease_expires_at is None
    socket = Socket(loop, "/ws/inbox/", [ORIGIN, _cookie(personas["reviewer"])])
    try:
        assert socket.connect()[0]
        socket.settle()  # returns at once; waiting for the orphan would fail after 60 s (scaled)
    finally:
        runs_settle([orphan.pk])
    socket.close()


def test_the_inbox_socket_sends_the_list_on_connect_and_after_events(personas, loop):
    marker = uuid.uuid4().hex[:8]
    socket = Socket(loop, f"/ws/inbox/?q={marker}", [ORIGIN, _cookie(personas["loan_reviewer"])])
    connected, _ = socket.connect()
    assert connected
    first = socket.receive()
    assert 'id="inbox-results"' in first and 'hx-swap-oob="true"' in first  # catch-up on (re)connect
    assert "data-task-id" not in first

    # An event on a graph the reviewer is not assigned to never reaches it.
    kyc = task_make(graph="kyc_onboarding", metadata={"case": marker})
    socket.settle()
    _emit("kyc_onboarding", kyc.thread_id)
    assert socket.nothing()

    loan = task_make(metadata={"case": marker})
    _emit("loan_approval", loan.thread_id)
    update = socket.receive()
    assert f'data-task-id="{loan.pk}"' in update
    assert f'data-task-id="{kyc.pk}"' not in update
    socket.close()


def test_bursts_of_events_are_coalesced_into_one_render(personas, loop, monkeypatch):
    # The race is controlled, not hoped for: the window is wider than any scheduling delay on a
    # loaded machine, and the burst is one commit (as a run's bookkeeping is), published together.
    monkeypatch.setattr(consumers, "DEBOUNCE_SECONDS", scaled(0.5))
    task = task_make()
    socket = Socket(loop, f"/ws/tasks/{task.pk}/", [ORIGIN, _cookie(personas["reviewer"])])
    assert socket.connect()[0]
    socket.receive()
    with transaction.atomic():
        for action in ("run.claimed", "task.opened", "run.interrupted"):
            audit_record(
                actor=None,
                actor_label="test",
                action=action,
                subject_type="task",
                subject_id=uuid.uuid4(),
                thread_id=task.thread_id,
                graph="loan_approval",
            )
    assert 'id="task-live"' in socket.receive()
    assert socket.nothing(1.0)
    socket.close()


def test_a_render_that_fails_after_an_event_is_logged_and_the_page_reconnects(personas, loop, monkeypatch, caplog):
    """A render an event causes runs in a task nobody awaits: its failure is logged where it happens, naming
    the page and reader, and the socket closes with 1011, which the page's socket answers by reconnecting (its
    render on connect catches it up). It used to stay open on a stale render, the error surfacing only when
    the task was garbage-collected, as an ERROR in whatever ran then."""
    task = task_make()
    reviewer = personas["reviewer"]
    socket = Socket(loop, f"/ws/tasks/{task.pk}/", [ORIGIN, _cookie(reviewer)])
    assert socket.connect()[0]
    socket.receive()
    socket.settle()

    def broken(self: Any, user: Any) -> Any:
        raise RuntimeError("the render broke")

    monkeypatch.setattr(consumers.TaskConsumer, "context", broken)
    with caplog.at_level(logging.ERROR, logger="console.consumers"):
        _emit("loan_approval", task.thread_id, "task.claimed")
        closed = socket.output()
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_RENDER_FAILED}
    failed = [r for r in caplog.records if r.name == "console.consumers"]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert failed[0].getMessage() == f"live render of /ws/tasks/{task.pk}/ for user {reviewer.user.pk} failed"
    socket.close()


def _opened(task: Any) -> None:
    """A task opening, as the worker records it: the event names the task."""
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label="test",
            action="task.opened",
            subject_type="task",
            subject_id=task.pk,
            thread_id=task.thread_id,
            graph=task.graph,
        )


def _inbox_and_task(loop: asyncio.AbstractEventLoop, persona: Any) -> tuple[Socket, Any]:
    """A reviewer's inbox socket narrowed to a new task's case (its first render read), and the task,
    with nothing left to arrive: the task's own opening is for the test to send."""
    marker = uuid.uuid4().hex[:8]
    socket = Socket(loop, f"/ws/inbox/?q={marker}", [ORIGIN, _cookie(persona)])
    assert socket.connect()[0]
    socket.receive()
    task = task_make(metadata={"case": marker})
    socket.settle()
    return socket, task


def test_an_opened_task_reaches_the_inbox_as_its_row_first_then_the_whole_list(personas, loop):
    socket, task = _inbox_and_task(loop, personas["reviewer"])
    _opened(task)
    row = socket.receive()
    assert row.startswith('<tbody hx-swap-oob="afterbegin:#inbox-rows">')
    assert f'data-task-id="{task.pk}"' in row and 'id="inbox-results"' not in row
    whole = socket.receive()
    assert 'id="inbox-results"' in whole and f'data-task-id="{task.pk}"' in whole
    assert socket.nothing()
    socket.close()


@pytest.mark.parametrize(
    "query", ["q={other}", "q={marker}&sort=oldest", "q={marker}&cursor=zzz", "q={marker}&graph=x"]
)
def test_a_row_goes_out_alone_only_where_the_list_shows_it_at_the_top(personas, loop, query):
    marker, other = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
    path = "/ws/inbox/?" + query.format(marker=marker, other=other)
    socket = Socket(loop, path, [ORIGIN, _cookie(personas["reviewer"])])
    assert socket.connect()[0]
    socket.receive()
    task = task_make(metadata={"case": marker})
    socket.settle()
    _opened(task)
    assert 'id="inbox-results"' in socket.receive(), "only the whole list, re-rendered"
    assert socket.nothing()
    socket.close()


def test_run_progress_does_not_re_render_the_inbox(personas, loop):
    task = task_make()
    socket = Socket(loop, "/ws/inbox/", [ORIGIN, _cookie(personas["reviewer"])])
    assert socket.connect()[0]
    socket.receive()
    socket.settle()
    for action in ("run.claimed", "run.interrupted", "thread.started", "effect.executed"):
        _emit("loan_approval", task.thread_id, action)
    assert socket.nothing()
    socket.close()


def test_an_event_during_a_render_is_not_lost(personas, loop, monkeypatch):
    """The render an event caused has read the database; a second event arrives before it is sent:
    one more render follows, with what the second event changed."""
    marker = uuid.uuid4().hex[:8]
    socket = Socket(loop, f"/ws/inbox/?q={marker}", [ORIGIN, _cookie(personas["reviewer"])])
    assert socket.connect()[0]
    socket.receive()
    socket.settle()
    read, release = threading.Event(), threading.Event()
    context = consumers.InboxConsumer.context

    def held(self: Any, user: Any) -> Any:
        ctx = context(self, user)
        if not read.is_set():
            read.set()
            assert release.wait(scaled(10))
        return ctx

    arrived: set[str] = set()
    live_event = consumers.InboxConsumer.live_event

    async def spied(self: Any, event: dict[str, Any]) -> None:
        await live_event(self, event)
        arrived.add(str(event.get("thread")))

    monkeypatch.setattr(consumers.InboxConsumer, "context", held)
    monkeypatch.setattr(consumers.InboxConsumer, "live_event", spied)
    first = task_make(metadata={"case": marker})
    _emit("loan_approval", first.thread_id, "task.claimed")
    assert read.wait(scaled(10)), "the first render started"
    second = task_make(metadata={"case": marker})
    _emit("loan_approval", second.thread_id, "task.claimed")
    wait_for(lambda: str(second.thread_id) in arrived, timeout=10, what="the second event, mid-render")
    release.set()
    # Tasks open through the services, so each also pushes its own row (a <tbody> fragment) at once;
    # only a full list render (the <section>) is the re-render the mid-render event must cause.
    renders: list[str] = []

    def rendered_with_second() -> bool:
        message = socket.receive()
        if 'id="inbox-results"' in message:
            renders.append(message)
        return f'data-task-id="{second.pk}"' in (renders[-1] if renders else "")

    wait_for(rendered_with_second, timeout=20, what="a full render with the second task")
    held_render = renders[0]
    assert f'data-task-id="{first.pk}"' in held_render and f'data-task-id="{second.pk}"' not in held_render
    socket.close()


def test_the_thread_socket_pushes_the_status_after_a_change(personas, loop):
    task = task_make()
    socket = Socket(loop, f"/ws/threads/{task.thread_id}/", [ORIGIN, _cookie(personas["auditor"])])
    assert socket.connect()[0]
    assert "Waiting for a decision" in socket.receive()
    task.thread.status = "completed"
    task.thread.save(update_fields=["status"])
    _emit("loan_approval", task.thread_id, "thread.completed")
    assert "Completed" in socket.receive()
    socket.close()


def test_the_thread_socket_pushes_the_current_state_card_only_to_a_page_showing_it(personas, loop):
    """The "Current state" card said "No checkpoint yet" beside a live timeline of four checkpoints."""
    task = task_make()
    current = Socket(loop, f"/ws/threads/{task.thread_id}/", [ORIGIN, _cookie(personas["auditor"])])
    past = Socket(
        loop, f"/ws/threads/{task.thread_id}/?checkpoint={task.checkpoint_id}", [ORIGIN, _cookie(personas["auditor"])]
    )
    assert current.connect()[0] and past.connect()[0]
    card = '<section id="checkpoint-view" class="card" aria-labelledby="cp-h" hx-swap-oob="true">'
    assert card in current.receive()
    assert "checkpoint-view" not in past.receive()  # a past checkpoint's card stays as the page drew it
    current.close()
    past.close()


def _close(socket: Socket, *, unseen: str = "") -> dict[str, Any]:
    """Read until the socket closes, and return the close.

    A push already in flight, rendered before the change under test, may still arrive first (on a
    busy machine an earlier event's render can outlast any quiet period a test waits for); none may
    contain ``unseen``."""
    deadline = time.monotonic() + scaled(15)
    while True:
        output = socket.output()
        if output["type"] == "websocket.close":
            return dict(output)
        assert not unseen or unseen not in output.get("text", ""), "a render made after the change got through"
        assert time.monotonic() < deadline, f"still open, still sending: {output}"


def _closes_showing_nothing_new(socket: Socket, thread_id: Any) -> dict[str, Any]:
    """After the reader lost the right to see (signed out, deactivated, expired): mark the thread with
    what only a render made from now on would show, emit an event, and read until the socket closes."""
    mark = f"rendered-after-the-change-{uuid.uuid4().hex}"
    Thread.objects.filter(pk=thread_id).update(error=mark)
    _emit("loan_approval", thread_id)
    return _close(socket, unseen=mark)


def test_a_signed_out_session_stops_receiving(personas, loop):
    cookie, client = _signed_in(personas["reviewer"].user)
    task = task_make()
    assert live.publisher_flush()  # the new task's own events reach Redis before the socket subscribes
    socket = Socket(loop, f"/ws/tasks/{task.pk}/", [ORIGIN, cookie])
    assert socket.connect()[0]
    socket.receive()
    socket.settle()
    client.logout()
    assert _closes_showing_nothing_new(socket, task.thread_id) == {"type": "websocket.close", "code": 4401}


def _signed_in_socket(loop: asyncio.AbstractEventLoop, user: Any, path: str) -> tuple[Socket, Client]:
    cookie, client = _signed_in(user)
    assert live.publisher_flush()  # what happened before it connects (a task just made) is not pushed to it
    socket = Socket(loop, path, [ORIGIN, cookie])
    assert socket.connect()[0]
    socket.receive()
    socket.settle()
    return socket, client


def test_a_deactivated_reviewer_stops_receiving(loop):
    reviewer = person()
    task = task_make()
    socket, _ = _signed_in_socket(loop, reviewer, f"/ws/tasks/{task.pk}/")
    User.objects.filter(pk=reviewer.pk).update(is_active=False)
    assert _closes_showing_nothing_new(socket, task.thread_id) == {"type": "websocket.close", "code": 4401}


def test_an_expired_session_stops_receiving(loop):
    reviewer = person()
    task = task_make()
    socket, client = _signed_in_socket(loop, reviewer, f"/ws/tasks/{task.pk}/")
    Session.objects.filter(pk=client.cookies["sessionid"].value).update(expire_date=timezone.now())
    assert _closes_showing_nothing_new(socket, task.thread_id) == {"type": "websocket.close", "code": 4401}


def test_the_socket_checks_its_reader_in_one_statement_through_the_real_stack(loop, monkeypatch):
    """Channels wraps scope["user"] and scope["session"] in lazy objects; the one-statement check
    (``_reader_fresh``) must see through them, or every push pays the two-query ORM path."""
    fresh = []
    real = consumers._reader_fresh
    monkeypatch.setattr(consumers, "_reader_fresh", lambda *a: fresh.append(a) or real(*a))
    reviewer = person()
    task = task_make()
    socket, _ = _signed_in_socket(loop, reviewer, f"/ws/tasks/{task.pk}/")
    assert len(fresh) == 1  # the render on connect
    User.objects.filter(pk=reviewer.pk).update(first_name="Renamed")
    _emit("loan_approval", task.thread_id)
    socket.receive()
    assert len(fresh) == 2
    assert fresh[-1][2].first_name == "Renamed"  # a changed user row is re-read, not served stale
    socket.close()


def test_a_rolled_back_change_publishes_nothing(personas, loop):
    task = task_make()
    socket = Socket(loop, f"/ws/tasks/{task.pk}/", [ORIGIN, _cookie(personas["reviewer"])])
    assert socket.connect()[0]
    socket.receive()
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_record(
            actor=None,
            actor_label="test",
            action="task.opened",
            subject_type="task",
            subject_id=task.pk,
            thread_id=task.thread_id,
            graph="loan_approval",
        )
        raise RuntimeError("boom")
    assert socket.nothing()
    socket.close()


# --- the embedded-mode relay -----------------------------------------------------------------


def test_relay_signatures_are_checked_and_expire():
    body = b'{"type":"live.event"}'
    now = int(time.time())
    assert live.relay_verify(body, live.relay_sign(body, now))
    assert not live.relay_verify(body + b" ", live.relay_sign(body, now))
    assert not live.relay_verify(body, live.relay_sign(body, now - 600))
    assert not live.relay_verify(body, "t=abc,v1=00")
    assert not live.relay_verify(body, "")


@override_settings(REDIS_URL="", GATEHOUSE_LIVE_RELAY_URL="http://127.0.0.1:1/internal/live/")
def test_the_relay_endpoint_delivers_signed_events_and_refuses_others(personas, loop):
    task = task_make()
    socket = Socket(loop, f"/ws/tasks/{task.pk}/", [ORIGIN, _cookie(personas["reviewer"])])
    assert socket.connect()[0]
    socket.receive()
    event = {
        "type": live.EVENT_TYPE,
        "id": 1,
        "action": "task.claimed",
        "graph": "loan_approval",
        "thread": str(task.thread_id),
        "subject_type": "task",
        "subject_id": str(task.pk),
    }
    body = json.dumps(event).encode()
    client = Client(enforce_csrf_checks=True)
    forged = client.post(
        "/internal/live/", body, content_type="application/json", headers={live.RELAY_HEADER: "t=1,v1=00"}
    )
    assert forged.status_code == 403
    assert socket.nothing(0.4)
    signed = client.post(
        "/internal/live/",
        body,
        content_type="application/json",
        headers={live.RELAY_HEADER: live.relay_sign(body, int(time.time()))},
    )
    assert signed.status_code == 204
    assert 'id="task-live"' in socket.receive()
    odd = json.dumps({**event, "html": "<script>"}).encode()
    refused = client.post(
        "/internal/live/",
        odd,
        content_type="application/json",
        headers={live.RELAY_HEADER: live.relay_sign(odd, int(time.time()))},
    )
    assert refused.status_code == 400
    socket.close()


def test_the_relay_endpoint_does_not_exist_when_redis_carries_events():
    assert Client().post("/internal/live/", b"{}", content_type="application/json").status_code == 404


def test_a_revoked_graph_stops_reaching_an_open_inbox(loop):
    """A reviewer whose assignment to a graph is withdrawn sees the list without its rows at once, on a
    tab left open, and gets none of its events after: the socket leaves the graph's group."""
    from approvals.models import GraphAssignment

    marker = uuid.uuid4().hex[:8]
    reviewer = person(graphs=("loan_approval",))
    socket, _ = _signed_in_socket(loop, reviewer, f"/ws/inbox/?q={marker}")
    before = task_make(metadata={"case": marker})
    socket.settle()
    _opened(before)
    assert f'data-task-id="{before.pk}"' in socket.receive(), "the row, while assigned"
    assert f'data-task-id="{before.pk}"' in socket.receive(), "the list, while assigned"
    GraphAssignment.objects.filter(user=reviewer).delete()
    shown = socket.receive()
    assert 'id="inbox-results"' in shown and f'data-task-id="{before.pk}"' not in shown, "re-rendered at once"
    after = task_make(metadata={"case": marker})
    socket.settle()
    _opened(after)
    assert socket.nothing(), "the graph's events no longer reach the socket"
    socket.close()


def test_a_graph_granted_reaches_an_open_inbox_without_reconnecting(loop):
    """The other way round: a reviewer assigned to a graph while the inbox is open gets its new rows."""
    from approvals.models import GraphAssignment

    marker = uuid.uuid4().hex[:8]
    reviewer = person(graphs=())
    socket, _ = _signed_in_socket(loop, reviewer, f"/ws/inbox/?q={marker}")
    task_make(metadata={"case": marker})
    socket.settle()
    GraphAssignment.objects.create(user=reviewer, graph="loan_approval", gate="")
    assert 'id="inbox-results"' in socket.receive(), "re-rendered on the grant, now in the graph's group"
    task = task_make(metadata={"case": marker})
    socket.settle()
    _opened(task)
    row = socket.receive()
    assert row.startswith('<tbody hx-swap-oob="afterbegin:#inbox-rows">') and f'data-task-id="{task.pk}"' in row
    assert f'data-task-id="{task.pk}"' in socket.receive(), "then the whole list"
    socket.close()


def test_a_role_losing_its_permission_closes_its_members_open_inboxes(loop):
    """A change to a role itself (not to one user) reaches every socket, which re-checks its reader."""
    from django.contrib.auth.models import Group, Permission

    role = Group.objects.create(name=f"readers-{uuid.uuid4().hex[:8]}")
    view = Permission.objects.get(codename="view_approvaltask", content_type__app_label="approvals")
    role.permissions.add(view)
    reader = person(role=None)
    reader.groups.add(role)
    socket, _ = _signed_in_socket(loop, reader, "/ws/inbox/")
    task = task_make()
    socket.settle()
    _opened(task)
    assert f'data-task-id="{task.pk}"' in socket.receive(), "seen while the role may read tasks"
    socket.settle()
    role.permissions.remove(view)
    shown = socket.receive()
    assert 'id="inbox-results"' in shown and "data-task-id" not in shown, "the list, as the reader may see it now"
    assert socket.output() == {"type": "websocket.close", "code": consumers.CLOSE_FORBIDDEN}


def test_a_signed_out_reader_s_socket_closes_at_once(loop):
    reviewer = person()
    socket, client = _signed_in_socket(loop, reviewer, "/ws/inbox/")
    socket.settle()
    client.post("/accounts/logout/")
    # Closed without waiting for an event; a list rendered before the sign-out may still be on its way.
    assert _close(socket) == {"type": "websocket.close", "code": consumers.CLOSE_UNAUTHENTICATED}


def test_a_sign_out_closes_only_that_session_s_pages(loop):
    # The sign-out ends the signed-out session (approvals.security), not the reader's other ones.
    reviewer = person()
    task = task_make()
    leaving, leaving_client = _signed_in_socket(loop, reviewer, f"/ws/tasks/{task.pk}/")
    staying, _ = _signed_in_socket(loop, reviewer, f"/ws/tasks/{task.pk}/")
    leaving_client.post("/accounts/logout/")
    assert _close(leaving) == {"type": "websocket.close", "code": consumers.CLOSE_UNAUTHENTICATED}
    mark = f"still-signed-in-{uuid.uuid4().hex}"
    Thread.objects.filter(pk=task.thread_id).update(error=mark)
    _emit("loan_approval", task.thread_id)
    deadline = time.monotonic() + scaled(15)
    while mark not in (shown := staying.receive()):  # renders for the sign-out itself may come first
        assert 'id="task-live"' in shown
        assert time.monotonic() < deadline, "the other session's page never showed the change"
    staying.close()


def test_a_withdrawn_role_stops_a_task_page_streaming(loop):
    reviewer = person()
    task = task_make()
    socket, _ = _signed_in_socket(loop, reviewer, f"/ws/tasks/{task.pk}/")
    reviewer.groups.clear()
    _emit("loan_approval", task.thread_id)
    shown = socket.receive()
    assert 'id="live-gone"' in shown and 'id="task-live"' not in shown, shown[:500]
    # Closed as a withdrawn watch is: the page's indicator no longer says "live" under the notice.
    assert socket.output() == {"type": "websocket.close", "code": consumers.CLOSE_FORBIDDEN}


def test_a_commands_last_event_reaches_open_pages_before_it_exits(personas, loop):
    """A management command (or a script) that records a change and exits at once: its event is sent
    before the process ends (the publisher drains at exit), not lost with its thread."""
    socket, task = _inbox_and_task(loop, personas["reviewer"])
    code = (
        "from django.db import transaction\n"
        "from approvals.audit import audit_record\n"
        "with transaction.atomic():\n"
        f"    audit_record(actor=None, actor_label='cli', action='task.opened', subject_type='task', "
        f"subject_id='{task.pk}', thread_id='{task.thread_id}', graph='{task.graph}')\n"
    )
    db = connection.settings_dict
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = socket.receive()
    assert f'data-task-id="{task.pk}"' in row, row[:300]
    socket.close()


def test_the_bulk_page_follows_each_resumed_run_to_its_outcome(personas, loop, monkeypatch, fake_resumes_closed):  # noqa: F811
    """The Thread column said "resuming" for as long as the page stayed open; a reload said "resumed: completed"."""
    from approvals import bulk
    from approvals.services import Signer

    monkeypatch.setattr(bulk, "bulk_dispatch", lambda *, bulk_id: None)  # the test takes each step
    # The resumes stay queued until the test finishes them: the session's worker (started by other tests
    # in this process) would otherwise take them and fail them first, graphless factory threads that
    # they are, and no render would say "resuming".
    monkeypatch.setattr(runtime_runs, "run_dispatch", lambda *, run_id: None)
    tasks = [task_make(), task_make()]
    with transaction.atomic():
        action = bulk.bulk_decide(
            actor=personas["approver"].user,
            outcome="approve",
            reason="",
            task_ids=[str(t.pk) for t in tasks],
            filter=None,
            signer=Signer(authenticated_at=timezone.now()),
        )
    socket = Socket(loop, f"/ws/bulk/{action.pk}/", [ORIGIN, _cookie(personas["approver"])])
    assert socket.connect()[0]
    socket.settle()
    # Decided after the page opened: the page learns of each thread from the bulk's progress.
    bulk.bulk_run(bulk_id=action.pk)
    _received_until(socket, lambda html: html.count("resuming") == 2, "both decided rows")
    socket.settle()

    for task in tasks:
        run = Run.objects.get(decisions__task=task)
        Run.objects.filter(pk=run.pk).update(status="succeeded", finished_at=timezone.now())
        _emit("loan_approval", task.thread_id, "run.succeeded")  # as the worker publishes its outcome
    _received_until(socket, lambda html: html.count("resumed: completed") == 2, "both runs' outcomes")
    socket.close()


def _received_until(socket: Socket, wanted: Any, what: str, timeout: float = 20) -> str:
    """The first render ``wanted`` accepts, among those the socket receives within ``timeout``."""
    deadline = time.monotonic() + scaled(timeout)
    seen = ""
    while time.monotonic() < deadline:
        seen = socket.receive(timeout=max(0.1, deadline - time.monotonic()) / scaled(1))
        if wanted(seen):
            return seen
    raise AssertionError(f"no render with {what}; the last: {seen[:2000]}")


def test_the_thread_page_s_time_travel_card_follows_the_run_in_progress(personas, loop):
    """It said "A run is in progress… (reload this page)", buttons disabled, beside a live status card that
    had moved on to "Waiting for a decision"."""
    task = task_make()
    run = Run.objects.create(thread=task.thread, kind="resume", status="queued")
    path = f"/ws/threads/{task.thread_id}/?checkpoint={task.checkpoint_id}"  # the page of the task's checkpoint
    socket = Socket(loop, path, [ORIGIN, _cookie(personas["operator"])])
    assert socket.connect()[0]
    first = socket.receive()
    assert 'id="time-travel-status" data-busy="1" hx-swap-oob="true"' in first and "A run is in progress" in first
    assert 'id="branch-tree"' in first

    Run.objects.filter(pk=run.pk).update(status="succeeded", finished_at=timezone.now())
    _emit("loan_approval", task.thread_id, "run.succeeded")
    html = _received_until(socket, lambda html: 'id="time-travel-status" data-busy=""' in html, "the run finished")
    assert "A run is in progress" not in html
    socket.close()


def test_a_socket_drawn_for_one_user_refuses_the_session_of_another(loop, personas):
    """Signed out and in as reviewer2 in another tab, reviewer's open page reconnected on focus and showed
    reviewer2's view under reviewer's name (an outside tester). The page's socket names whom it was drawn for."""
    reviewer, other = personas["reviewer"].user, personas["reviewer2"].user
    task = task_make()
    for path in ("/ws/inbox/", f"/ws/tasks/{task.pk}/"):
        mine = Socket(loop, f"{path}?reader={reviewer.pk}", [_cookie(personas["reviewer"]), ORIGIN])
        assert mine.connect()[0], path
        mine.close()
        theirs = Socket(loop, f"{path}?reader={reviewer.pk}", [_cookie(personas["reviewer2"]), ORIGIN])
        connected, code = theirs.connect()
        assert (connected, code) == (False, 4409), path
    assert other.pk != reviewer.pk


def test_a_task_page_whose_graph_is_withdrawn_says_so_and_stops_being_live(loop):
    """An outside tester revoked a reviewer's graph (``user_revoke --graph``) under an open task page: the page
    said "no longer available" but its socket stayed open and its indicator "live"."""
    from approvals.models import GraphAssignment

    reviewer = person(graphs=("loan_approval", "kyc_onboarding"))  # still a reviewer of another graph
    task = task_make()
    socket, _ = _signed_in_socket(loop, reviewer, f"/ws/tasks/{task.pk}/")
    # Withdrawn without its announcement reaching the page (a command in another process whose relay was
    # down): the page learns at its next push, which renders "no longer available".
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {GraphAssignment._meta.db_table} WHERE user_id = %s AND graph = %s",
            [reviewer.pk, "loan_approval"],
        )
    _emit("loan_approval", task.thread_id)
    deadline = time.monotonic() + scaled(15)
    while 'id="live-gone"' not in (shown := socket.receive()):
        assert time.monotonic() < deadline, "the page never said the view is gone"
    assert _close(socket) == {"type": "websocket.close", "code": consumers.CLOSE_FORBIDDEN}, shown[:300]
