"""daphne (``console.asgi``) refuses a start it cannot make as the Celery worker does, and the worker a
refused setting as daphne does: one CRITICAL line naming the problem and exit status 1, not the ~50-line
import traceback that ended with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port, scaled
from tests.embedded.conftest import embedded_env

pytestmark = pytest.mark.slow


# daphne itself, and the way every documented start runs it (console/serve.py: the image, Compose, make run).
LAUNCHERS = ["daphne", "console.serve"]


@pytest.fixture(params=LAUNCHERS)
def launcher(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _daphne(env: dict[str, str], launcher: str = "daphne") -> subprocess.CompletedProcess[str]:
    # A start that is not refused serves until the timeout (and fails the test): the port only has to be free.
    args = [sys.executable, "-m", launcher, "-b", "127.0.0.1", "-p", str(free_port()), "console.asgi:application"]
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120))


def _graphs(tmp_path: Path, module: str) -> Path:
    (tmp_path / "graph.py").write_text(module)
    (tmp_path / "langgraph.json").write_text(json.dumps({"graphs": {"bad": "./graph.py:graph"}}))
    return tmp_path / "langgraph.json"


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("def broken(:\n", ["graph 'bad'", "graph.py", "SyntaxError"]),
        ('raise RuntimeError("OPENAI_API_KEY is not set")\n', ["graph 'bad'", "OPENAI_API_KEY is not set"]),
    ],
    ids=["syntax-error", "raises-on-import"],
)
def test_daphne_refuses_a_broken_graph_in_one_critical_line(
    tmp_path: Path, module: str, expected: list[str], launcher: str
) -> None:
    env = embedded_env(tmp_path / "var", GATEHOUSE_GRAPHS=str(_graphs(tmp_path, module)))
    done = _daphne(env, launcher)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    critical = [line for line in done.stderr.splitlines() if "CRITICAL" in line]
    assert len(critical) == 1, done.stderr[-3000:]
    assert "gatehouse.web cannot start: " in critical[0]
    for part in expected:
        assert part in critical[0], critical[0]


def test_daphne_refuses_a_bad_setting_naming_the_values_it_takes(tmp_path: Path, launcher: str) -> None:
    """console.serve read the settings (its relay path) before daphne loaded the application: a traceback."""
    done = _daphne(embedded_env(tmp_path / "var", LOG_LEVEL="verbose"), launcher)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert "CRITICAL gatehouse.web cannot start: LOG_LEVEL='verbose' must be one of DEBUG, INFO" in lines[0]


def test_the_worker_refuses_a_bad_setting_in_one_critical_line_too(tmp_path: Path) -> None:
    """Celery reads its configuration while it parses its command line: a setting start-up refuses was a
    traceback through click there, and exit status 0."""
    env = embedded_env(tmp_path / "var", LOG_LEVEL="verbose")
    args = [sys.executable, "-m", "celery", "-A", "console", "worker", "--pool", "threads", "-c", "1"]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert "CRITICAL gatehouse.worker cannot start: LOG_LEVEL='verbose' must be one of DEBUG, INFO" in lines[0]
