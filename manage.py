#!/usr/bin/env python
import os
import sys

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
            # The database down or unreachable is the deployment's state, not the command's defect: one line
            # (psycopg names the host and port, never the password), as the web answers a 503 for it.
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            sys.stderr.write(f"CommandError: the database cannot be reached (DATABASE_URL): {reason}\n")
            sys.exit(1)
        raise
