"""A worker's database sessions end when they sit idle in a transaction: a worker cut off mid-transaction
cannot hold its locks against the worker that takes its run over.

A worker whose link to PostgreSQL breaks (a network partition, a paused VM) in
the middle of a transaction leaves its session idle in that transaction,
holding what it locked: the thread row ``FOR SHARE`` of a fenced checkpoint
write in flight (``runtime.fencing``), an audit chain's advisory lock. The takeover's
claim (``UPDATE ... SET fence = fence + 1``) then waits on that lock until
PostgreSQL notices the dead peer, hours with default TCP keepalives, and so
does every audited write to that chain. PostgreSQL ends a session idle in a
transaction for longer than ``idle_in_transaction_session_timeout``, rolling
the transaction back and releasing its locks. A worker's transactions never
wait on anything outside the database (effects call out with no transaction
open), so seconds idle inside one mean the worker is gone.

Only the worker's sessions: the web process streams audit exports from a
cursor inside a transaction at the pace of the client that downloads them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connections

IDLE_SETTING = "idle_in_transaction_session_timeout"


def session_options(current: str, *, idle_seconds: float) -> str:
    """libpq ``options`` with the idle-in-transaction limit added, unless the operator set one already."""
    if IDLE_SETTING in current:
        return current
    return f"{current} -c {IDLE_SETTING}={round(idle_seconds * 1000)}".strip()


def worker_sessions_limit(**_: Any) -> None:
    """Apply the limit to this process's sessions, Django's and the checkpointer's (worker start-up)."""
    from runtime.checkpointer import checkpointer_close

    idle = float(settings.GATEHOUSE_WORKER_IDLE_IN_TRANSACTION_SECONDS)
    db = connections["default"]
    if db.vendor != "postgresql" or idle <= 0:
        return
    options = db.settings_dict.setdefault("OPTIONS", {})
    options["options"] = session_options(str(options.get("options") or ""), idle_seconds=idle)
    # Sessions opened before this (graph loading, preflight) were opened without it.
    connections.close_all()
    db.close_pool()  # type: ignore[attr-defined]  # the PostgreSQL backend's (checked above)
    checkpointer_close()
