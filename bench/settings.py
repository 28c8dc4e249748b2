"""Settings for the benchmark's web process: production settings plus a database connection pool.

With the stock ``conn_max_age=60``, Django under ASGI (daphne) keeps a
persistent connection per request thread, and those threads come and go: 8
polling clients drove PostgreSQL to "too many clients" (max_connections=100).
Django 5.1+'s psycopg pool (which requires CONN_MAX_AGE=0) bounds them.
"""

from console.settings import *  # noqa: F403
from console.settings import DATABASES

DATABASES["default"]["CONN_MAX_AGE"] = 0
DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": 2, "max_size": 16, "timeout": 30}
