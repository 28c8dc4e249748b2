"""Which failures are worth retrying automatically, and how long to wait before the next attempt.

A run can fail for two kinds of reasons:

- **transient** ones that say nothing about the thread: the database connection
  was cut (failover, ``pg_terminate_backend``, a restart), a deadlock or
  serialization failure, the checkpoint pool timed out. The same run, tried
  again a little later, is expected to succeed. Gatehouse re-dispatches it with
  exponential backoff, at most ``GATEHOUSE_MAX_RUN_ATTEMPTS`` times in all.
- everything else, in particular exceptions raised by the graph's own code:
  retrying blindly would repeat the same failure (or a bug), so the run fails
  at once and an operator decides (``POST /api/threads/{id}/retry``).

Django wraps driver errors (``django.db.OperationalError`` with the psycopg
error as ``__cause__``) and LangGraph re-raises node exceptions as they are,
so classification walks the whole cause/context chain.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

from django.conf import settings

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger(__name__)

_TRANSIENT_NAMES = {
    # The names are matched (not imported) so this module needs neither
    # driver to be installed, and wrappers of either library count too.
    ("django.db.utils", "OperationalError"),
    ("django.db.utils", "InterfaceError"),
    ("psycopg", "OperationalError"),
    ("psycopg", "InterfaceError"),
    # PostgreSQL ended a session left idle in a transaction too long (idle_in_transaction_session_timeout: a
    # worker paused mid-run, a zombie woken). An InternalError by class, yet the connection was cut, not the run
    # wrong: the run failed for good, its loan paid and its store write left unaudited.
    ("psycopg.errors", "IdleInTransactionSessionTimeout"),
    ("psycopg_pool", "PoolTimeout"),
    ("psycopg_pool", "TooManyRequests"),
    # The embedded checkpointer's driver raises its own, unwrapped: "database is locked" while another
    # process holds the write lock past the busy timeout is a wait that ran out, not the thread's fault.
    ("sqlite3", "OperationalError"),
}


def exception_chain(exc: BaseException, *, context: bool = True) -> Iterator[BaseException]:
    """``exc``, then what it was raised from (its cause, else its context), outermost first, each once.
    ``context=False``: causes only (``raise ... from``), not what was being handled when it was raised."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (current.__context__ if context else None)


def exception_text(exc: BaseException) -> str:
    """``ClassName: message`` for a log line, or the class alone when the exception says nothing."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def class_names(exc: BaseException) -> set[tuple[str, str]]:
    """(module, name) of ``exc``'s class and its bases: matched by name, so no driver or client need be imported."""
    return {(klass.__module__, klass.__name__) for klass in type(exc).__mro__}


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` (or anything in its cause chain) is a connection-level or retryable database error."""
    return any(class_names(link) & _TRANSIENT_NAMES for link in exception_chain(exc))


def concurrent_change(exc: BaseException) -> bool:
    """True when PostgreSQL rolled the transaction back for a concurrent one (SQLSTATE class 40: a deadlock,
    a serialization failure): nothing was written, and the same request sent again may succeed. A conflict
    with another request, not an unreachable database."""
    return any(str(getattr(link, "sqlstate", "") or "").startswith("40") for link in exception_chain(exc))


# The SQLSTATE Gatehouse's database functions raise when a caller runs code older than the schema (approvals
# migration 0034): nothing was written, and only restarting the process on the new release makes it succeed.
STALE_CODE_SQLSTATE = "GH001"


def stale_code(exc: BaseException) -> bool:
    """True when one of our database functions refused the caller for running code older than the schema."""
    return any(getattr(link, "sqlstate", None) == STALE_CODE_SQLSTATE for link in exception_chain(exc))


def retry_backoff(attempts: int) -> float:
    """Seconds to wait, after a lost or released lease, before attempt ``attempts + 1`` is dispatched.

    ``base * 2 ** (attempts - 1)``, capped: 1, 2, 4, 8 … times the base.
    """
    base = float(settings.GATEHOUSE_RETRY_BACKOFF_SECONDS)
    cap = float(settings.GATEHOUSE_RETRY_BACKOFF_MAX_SECONDS)
    return float(min(cap, base * (2 ** max(attempts - 1, 0))))


def skipped_while_database_down(task: Callable[P, R]) -> Callable[P, R | None]:
    """A periodic task that meets an unreachable database logs one WARNING line and returns None: beat runs it
    again. Raised, Celery logged ERROR with a traceback for every run of every sweep while PostgreSQL was down
    (an outside SRE counted them; docs/operations.md promises one line per failure). Other errors raise."""

    @functools.wraps(task)
    def run(*args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return task(*args, **kwargs)
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("%s skipped, the database is unavailable: %s", task.__name__, exc)
            # Imported here: graphs import this module through runtime.effects, and must run without the ORM.
            from django.db import connection

            connection.close()  # the next run takes a new one
            return None

    return run
