"""A pooled PostgreSQL connection is checked on checkout only when it may be dead (both pools).

``ConnectionPool.check_connection`` costs a round trip on every checkout: for
Django's pool (``CONN_HEALTH_CHECKS``) one per request and per run, for the
checkpointer's one per checkpoint read and write. A connection the server
closed (``pg_terminate_backend``, a shutdown, a failover's restart) has
something to read — the server's goodbye, then the end of the stream — while a
healthy idle connection has nothing: that is a poll of the socket, no round
trip. A connection with something to read, one never handed out before, and
one last handed out more than ``POOL_CHECK_IDLE_SECONDS`` ago (it may have sat
idle that long, and a dead network path says nothing) get the round trip.
"""

from __future__ import annotations

import select
import time
from typing import Any

from psycopg_pool import ConnectionPool

POOL_CHECK_IDLE_SECONDS = 5.0
_HANDED_OUT_AT = "_gatehouse_handed_out_at"


def connection_check_if_doubtful(conn: Any) -> None:
    """A pool's ``check``: raises (and the pool replaces the connection) if a doubtful one is dead."""
    now = time.monotonic()
    last = getattr(conn, _HANDED_OUT_AT, None)
    setattr(conn, _HANDED_OUT_AT, now)
    if last is None or now - last > POOL_CHECK_IDLE_SECONDS or _has_input(conn):
        ConnectionPool.check_connection(conn)


def _has_input(conn: Any) -> bool:
    """Whether an idle connection's socket has anything to read (or is closed); True where poll() is missing."""
    from psycopg import OperationalError

    if not hasattr(select, "poll"):
        return True
    try:
        fileno = conn.pgconn.socket
    except OperationalError:  # the connection is lost: let the round trip say so
        return True
    poller = select.poll()
    poller.register(fileno, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))
