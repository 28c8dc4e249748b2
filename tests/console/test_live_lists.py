"""The threads list and the team dashboard, live: who may subscribe, what re-renders them, and what not.

Real Channels stack (``console.asgi.application``) over the Redis channel layer, as in test_live.py,
whose socket helpers these tests share.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import transaction

from approvals.audit import audit_record
from console import consumers, live
from runtime.models import Thread
from tests.approvals.handoffs import person
from tests.conftest import scaled, wait_for
from tests.console.test_live import (  # noqa: F401 - fixtures
    ORIGIN,
    Socket,
    _cookie,
    _emit,
    _signed_in_socket,
    _sockets_closed,
    loop,
)
from tests.factories import task_make, thread_make

pytestmark = pytest.mark.usefixtures("live_db")


def _list(loop: Any, persona: Any, query: str) -> Socket:  # noqa: F811 - loop is the shared fixture
    """A threads-list socket with ``query`` (the page's own), its first render read and nothing pending."""
    assert live.publisher_flush()  # what happened before it connects is not pushed to it
    socket = Socket(loop, f"/ws/threads/?{query}", [ORIGIN, _cookie(persona)])
    connected, code = socket.connect()
    assert connected, code
    first = socket.receive()
    assert 'id="threads-results"' in first and 'hx-swap-oob="true"' in first  # catch-up on (re)connect
    socket.settle()
    return socket


def _heard(monkeypatch: Any, consumer: type[consumers.LiveConsumer]) -> list[str]:
    """The thread of every event that reaches ``consumer``'s sockets, rendered or not."""
    heard: list[str] = []
    live_event = consumer.live_event

    async def spied(self: Any, event: dict[str, Any]) -> None:
        heard.append(str(event.get("thread")))
        await live_event(self, event)

    monkeypatch.setattr(consumer, "live_event", spied)
    return heard


def _finished(thread: Thread, status: str = "completed") -> None:
    Thread.objects.filter(pk=thread.pk).update(status=status)
    _emit(thread.graph, thread.pk, f"thread.{status}")


@pytest.mark.parametrize("path", ["/ws/threads/", "/ws/dashboard/"])
def test_an_anonymous_socket_to_a_live_list_is_refused(loop, path):  # noqa: F811
    connected, code = Socket(loop, path, [ORIGIN]).connect()
    assert not connected and code == consumers.CLOSE_UNAUTHENTICATED


@pytest.mark.parametrize(
    "path,role,allowed",
    [
        ("/ws/threads/", "outsider", False),
        ("/ws/threads/", "loan_reviewer", True),
        ("/ws/threads/", "auditor", True),
        ("/ws/dashboard/", "outsider", False),
        ("/ws/dashboard/", "reviewer", False),  # the dashboard is for leads, auditors and admins
        ("/ws/dashboard/", "auditor", True),
    ],
)
def test_who_may_subscribe_to_a_live_list(personas, loop, path, role, allowed):  # noqa: F811
    connected, code = Socket(loop, path, [ORIGIN, _cookie(personas[role])]).connect()
    assert connected is allowed, code
    if not allowed:
        assert code == consumers.CLOSE_FORBIDDEN


def test_a_started_thread_appears_on_an_open_threads_list_and_its_completion_follows(personas, loop):  # noqa: F811
    marker = uuid.uuid4().hex[:8]
    socket = _list(loop, personas["loan_reviewer"], f"q={marker}")
    thread = thread_make(metadata={"case": marker})
    _emit("loan_approval", thread.pk, "thread.started")
    started = socket.receive()
    assert f'data-thread-id="{thread.pk}"' in started and "status-completed" not in started
    _finished(thread)
    done = socket.receive()
    assert f'data-thread-id="{thread.pk}"' in done and "status-completed" in done
    socket.close()


def test_a_run_s_progress_re_renders_the_threads_list(personas, loop):  # noqa: F811
    """The reported bug: a thread read "running" long after it finished, until a reload."""
    marker = uuid.uuid4().hex[:8]
    thread = thread_make(metadata={"case": marker})
    socket = _list(loop, personas["auditor"], f"q={marker}")
    Thread.objects.filter(pk=thread.pk).update(status="failed")
    _emit("loan_approval", thread.pk, "run.failed")
    assert "status-failed" in socket.receive()
    socket.close()


def test_a_threads_list_hears_nothing_of_a_graph_its_reader_may_not_see(personas, loop, monkeypatch):  # noqa: F811
    """What reaches the consumer at all, not only what it shows: a loan reviewer's socket is in no group of
    kyc_onboarding. (Read from the consumer, so another test's events on the reader's graphs cannot blur it.)"""
    heard = _heard(monkeypatch, consumers.ThreadsConsumer)
    marker = uuid.uuid4().hex[:8]
    socket = _list(loop, personas["loan_reviewer"], f"q={marker}")
    kyc = thread_make(graph="kyc_onboarding", metadata={"case": marker})
    _emit("kyc_onboarding", kyc.pk, "thread.started")
    _finished(kyc)
    loan = thread_make(metadata={"case": marker})  # published after them: heard once they would have been
    _emit("loan_approval", loan.pk, "thread.started")
    wait_for(lambda: str(loan.pk) in heard, timeout=10, what="the loan thread's event")
    assert str(kyc.pk) not in heard
    shown = socket.receive()
    assert f'data-thread-id="{loan.pk}"' in shown and f'data-thread-id="{kyc.pk}"' not in shown
    socket.close()


def test_a_threads_list_filtered_to_a_graph_it_may_not_see_listens_to_nothing(personas, loop):  # noqa: F811
    socket = _list(loop, personas["loan_reviewer"], "graph=kyc_onboarding")
    kyc = thread_make(graph="kyc_onboarding")
    _emit("kyc_onboarding", kyc.pk, "thread.started")
    assert socket.nothing()
    socket.close()


def test_the_live_threads_list_keeps_the_page_s_filter(personas, loop):  # noqa: F811
    """The socket's query is the page's: a list of completed threads shows a thread only once it completes."""
    marker = uuid.uuid4().hex[:8]
    socket = _list(loop, personas["auditor"], f"q={marker}&status=completed")
    thread = thread_make(metadata={"case": marker})
    _emit("loan_approval", thread.pk, "thread.started")
    assert f'data-thread-id="{thread.pk}"' not in socket.receive(), "re-rendered, still filtered"
    _finished(thread)
    assert f'data-thread-id="{thread.pk}"' in socket.receive()
    socket.close()


@pytest.mark.parametrize(
    "action,graph_group,threads_list,dashboard,inbox",
    [
        ("thread.started", True, True, False, False),
        ("run.claimed", True, True, False, False),
        ("run.succeeded", True, True, False, False),
        ("run.failed", True, True, False, False),
        ("thread.completed", True, True, False, True),
        ("thread.cancelled", True, True, True, True),
        ("task.opened", True, True, True, True),
        ("decision.made", True, True, True, True),
        ("task.claimed", True, False, False, True),
        ("comment.posted", True, False, False, True),
        ("effect.executed", False, False, False, False),
    ],
)
def test_which_live_page_renders_for_which_action(action, graph_group, threads_list, dashboard, inbox):
    """Every action of a graph reaches its group but effects; each list renders only for what can change it."""
    event = {"action": action, "graph": "loan_approval", "thread": str(uuid.uuid4())}
    assert (live.graph_group("loan_approval") in live.groups_for(event)) is graph_group
    for consumer, renders in (
        (consumers.ThreadsConsumer, threads_list),
        (consumers.DashboardConsumer, dashboard),
        (consumers.InboxConsumer, inbox),
    ):
        assert (not live.action_in(action, consumer.unchanged_by)) is renders, consumer.__name__


def test_a_burst_of_a_thread_s_events_renders_the_threads_list_once(personas, loop, monkeypatch):  # noqa: F811
    monkeypatch.setattr(consumers.ThreadsConsumer, "debounce_seconds", scaled(0.5))
    marker = uuid.uuid4().hex[:8]
    socket = _list(loop, personas["auditor"], f"q={marker}")
    thread = thread_make(metadata={"case": marker})
    with transaction.atomic():  # as a worker records a run's start: one commit, published together
        for action in ("thread.started", "run.queued", "run.claimed"):
            audit_record(
                actor=None,
                actor_label="test",
                action=action,
                subject_type="run",
                subject_id=uuid.uuid4(),
                thread_id=thread.pk,
                graph="loan_approval",
            )
    assert f'data-thread-id="{thread.pk}"' in socket.receive()
    assert socket.nothing(1.0)
    socket.close()


# --- the team dashboard ------------------------------------------------------------------------


def _dashboard(loop: Any, persona: Any, query: str = "") -> Socket:  # noqa: F811
    assert live.publisher_flush()  # what happened before it connects is not pushed to it
    socket = Socket(loop, f"/ws/dashboard/?{query}", [ORIGIN, _cookie(persona)])
    connected, code = socket.connect()
    assert connected, code
    _refresh(socket)  # nothing is sent on connect (the page has just rendered): a reconnect asks for it
    first = socket.receive()
    assert 'id="dashboard-live"' in first and 'hx-swap-oob="true"' in first
    socket.settle()
    return socket


def _refresh(socket: Socket) -> None:
    """What console.js sends after a reconnect on a page marked ``data-live-catch-up``."""
    socket._run(socket.comm.send_to(text_data="refresh"))


def test_the_dashboard_renders_on_a_reconnect_s_request_not_on_every_connect(personas, loop):  # noqa: F811
    """Its render is a dozen aggregate queries, and the page load that opened the socket has just run them."""
    graph = f"dl_{uuid.uuid4().hex[:8]}"  # a graph of its own: no other test's events reach this socket
    task_make(graph=graph)
    assert live.publisher_flush()
    socket = Socket(loop, f"/ws/dashboard/?graph={graph}", [ORIGIN, _cookie(personas["auditor"])])
    assert socket.connect()[0]
    assert socket.nothing()
    _refresh(socket)
    assert 'data-metric="pending" data-value="1"' in socket.receive()
    socket.close()


def test_an_opened_task_re_renders_the_dashboard_after_its_longer_window(personas, loop, monkeypatch):  # noqa: F811
    monkeypatch.setattr(consumers.DashboardConsumer, "debounce_seconds", scaled(0.3))
    task = task_make()  # made before the socket opens: its own events would render it once more
    socket = _dashboard(loop, personas["auditor"], "graph=loan_approval")
    _emit("loan_approval", task.thread_id, "task.opened")
    _emit("loan_approval", task.thread_id, "decision.made")
    assert 'id="dashboard-live"' in socket.receive()
    assert socket.nothing(1.0), "two events in one window: one render"
    socket.close()


def test_a_dashboard_filtered_to_one_graph_hears_no_other(personas, loop, monkeypatch):  # noqa: F811
    monkeypatch.setattr(consumers.DashboardConsumer, "debounce_seconds", scaled(0.1))
    kyc, loan = task_make(graph="kyc_onboarding"), task_make()
    heard = _heard(monkeypatch, consumers.DashboardConsumer)
    socket = _dashboard(loop, personas["auditor"], "graph=loan_approval")
    _emit("kyc_onboarding", kyc.thread_id, "task.opened")
    _emit("loan_approval", loan.thread_id, "task.opened")  # published after it: heard once it would have been
    wait_for(lambda: str(loan.thread_id) in heard, timeout=10, what="the loan task's event")
    assert str(kyc.thread_id) not in heard
    socket.close()


def test_a_revoked_graph_leaves_an_open_threads_list_at_once(loop):  # noqa: F811
    """An access change re-decides the list's groups and re-renders it (``LiveConsumer.access_changed``)."""
    from approvals.models import GraphAssignment

    marker = uuid.uuid4().hex[:8]
    reader = person(graphs=("loan_approval",))
    thread = thread_make(metadata={"case": marker})
    socket, _ = _signed_in_socket(loop, reader, f"/ws/threads/?q={marker}")
    GraphAssignment.objects.filter(user=reader).delete()
    shown = socket.receive()
    assert 'id="threads-results"' in shown and f'data-thread-id="{thread.pk}"' not in shown
    socket.close()


@pytest.mark.parametrize("persona", ["auditor", "reviewer"])  # every graph: by role, by a "*" assignment
def test_an_external_source_s_thread_appears_on_an_open_threads_list(personas, loop, persona):  # noqa: F811
    """A list that shows every graph listened to the registered ones only: an external engine's thread
    (approvals.external, graph ``external:<source>``) appeared on a reload, never live, even for a source
    whose first task came after the page opened."""
    marker = uuid.uuid4().hex[:8]
    socket = _list(loop, personas[persona], f"q={marker}")
    thread = thread_make(graph=f"external:src-{marker}", metadata={"case": marker})
    _emit(thread.graph, thread.pk, "task.opened")
    shown = socket.receive()
    assert f'data-thread-id="{thread.pk}"' in shown
    socket.close()
