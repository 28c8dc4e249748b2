"""Two sides racing for one task's lock, made to collide on purpose instead of by timing.

The first side does its work in a transaction it keeps open (holding the row locks it took) until the
database shows the second side waiting for a lock; only then does the first commit and the second go on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection, transaction

from tests.conftest import scaled, session_waits_on_lock, wait_for


class Side(threading.Thread):
    """Runs ``work`` on its own database connection; remembers its backend pid, result and error."""

    def __init__(self, work: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.pid: int | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.ready.set()
            self.result = self.work()
        except BaseException as exc:  # reported to the test thread
            self.error = exc
        finally:
            self.ready.set()
            connection.close()


def second_waits_for_first(first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Side, Side]:
    """Run ``first`` and hold its transaction open until ``second`` waits for a lock ``first`` holds; then
    commit ``first`` and let ``second`` finish. Both sides, finished."""
    done, release = threading.Event(), threading.Event()

    def holding() -> Any:
        with transaction.atomic():
            result = first()
            done.set()
            assert release.wait(scaled(30)), "the test never released the first side"
        return result

    one = Side(holding)
    one.start()
    wait_for(lambda: done.is_set() or one.error is not None, what="the first side to do its work")
    assert one.error is None, one.error
    two = Side(second)
    two.start()
    assert two.ready.wait(scaled(30))
    wait_for(lambda: (two.pid and session_waits_on_lock(two.pid)) or not two.is_alive(), what="the second side to wait")
    assert two.is_alive(), f"the second side did not wait for the first's lock: {two.error or two.result!r}"
    release.set()
    one.join(scaled(30))
    two.join(scaled(30))
    assert not one.is_alive() and not two.is_alive(), "a side did not finish"
    return one, two
