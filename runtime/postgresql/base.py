"""Django's PostgreSQL backend, with a pool check of our own and prepared statements for fixed SQL.

Django gives its pool ``ConnectionPool.check_connection`` (a round trip on every checkout: one per
request and one per run) when ``CONN_HEALTH_CHECKS`` is on, and no check at all when it is off;
a ``check`` of one's own in ``OPTIONS["pool"]`` is refused (Django passes its own). With the
setting off, this backend gives the pool ``runtime.pool_checks.connection_check_if_doubtful``:
a killed connection is still replaced on checkout, a healthy one goes out without a round trip.

Django's cursors bind parameters client-side: every statement reaches PostgreSQL with its values
written in, and is planned again each time. For a statement that joins several tables, planning
costs more than running it (the live inbox's row: ~1.8 ms planned, 0.5 ms prepared).
``prepared_cursor`` binds server-side on a connection that prepares what it runs, so a statement
written out once per process (``runtime.rows.fixed_cursor``) is planned once per connection.
Django's own cursors are unchanged (a client-side cursor is never prepared). ``OPTIONS
["prepare_threshold"] = None`` turns preparing off, for a pooler that cannot carry prepared
statements (PgBouncer before 1.21 in transaction mode; the checkpointer prepares its statements too).

Django keeps its pools in a class attribute, so a forked child (a prefork worker's pool process)
inherits its parent's pool and the parent's sessions in it. The child forgets them at the fork,
without a word to the server (closing them would end the parent's sessions), and opens its own.
"""

from __future__ import annotations

import os
from typing import Any

from django.db.backends.postgresql.base import TIMESTAMPTZ_OID, ServerBindingCursor
from django.db.backends.postgresql.base import DatabaseWrapper as PostgresDatabaseWrapper
from django.db.backends.postgresql.operations import DatabaseOperations as PostgresDatabaseOperations
from django.db.backends.postgresql.psycopg_any import register_tzloader
from django.db.backends.utils import CursorWrapper
from django.utils.asyncio import async_unsafe
from psycopg import errors
from psycopg.pq import Format

from runtime.pool_checks import connection_check_if_doubtful


class DatabaseOperations(PostgresDatabaseOperations):
    def last_executed_query(self, cursor: Any, sql: str, params: Any) -> str:
        # What Django's logs and query captures show: a prepared statement has no text with its
        # values in it (Django reads the client-side cursor's), so compose it as Django would send it.
        if isinstance(cursor, ServerBindingCursor):
            try:
                return str(self.compose_sql(sql, params))
            except errors.DataError:
                return sql  # values it cannot write in (Django's own gives None, which its logs print)
        return super().last_executed_query(cursor, sql, params)


class DatabaseWrapper(PostgresDatabaseWrapper):
    ops_class = DatabaseOperations

    @property
    def pool(self) -> Any:
        pool = super().pool
        # psycopg_pool keeps its check in ``_check`` (no setter): Django built it with none.
        if pool is not None and pool._check is None:
            pool._check = connection_check_if_doubtful
        return pool

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        if "prepare_threshold" not in self.settings_dict["OPTIONS"]:
            # Django's default (None) disables preparing on the connection altogether; only the
            # server-binding cursors of ``prepared_cursor`` are affected by this (see module doc).
            params["prepare_threshold"] = 0
        return params

    @async_unsafe
    def prepared_cursor(self) -> CursorWrapper:
        """A cursor whose statements are prepared on this connection: for SQL whose text is fixed
        and whose values are parameters (``runtime.rows.fixed_cursor``)."""
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor = ServerBindingCursor(self.connection)  # type: ignore[call-arg]  # psycopg's Cursor(connection)
            # As ``create_cursor`` does for Django's own cursors.
            tzloader = self.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
            if self.timezone != tzloader.timezone:
                register_tzloader(self.timezone, cursor)
            prepared: CursorWrapper = self._prepare_cursor(cursor)  # type: ignore[attr-defined]  # Django's own wrapping
            return prepared


# Kept, not collected: a pool's finaliser would try to stop worker threads that did not survive the fork.
_inherited_pools: list[Any] = []


def _pools_forget_after_fork() -> None:
    pools: dict[str, Any] = PostgresDatabaseWrapper._connection_pools  # type: ignore[attr-defined]
    _inherited_pools.extend(pools.values())
    pools.clear()


os.register_at_fork(after_in_child=_pools_forget_after_fork)
