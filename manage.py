#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except Exception as exc:
        # A GATEHOUSE_GRAPHS that does not resolve (a relative path from another directory, a graph that
        # fails to import) is a setting to fix, not a crash: one line that names it, as graphs_check says.
        from runtime.registry import GraphRegistryError

        if not isinstance(exc, GraphRegistryError):
            raise
        sys.stderr.write(f"CommandError: {exc}\n")
        sys.exit(1)
