"""Graph modules load when the worker or web server starts, never in ``migrate`` or ``collectstatic``.

A graph whose module needs an API key that is not set must not break a
migration; the processes that run graphs still refuse to start, naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, scaled
from tests.embedded.conftest import Stack, embedded_env, stack_new

pytestmark = pytest.mark.embedded

FAILURE = "graph 'agent': importing"
CAUSE = "RuntimeError('OPENAI_API_KEY is not set')"


@pytest.fixture
def bad_graphs(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent.py").write_text('raise RuntimeError("OPENAI_API_KEY is not set")\n')
    (project / "langgraph.json").write_text(json.dumps({"graphs": {"agent": "./agent.py:graph"}}))
    return project / "langgraph.json"


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120)
    )


def test_migrate_and_collectstatic_do_not_import_graph_modules(tmp_path: Path, bad_graphs: Path) -> None:
    env = embedded_env(tmp_path / "var", GATEHOUSE_GRAPHS=str(bad_graphs), DJANGO_SETTINGS_MODULE="console.settings")
    migrated = _run(env, "manage.py", "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    collected = _run(env, "manage.py", "collectstatic", "--no-input")
    assert collected.returncode == 0, collected.stderr
    assert (tmp_path / "var" / "staticfiles" / "console" / "console.css").exists()


def test_the_worker_and_graphs_check_refuse_a_broken_graph_naming_it(tmp_path: Path, bad_graphs: Path) -> None:
    env = embedded_env(tmp_path / "var", GATEHOUSE_GRAPHS=str(bad_graphs), DJANGO_SETTINGS_MODULE="console.settings")
    checked = _run(env, "manage.py", "graphs_check")
    assert checked.returncode == 1
    assert FAILURE in checked.stderr and CAUSE in checked.stderr and str(bad_graphs) in checked.stderr
    worker = _run(env, "-m", "celery", "-A", "console", "worker", "--pool=threads", "--without-mingle")
    assert worker.returncode == 1
    assert FAILURE in worker.stderr and CAUSE in worker.stderr


def test_the_launcher_stops_at_a_broken_graph_before_starting_anything(
    tmp_path: Path, bad_graphs: Path, stacks: list[Stack]
) -> None:
    stack = stack_new(tmp_path, GATEHOUSE_GRAPHS=str(bad_graphs))
    stacks.append(stack.start())
    assert stack.proc is not None and stack.proc.wait(timeout=scaled(120)) == 1
    log = stack.log()
    assert FAILURE in log and CAUSE in log
    assert "cannot start: manage.py graphs_check failed" in log
    assert "starting worker" not in log
    assert stack.processes() == []
