"""``task_get_for(lock=True)`` on committed data: the task and thread rows are locked for the transaction."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError

from approvals.permissions import task_get_for
from tests.conftest import backend_pid, scaled, session_waits_on_lock, wait_for
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def test_a_locked_task_read_outside_a_transaction_is_refused_as_the_orms():
    """A lock taken in autocommit ends with its statement: it would protect nothing, so it is refused."""
    task = task_make()
    admin = User.objects.create_superuser(f"lock-{uuid.uuid4().hex[:8]}")
    assert not connection.in_atomic_block
    with pytest.raises(TransactionManagementError):
        task_get_for(admin, task.pk, lock=True)
    assert task_get_for(admin, task.pk).pk == task.pk


def test_a_locked_task_holds_its_thread_row_until_the_transaction_ends():
    """The one statement locks both rows: a writer of the thread waits for the decision's transaction."""
    task = task_make()
    admin = User.objects.create_superuser(f"lock-{uuid.uuid4().hex[:8]}")
    writer: dict[str, int] = {}
    done = threading.Event()

    def touch_thread() -> None:
        try:
            writer["pid"] = backend_pid()
            with connection.cursor() as cursor:
                cursor.execute("UPDATE runtime_thread SET updated_at = now() WHERE id = %s", [task.thread_id])
        finally:
            connection.close()
            done.set()

    with transaction.atomic():
        task_get_for(admin, task.pk, lock=True)
        other = threading.Thread(target=touch_thread)
        other.start()
        wait_for(
            lambda: "pid" in writer and session_waits_on_lock(writer["pid"]), timeout=30, what="the writer to wait"
        )
        assert not done.is_set()
    assert done.wait(scaled(30)), "the writer goes on once the lock is released"
    other.join(scaled(10))
