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

from tests.conftest import ROOT, process_group_stop, scaled, wait_for
from tests.embedded.conftest import Stack, embedded_env, stack_new
from tests.sqlite_probe import sqlite_migrated_copy

pytestmark = pytest.mark.embedded

FAILURE = "graph 'agent': importing"
CAUSE = "RuntimeError('OPENAI_API_KEY is not set')"
# A state TypedDict named instead of the graph: importable, callable, and no graph. It made inspect raise a
# ValueError that Celery logged and swallowed: the worker started "ready" and failed every run it claimed.
NOT_A_GRAPH_MODULE = "from typing import TypedDict\n\n\nclass State(TypedDict):\n    amount: int\n"
NOT_A_GRAPH = "graph 'agent': ./agent.py:State is a class, not a StateGraph, a compiled graph or a factory"
GRAPH_MODULE = (
    "from typing import TypedDict\n\nfrom langgraph.graph import START, StateGraph\n\n\n"
    "class State(TypedDict):\n    amount: int\n\n\n"
    "b = StateGraph(State)\nb.add_node('a', lambda state: {})\nb.add_edge(START, 'a')\ngraph = b\n"
)
# An uncompiled StateGraph with an edge to no node: importable, a graph, and it does not compile.
NOT_COMPILABLE_MODULE = GRAPH_MODULE + "b.add_edge('a', 'nowhere')\n"
NOT_COMPILABLE = "graph 'agent' does not compile: ValueError: Found edge ending at unknown node `nowhere`"


def graphs_write(tmp_path: Path, module: str, attr: str) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent.py").write_text(module)
    (project / "langgraph.json").write_text(json.dumps({"graphs": {"agent": f"./agent.py:{attr}"}}))
    return project / "langgraph.json"


@pytest.fixture
def bad_graphs(tmp_path: Path) -> Path:
    return graphs_write(tmp_path, 'raise RuntimeError("OPENAI_API_KEY is not set")\n', "graph")


@pytest.fixture
def not_a_graph(tmp_path: Path) -> Path:
    return graphs_write(tmp_path, NOT_A_GRAPH_MODULE, "State")


@pytest.fixture
def not_compilable(tmp_path: Path) -> Path:
    return graphs_write(tmp_path, NOT_COMPILABLE_MODULE, "graph")


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


def test_user_commands_without_a_graph_do_not_import_graph_modules(tmp_path: Path, bad_graphs: Path) -> None:
    """The first admin ``make run`` prints (``user_create --role admin <name>``), pasted in a shell without the
    graphs' secrets, failed on "importing needs_key.py failed": it read the registry for no graph at all."""
    env = embedded_env(tmp_path / "var", GATEHOUSE_GRAPHS=str(bad_graphs), DJANGO_SETTINGS_MODULE="console.settings")
    sqlite_migrated_copy(tmp_path / "var")  # migrate with these graphs: the test above
    for args in (
        ["user_create", "first", "--role", "admin"],
        ["user_create", "every", "--role", "auditor", "--graph", "*"],
        ["user_create", "engine", "--role", "operator", "--graph", "external:payments"],
        ["user_grant", "first", "--role", "reviewer", "--graph", "*"],
        ["user_revoke", "first", "--role", "reviewer"],
    ):
        done = _run(env, "manage.py", *args)
        assert done.returncode == 0, (args, done.stderr[-2000:])
    # A graph by name is checked against the registry, which imports the modules: the failure is named.
    named = _run(env, "manage.py", "user_grant", "first", "--graph", "agent")
    assert named.returncode == 1 and FAILURE in named.stderr and CAUSE in named.stderr


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
    stack = stack_new(tmp_path, migrated=True, GATEHOUSE_GRAPHS=str(bad_graphs))
    stacks.append(stack.start())
    assert stack.proc is not None and stack.proc.wait(timeout=scaled(120)) == 1
    log = stack.log()
    assert FAILURE in log and CAUSE in log
    assert "cannot start: manage.py graphs_check failed" in log
    assert "starting worker" not in log
    assert stack.processes() == []


def _worker_start(env: dict[str, str], workdir: Path) -> tuple[bool, int | None, str]:
    """Start a worker and wait until it is ready or has exited: (it became ready, its exit status, its output)."""
    ready, log_path = workdir / "ready", workdir / "worker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "console", "worker", "--pool=threads", "--without-mingle"],
            cwd=ROOT,
            env={**env, "GATEHOUSE_READY_FILE": str(ready)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: ready.exists() or proc.poll() is not None, timeout=120, what="the worker ready or gone")
        became_ready = ready.exists()
    finally:
        process_group_stop(proc)
    return became_ready, proc.returncode, log_path.read_text(errors="replace")


