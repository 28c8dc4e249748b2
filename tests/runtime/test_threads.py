"""Thread writes between runs (runtime.threads): create, bind a graph, write state, cancel.

PostgreSQL checkpointer (the suite's database); no worker: ``run_dispatch`` is
replaced by a recorder, so a queued run stays queued.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction

from runtime import runs
from runtime.cancel import run_cancel
from runtime.models import RunKind, Thread, ThreadStatus
from runtime.runs import ThreadBusy
from runtime.state import thread_state_read
from runtime.threads import thread_cancel, thread_create, thread_graph_bind, thread_state_write

pytestmark = pytest.mark.usefixtures("live_db")


def _written(amount: int) -> Thread:
    thread = thread_create(graph="travel_pay", metadata={}, created_by=None)
    with transaction.atomic():
        thread_state_write(thread=thread, values={"amount": amount}, as_node="prepare")
    thread.refresh_from_db()
    return thread


def test_a_thread_is_created_with_the_id_asked_for():
    wanted = uuid.uuid4()
    thread = thread_create(thread_id=wanted, graph="", metadata={"k": "v"}, created_by=None)
    assert Thread.objects.get(pk=wanted).metadata == {"k": "v"}
    assert thread.status == ThreadStatus.IDLE


def test_a_state_write_is_a_new_checkpoint_and_the_row_follows_it():
    thread = _written(5)
    first = thread.checkpoint_id
    with transaction.atomic():
        written = thread_state_write(thread=thread, values={"amount": 7}, as_node="prepare")
    thread.refresh_from_db()
    view = thread_state_read(thread)
    assert view is not None
    assert written != first
    assert thread.checkpoint_id == written == view.checkpoint_id
    assert thread.values == view.values == {"amount": 7}


def test_a_state_write_is_refused_while_a_run_is_queued_and_changes_nothing(dispatched):
    thread = _written(5)
    with transaction.atomic():
        queued = runs.run_enqueue(thread=thread, kind=RunKind.START, input={"amount": 1})
    try:
        with pytest.raises(ThreadBusy), transaction.atomic():
            thread_state_write(thread=thread, values={"amount": 9}, as_node="prepare")
        before = thread.checkpoint_id
        thread.refresh_from_db()
        assert thread.checkpoint_id == before
        assert thread.values == {"amount": 5}
    finally:  # no run left active for later tests that wait for the session's runs to settle
        with transaction.atomic():
            run_cancel(run=queued, action="interrupt", actor_label="test", reason="cleanup")


def test_a_state_write_outside_a_transaction_is_refused():
    thread = _written(5)
    with pytest.raises(RuntimeError, match="transaction"):
        thread_state_write(thread=thread, values={"amount": 9}, as_node="prepare")


def test_a_graph_is_bound_once():
    thread = thread_create(graph="", metadata={}, created_by=None)
    with transaction.atomic():
        thread_graph_bind(thread=thread, graph="travel_pay")
        thread_graph_bind(thread=thread, graph="loan_approval")
    assert thread.graph == "travel_pay"
    assert Thread.objects.get(pk=thread.pk).graph == "travel_pay"


def test_a_cancelled_thread_is_cancelled_in_the_row():
    thread = _written(5)
    with transaction.atomic():
        thread_cancel(thread=thread)
    assert Thread.objects.get(pk=thread.pk).status == ThreadStatus.CANCELLED


@pytest.mark.parametrize("insert", ["create", "row_insert"])
def test_a_new_thread_was_last_changed_when_it_was_made_to_the_microsecond(insert, monkeypatch):
    """created_at and updated_at came from two clock reads: the /lg/ API showed a new thread's state
    changed a millisecond after it was made, now and then. A clock that moves on every read makes
    the two reads differ every time."""
    from datetime import timedelta

    from django.utils import timezone

    from runtime import rows

    ticks = iter(range(1, 1000))
    real_now = timezone.now
    base = real_now()
    monkeypatch.setattr(timezone, "now", lambda: base + timedelta(microseconds=next(ticks) * 700))
    if insert == "create":
        thread = thread_create(graph="travel_pay", metadata={}, created_by=None)
    else:
        thread = rows.row_insert(Thread(graph="travel_pay", metadata={}, status=ThreadStatus.IDLE))
    stored = Thread.objects.get(pk=thread.pk)
    assert stored.updated_at == stored.created_at == thread.created_at
    # A later change still moves it.
    stored.status = ThreadStatus.BUSY
    stored.save()
    assert Thread.objects.get(pk=thread.pk).updated_at > stored.created_at
