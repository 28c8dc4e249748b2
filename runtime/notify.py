"""Wake waiters when a thread's run settles: PostgreSQL LISTEN/NOTIFY, with a bounded fallback poll.

Why LISTEN/NOTIFY rather than the channel layer: the notification is sent in
the same transaction that records the run's outcome (``pg_notify`` inside the
signal receivers below), so PostgreSQL delivers it exactly when — and only if —
the outcome commits; a waiter woken by it always reads the committed row. A
channel-layer message would be sent after commit from the worker, one more hop
(Redis) that can be lost between the commit and the send.

Every process that waits runs one listener thread holding one dedicated
connection (``LISTEN gatehouse_thread``; payload = the thread id), created on
first use. Waiters still re-read the database every ``FALLBACK_SECONDS``, so a
notification lost while the listener reconnects only delays them. On SQLite
(embedded) there is no NOTIFY: waiters poll every ``EMBEDDED_POLL_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.dispatch import receiver

from runtime import signals

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger(__name__)

CHANNEL = "gatehouse_thread"
FALLBACK_SECONDS = 1.0  # a lost notification delays a waiter by at most this much
EMBEDDED_POLL_SECONDS = 0.2
IDLE_SECONDS = 30.0  # a listener with no waiters this long closes its connection
LISTEN_START_SECONDS = 5.0  # a watch waits at most this long for a starting listener (then the fallback poll)


def thread_notify(thread_id: Any) -> None:
    """Tell waiters that ``thread_id`` changed, when (and if) the current transaction commits."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, str(thread_id)])


@receiver(signals.run_interrupted, dispatch_uid="runtime.notify.interrupted")
@receiver(signals.run_completed, dispatch_uid="runtime.notify.completed")
@receiver(signals.run_failed, dispatch_uid="runtime.notify.failed")
def _on_run_settled(sender: Any, run: Any, notified: bool = False, **kwargs: Any) -> None:
    if not notified:  # run_finish notifies in its own statement on PostgreSQL
        thread_notify(run.thread_id)


def _postgres() -> bool:
    return bool(settings.DATABASES["default"]["ENGINE"].endswith("postgresql"))


class _Listener:
    """One LISTEN connection per process; calls the callbacks subscribed to a thread id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[str, set[Callable[[], None]]] = {}
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()  # set while LISTEN is in effect

    def subscribe(self, thread_id: str, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.setdefault(thread_id, set()).add(callback)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gatehouse-listen", daemon=True)
                self._thread.start()

    def unsubscribe(self, thread_id: str, callback: Callable[[], None]) -> None:
        with self._lock:
            callbacks = self._callbacks.get(thread_id)
            if callbacks is not None:
                callbacks.discard(callback)
                if not callbacks:
                    del self._callbacks[thread_id]

    def _dispatch(self, thread_id: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks.get(thread_id, ()))
        for callback in callbacks:
            callback()

    def _run(self) -> None:
        import psycopg

        from runtime.checkpointer import checkpointer_conninfo

        while True:
            try:
                with psycopg.connect(
                    checkpointer_conninfo(settings.DATABASES["default"]), autocommit=True, connect_timeout=10
                ) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    idle_since = time.monotonic()
                    while True:
                        for notice in conn.notifies(timeout=5.0):
                            self._dispatch(notice.payload)
                        with self._lock:
                            if self._callbacks:
                                idle_since = time.monotonic()
                            elif time.monotonic() - idle_since > IDLE_SECONDS:
                                # Nobody waits: give the connection back; the next watch starts a listener.
                                self.listening.clear()
                                self._thread = None
                                return
            except Exception as exc:  # noqa: BLE001 - the waiters' fallback poll covers the gap
                self.listening.clear()
                with self._lock:
                    if not self._callbacks:  # nobody waits: no reconnecting for nobody; the next watch starts one
                        self._thread = None
                        return
                log.warning("LISTEN %s connection lost (%s); reconnecting", CHANNEL, exc)
                time.sleep(1.0)


_listener = _Listener()


def watchers(thread_id: Any) -> int:
    """How many watches in this process wait on ``thread_id`` now (PostgreSQL; 0 on SQLite)."""
    with _listener._lock:
        return len(_listener._callbacks.get(str(thread_id), ()))


def listener_ready(timeout: float) -> bool:
    """True once this process's LISTEN connection is up (it starts with the first watch)."""
    return _listener.listening.wait(timeout)


