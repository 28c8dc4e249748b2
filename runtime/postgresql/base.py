"""Django's PostgreSQL backend whose connection pool checks a connection only when it may be dead.

Django gives its pool ``ConnectionPool.check_connection`` (a round trip on every checkout: one per
request and one per run) when ``CONN_HEALTH_CHECKS`` is on, and no check at all when it is off;
a ``check`` of one's own in ``OPTIONS["pool"]`` is refused (Django passes its own). With the
setting off, this backend gives the pool ``runtime.pool_checks.connection_check_if_doubtful``:
a killed connection is still replaced on checkout, a healthy one goes out without a round trip.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql.base import DatabaseWrapper as PostgresDatabaseWrapper

from runtime.pool_checks import connection_check_if_doubtful


class DatabaseWrapper(PostgresDatabaseWrapper):
    @property
    def pool(self) -> Any:
        pool = super().pool
        # psycopg_pool keeps its check in ``_check`` (no setter): Django built it with none.
        if pool is not None and pool._check is None:
            pool._check = connection_check_if_doubtful
        return pool
