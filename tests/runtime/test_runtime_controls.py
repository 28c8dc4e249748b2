"""Per-graph runtime controls: langgraph.json parsing, and runs that go past a limit fail clearly."""

from __future__ import annotations

import pytest

from runtime.controls import DEFAULT_DURABILITY, RuntimeControls
from runtime.registry import graphs_read
from tests.conftest import thread_settled, thread_start
from tests.runtime.test_registry import config_write, project, registry_error, registry_restored  # noqa: F401

AGENT = {"agent": "./graphs/agent.py:uncompiled"}


def test_controls_default_to_sync_with_langgraphs_limits(project):  # noqa: F811
    entry = graphs_read(config_write(project, {"graphs": AGENT}))["agent"]
    assert entry.controls == RuntimeControls(graph="agent", durability=DEFAULT_DURABILITY)
    assert DEFAULT_DURABILITY == "sync"


@pytest.mark.parametrize("mode", ["sync", "async", "exit"])
def test_it_reads_the_durability_recursion_limit_and_timeout(project, mode):  # noqa: F811
    options = {"durability": mode, "recursion_limit": 40, "run_timeout_seconds": 2.5}
    config = {"graphs": AGENT, "gatehouse": {"runtime": {"agent": options}}}
    controls = graphs_read(config_write(project, config))["agent"].controls
    assert (controls.durability, controls.recursion_limit, controls.run_timeout_seconds) == (mode, 40, 2.5)
    assert controls.config({"configurable": {}})["recursion_limit"] == 40


@pytest.mark.parametrize(
    "options,message",
    [
        ({"durability": "eventually"}, "durability must be one of sync, async, exit"),
        ({"recursion_limit": 0}, "recursion_limit must be an integer >= 1"),
        ({"recursion_limit": True}, "recursion_limit must be an integer >= 1"),
        ({"run_timeout_seconds": -1}, "run_timeout_seconds must be a finite number > 0"),
        ({"run_timeout_seconds": "10"}, "run_timeout_seconds must be a finite number > 0"),
        ({"run_timeout_seconds": float("inf")}, "run_timeout_seconds must be a finite number > 0"),  # JSON's 1e999
        ({"timeout": 10}, "unknown runtime options ['timeout']"),
        ("fast", "gatehouse.runtime.agent must be an object"),
    ],
)
def test_bad_controls_stop_start_up_naming_the_graph(project, options, message):  # noqa: F811
    error = registry_error(project, {"graphs": AGENT, "gatehouse": {"runtime": {"agent": options}}})
    assert "'agent'" in error and message in error


@pytest.mark.parametrize(
    "section,value",
    [
        ("runtime", {"recursion_limit": 3}),
        ("deadlines", {"review": {"due": "4h"}}),
        ("reasons", {"reject": "required"}),
        ("retention", {"days": 30}),
        ("sensitive_paths", ["secret"]),
        ("schema_versions", 2),
        ("columns", {"review": []}),
        ("search_metadata", ["case"]),
        ("gates", ["step"]),
    ],
)
def test_a_setting_for_a_graph_that_is_not_registered_stops_start_up(project, section, value):  # noqa: F811
    """A misspelt graph name under "runtime" meant no recursion limit and no timeout, and nothing said so."""
    error = registry_error(project, {"graphs": AGENT, "gatehouse": {section: {"agnet": value}}})
    assert f"gatehouse.{section}.agnet: no graph of that name is registered (graphs: agent)" in error


def test_search_metadata_may_name_every_graph_with_a_star(project):  # noqa: F811
    config = {"graphs": AGENT, "gatehouse": {"search_metadata": {"*": ["case"]}}}
    assert "agent" in graphs_read(config_write(project, config))


@pytest.mark.integration
@pytest.mark.usefixtures("live_db", "live_worker")
def test_a_run_past_its_recursion_limit_fails_with_a_clear_error(operator):
    thread = thread_start(operator, "never_stops", {})
    settled = thread_settled(operator, thread["id"], timeout=60)
    assert settled["status"] == "failed"
    assert "recursion limit: the run took more than 5 steps" in settled["error"]
    assert "gatehouse.runtime.never_stops.recursion_limit" in settled["error"]
    [run] = operator.client.get(f"/api/threads/{thread['id']}/runs").json()
    assert run["status"] == "failed" and "recursion limit" in run["error"]


@pytest.mark.integration
@pytest.mark.usefixtures("live_db", "live_worker")
def test_a_run_past_its_timeout_fails_with_a_clear_error(operator):
    thread = thread_start(operator, "slow_steps", {})
    settled = thread_settled(operator, thread["id"], timeout=60)
    assert settled["status"] == "failed"
    assert "run timeout: the run took longer than 1 s" in settled["error"]
