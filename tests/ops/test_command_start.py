"""A management command that runs no graph starts without LangGraph.

Django's start (every app's ``ready``) and the URLconf (which every command's system checks import) used to
import LangGraph, LangChain and LangSmith: about 2 of the 3.4 seconds of CPU a ``manage.py`` command took
to start here, paid by every health check, migrate and user command. They are imported where a graph is
loaded, a state read or a run executed (the worker and the web server load the graphs at their start).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, scaled

pytestmark = pytest.mark.slow

HEAVY = ("langgraph", "langchain_core", "langsmith")


def test_a_command_s_start_and_system_checks_import_no_langgraph():
    # -X importtime lists every module the command imported, on stderr, whatever the command does with it.
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "django.urls.resolvers" in imported and "lgplatform.api" in imported, "the checks loaded the URLconf"
    heavy = sorted(name for name in imported if name.split(".")[0] in HEAVY)
    assert heavy == [], f"imported at a command's start: {heavy[:10]}"