def test_the_worker_refuses_to_start_on_what_is_not_a_graph_in_one_critical_line(
    tmp_path: Path, not_a_graph: Path
) -> None:
    env = embedded_env(tmp_path / "var", GATEHOUSE_GRAPHS=str(not_a_graph), DJANGO_SETTINGS_MODULE="console.settings")
    became_ready, status, output = _worker_start(env, tmp_path)
    assert not became_ready and status == 1, output[-3000:]
    critical = [line for line in output.splitlines() if " CRITICAL " in line]
    assert len(critical) == 1 and critical[0].endswith(f"cannot start: {not_a_graph}: {NOT_A_GRAPH}"), output[-3000:]
    assert "Traceback" not in output and " ready." not in output


def test_graphs_check_and_the_launcher_name_what_is_not_a_graph_in_one_line(
    tmp_path: Path, not_a_graph: Path, stacks: list[Stack]
) -> None:
    _refused_in_one_line(tmp_path, not_a_graph, NOT_A_GRAPH, stacks)


def test_graphs_check_and_the_launcher_name_a_graph_that_does_not_compile_in_one_line(
    tmp_path: Path, not_compilable: Path, stacks: list[Stack]
) -> None:
    """It passed graphs_check ("built once") and the launcher started; its first run then left the thread busy."""
    _refused_in_one_line(tmp_path, not_compilable, NOT_COMPILABLE, stacks)


def _refused_in_one_line(tmp_path: Path, graphs: Path, message: str, stacks: list[Stack]) -> None:
    env = embedded_env(tmp_path / "var", GATEHOUSE_GRAPHS=str(graphs), DJANGO_SETTINGS_MODULE="console.settings")
    checked = _run(env, "manage.py", "graphs_check")
    assert checked.returncode == 1
    assert checked.stderr.strip() == f"CommandError: {graphs}: {message}"
    stack = stack_new(tmp_path, migrated=True, GATEHOUSE_GRAPHS=str(graphs))
    stacks.append(stack.start())
    assert stack.proc is not None and stack.proc.wait(timeout=scaled(120)) == 1
    log = stack.log()
    assert f"CommandError: {graphs}: {message}" in log and "Traceback" not in log, log[-3000:]
    assert "[gatehouse] cannot start: manage.py graphs_check failed" in log
    assert stack.processes() == []


def test_a_bad_store_section_stops_make_run_in_one_line_and_migrate_succeeds_once_it_is_fixed(
    tmp_path: Path, stacks: list[Stack]
) -> None:
    """A missing embedding module was ~50 lines of migrate traceback from ``make run``, and graphs_check passed;
    the half-applied migration then failed the next migrate on "table already exists"."""
    graphs = graphs_write(tmp_path, GRAPH_MODULE, "graph")
    good = json.loads(graphs.read_text())
    graphs.write_text(json.dumps({**good, "store": {"index": {"embed": "./nope.py:embed", "dims": 8}}}))
    message = f'{graphs}: "store.index.embed": {graphs.parent / "nope.py"} does not exist'
    stack = stack_new(tmp_path, GATEHOUSE_GRAPHS=str(graphs))
    stacks.append(stack.start())
    assert stack.proc is not None and stack.proc.wait(timeout=scaled(120)) == 1
    log = stack.log()
    assert f"ImproperlyConfigured: {message}" in log and "Traceback" not in log, log[-3000:]
    assert "[gatehouse] cannot start: manage.py migrate failed" in log
    env = embedded_env(stack.var, GATEHOUSE_GRAPHS=str(graphs), DJANGO_SETTINGS_MODULE="console.settings")
    graphs.write_text(json.dumps(good))
    migrated = _run(env, "manage.py", "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    graphs.write_text(json.dumps({**good, "store": {"index": {"embed": "./nope.py:embed", "dims": 8}}}))
    checked = _run(env, "manage.py", "graphs_check")
    assert (checked.returncode, checked.stderr.strip()) == (1, f"CommandError: {message}")


def test_the_launcher_says_a_misspelt_graphs_file_does_not_exist(tmp_path: Path, stacks: list[Stack]) -> None:
    """An outside tester's ``GATEHOUSE_GRAPHS=…/langgraph.jsn`` stopped ``make run`` with "cannot read the store
    configuration" from migrate: the store's reader met the missing file first."""
    missing = tmp_path / "langgraph.jsn"
    stack = stack_new(tmp_path, GATEHOUSE_GRAPHS=str(missing))
    stacks.append(stack.start())
    assert stack.proc is not None and stack.proc.wait(timeout=scaled(120)) != 0
    log = stack.log()
    assert f"GATEHOUSE_GRAPHS: {missing} does not exist" in log and "store configuration" not in log, log[-3000:]
    assert stack.processes() == []
