"""Two sides racing for one task's lock, made to collide on purpose instead of by timing.

The first side does its work in a transaction it keeps open (holding the row locks it took) until the
database shows the second side waiting for a lock; only then does the first commit and the second go on.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connection, transaction

from tests.conftest import scaled, session_waits_on_lock, wait_for


class Side(threading.Thread):
    """Runs ``work`` on its own database connection; remembers its backend pid, result and error. ``settings``:
    the session's own (``deadlock_timeout``, say), set before ``work`` and reset before the connection goes
    back to the pool."""

    def __init__(self, work: Callable[[], Any], *, settings: dict[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.settings = settings or {}
        self.pid: int | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
                for name, value in self.settings.items():
                    cursor.execute("SELECT set_config(%s, %s, false)", [name, value])
            self.ready.set()
            self.result = self.work()
        except BaseException as exc:  # reported to the test thread
            self.error = exc
        finally:
            self.ready.set()
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                for name in self.settings:
                    cursor.execute(f"RESET {name}")
            connection.close()

    def queued(self, what: str) -> Side:
        """Wait until this side waits for a lock (the test holds it); fails if it finished without waiting."""
        wait_for(lambda: session_waits_on_lock(self.pid) or not self.is_alive(), timeout=60, what=what)
        assert self.is_alive(), f"finished without waiting for the lock: {self.error or self.result!r}"
        return self

    def outcome(self) -> Any:
        """What ``work`` returned, once it has finished; what it raised is raised here."""
        self.join(scaled(60))
        assert not self.is_alive(), "the side did not finish"
        if self.error is not None:
            raise self.error
        return self.result


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
    two.queued("the second side to wait for the first's lock")
    release.set()
    one.join(scaled(30))
    two.join(scaled(30))
    assert not one.is_alive() and not two.is_alive(), "a side did not finish"
    return one, two
