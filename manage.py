#!/usr/bin/env python
import os
import sys

# PostgreSQL's SQLSTATEs for a server that is not there to answer (class 08: connection exception; 57P01-03:
# shut down, crashed, starting): a failure with no SQLSTATE never reached one either.
_UNREACHABLE_SQLSTATES = ("08", "57P01", "57P02", "57P03")


def _database_said(exc: BaseException) -> str | None:
    """Who answered the error, when a database did (its message follows): SQLite says "no such table",
    "database is locked" or "attempt to write a readonly database" of a file it opened, and PostgreSQL
    names an error it raised by SQLSTATE. None when no database answered (PostgreSQL unreachable)."""
    import sqlite3

    import psycopg

    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, sqlite3.Error):
            from django.conf import settings

            name = settings.DATABASES["default"]["NAME"]
            return f"the SQLite database {name} answered"
        if isinstance(cause, psycopg.Error):
            state = cause.sqlstate or ""
            if not state or state.startswith(_UNREACHABLE_SQLSTATES):
                return None
            return f"the database answered (SQLSTATE {state})"
        cause = cause.__cause__ or cause.__context__
    return None


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except Exception as exc:
        import psycopg
        from django.core.exceptions import ImproperlyConfigured
        from django.db import InterfaceError, OperationalError

        from runtime.registry import GraphRegistryError

        if isinstance(exc, GraphRegistryError):
            # A GATEHOUSE_GRAPHS that does not resolve (a relative path from another directory, a graph that
            # fails to import) is a setting to fix, not a crash: one line that names it, as graphs_check says.
            sys.stderr.write(f"CommandError: {exc}\n")
            sys.exit(1)
        if isinstance(exc, ImproperlyConfigured):
            # A setting start-up refuses (a malformed DATABASE_URL, no REDIS_URL, …): its message names it.
            sys.stderr.write(f"ImproperlyConfigured: {exc}\n")
            sys.exit(1)
        if isinstance(exc, OperationalError | InterfaceError | psycopg.OperationalError):
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            said = _database_said(exc)
            if said is not None:
                sys.stderr.write(f"CommandError: {said}: {reason}\n")
                sys.exit(1)
            # The database down or unreachable is the deployment's state, not the command's defect: one line
            # (psycopg names the host and port, never the password), as the web answers a 503 for it.
            sys.stderr.write(f"CommandError: the database cannot be reached (DATABASE_URL): {reason}\n")
            sys.exit(1)
        raise