class WaitsEnd:
    """Ends a request's waits early: its client went away, or its server is stopping.

    The web server gives each request one (``waits_end_for``; console.request_threads), ends it on
    ``http.disconnect`` or when the server cancels the request, and every ``ThreadWatch`` the request
    waits on returns at once instead of at its timeout: a long poll whose client left gives its
    thread back, and a stopping server is not held up to a long poll's whole timeout.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended = False
        self._wakes: set[Callable[[], None]] = set()

    @property
    def ended(self) -> bool:
        return self._ended

    def end(self) -> None:
        with self._lock:
            self._ended = True
            wakes = list(self._wakes)
        for wake in wakes:
            wake()

    def subscribe(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakes.add(wake)
            ended = self._ended
        if ended:
            wake()

    def unsubscribe(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakes.discard(wake)


_waits_end: contextvars.ContextVar[WaitsEnd | None] = contextvars.ContextVar("gatehouse_waits_end", default=None)


_no_waiting: contextvars.ContextVar[bool] = contextvars.ContextVar("gatehouse_no_waiting", default=False)


@contextlib.contextmanager
def waits_skipped() -> Iterator[None]:
    """Within it, a long poll answers at once what it would answer at its timeout: a HEAD of a GET that waits
    (its headers are all the client gets; the wait held the request for a body nobody reads)."""
    token = _no_waiting.set(True)
    try:
        yield
    finally:
        _no_waiting.reset(token)


def wait_bounded(seconds: float) -> float:
    """How long a long poll may wait: ``seconds``, or not at all inside ``waits_skipped``."""
    return 0.0 if _no_waiting.get() else seconds


def waits_end_for(end: WaitsEnd) -> contextvars.Token[WaitsEnd | None]:
    """Tie the waits of the current context (a request, and the threads it runs on) to ``end``."""
    return _waits_end.set(end)


def waits_end_reset(token: contextvars.Token[WaitsEnd | None]) -> None:
    _waits_end.reset(token)


def connection_give_back() -> None:
    """This thread's pooled database connection back to the pool, unless a transaction is open on it:
    the caller is about to wait, and its next query takes one out again."""
    if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
        connection.close()


def between_waits(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """``sync_to_async(fn)`` for an async view that waits between its database calls (a long poll, a
    stream): the request's thread gives its pooled connection back after each call. Held through the
    waits, one connection per waiting request would leave every other request of the process queueing
    for the pool, and failing after its timeout, once as many wait as the pool holds."""

    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        finally:
            connection_give_back()

    return sync_to_async(call)


class ThreadWatch:
    """``with ThreadWatch(thread_id) as watch: ... watch.wait(timeout)`` on a thread, or
    ``async with ThreadWatch(thread_id) as watch: ... await watch.changed(timeout)`` on an event loop.

    Subscribe first, then read the row, then wait: a change committed between
    the read and the wait still sets the event, so nothing is missed.
    """

    def __init__(self, thread_id: Any) -> None:
        self.thread_id = str(thread_id)
        self._event = asyncio.Event()
        self._flag = threading.Event()  # the sync waiter's
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listening = _postgres()
        self._end = _waits_end.get()

    @property
    def ended(self) -> bool:
        """Whether the request waiting here is over (its client left, its server stops): stop waiting."""
        return self._end is not None and self._end.ended

    def _wake(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._event.set)
        else:
            self._flag.set()

    def __enter__(self) -> ThreadWatch:
        if self._end is not None:
            self._end.subscribe(self._flag.set)
        if self._listening:
            _listener.subscribe(self.thread_id, self._wake)
            if not _listener.listening.is_set():  # see __aenter__
                _listener.listening.wait(LISTEN_START_SECONDS)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._end is not None:
            self._end.unsubscribe(self._flag.set)
        if self._listening:
            _listener.unsubscribe(self.thread_id, self._wake)

    def wait(self, timeout: float) -> bool:
        """Block until notified, ``timeout`` (capped by the fallback interval) or the request's end.

        A pooled database connection goes back to the pool first (outside a transaction): a waiter
        holding one for its whole wait would leave the process's other requests queueing for one."""
        if self.ended:
            return False
        connection_give_back()
        notified = self._flag.wait(max(0.0, min(timeout, self._cap)))
        self._flag.clear()  # before the caller's re-read: a change after it wakes the next wait
        return notified

    @property
    def _cap(self) -> float:
        return FALLBACK_SECONDS if self._listening else EMBEDDED_POLL_SECONDS

    async def __aenter__(self) -> ThreadWatch:
        self._loop = asyncio.get_running_loop()
        if self._end is not None:
            # The request's end wakes an async wait too: a /lg/ wait or stream on a stopping server kept
            # waiting on an event loop that stopped under it, its request thread with it, and the process
            # never exited (found from the outside: daphne alive 6 minutes after SIGTERM).
            self._end.subscribe(self._wake)
        if self._listening:
            _listener.subscribe(self.thread_id, self._wake)
            if not _listener.listening.is_set():
                # The listener is starting (the process's first watch, or the first since it closed
                # idle): a change committed before its LISTEN takes effect is never delivered, and the
                # caller reads the row next. Wait (bounded) until it listens: nothing falls between.
                await asyncio.to_thread(_listener.listening.wait, LISTEN_START_SECONDS)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._end is not None:
            self._end.unsubscribe(self._wake)
        if self._listening:
            _listener.unsubscribe(self.thread_id, self._wake)

    async def changed(self, timeout: float) -> bool:
        """Wait until notified, ``timeout`` (capped by the fallback interval) or the request's end (then at
        once: the caller checks ``ended``); True if notified."""
        if self.ended:
            return False
        try:
            await asyncio.wait_for(self._event.wait(), timeout=max(0.0, min(timeout, self._cap)))
        except TimeoutError:
            return False
        self._event.clear()
        return True
