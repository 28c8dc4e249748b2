"""bench/run_all.py (``make bench``): every scenario names a script that exists and takes its arguments."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run_all import ROOT, SCENARIOS, SCRIPTS
from tests.conftest import scaled


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_scenario_runs_a_script_that_takes_its_arguments(name):
    full, quick, limit = SCENARIOS[name]
    script = ROOT / "bench" / f"{SCRIPTS.get(name, name)}.py"
    assert script.is_file(), script
    assert limit > 0
    shown = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=True,
    ).stdout
    for option in {a for a in [*full, *quick] if a.startswith("--")}:
        assert option in shown, f"{name}: {script.name} has no {option}"


def test_every_bench_script_is_a_scenario_or_serves_one():
    scripts = {p.stem for p in (Path(ROOT) / "bench").glob("*.py")}
    run = set(SCENARIOS) - set(SCRIPTS) | set(SCRIPTS.values())
    # helpers, and benches run by hand for the decision they measured, each documented where it is used
    not_scenarios = {
        "__init__",
        "run_all",
        "chart",  # draws var/bench/summary.png after the scenarios
        "bulk",  # docs/bulk-and-columns.md
        "embedded_broker",  # docs/embedded.md: the choice of the embedded broker
    }
    assert scripts - run - not_scenarios == set(), "a script make bench never runs"


def test_the_decision_profiles_timeline_clocks_functions_that_exist():
    """``bench/decision_profile.py --timeline`` wraps its phases by module and name: when ``RecordingStore``
    moved out of ``runtime.store`` the option failed at its start, and no test noticed (round 43)."""
    from bench.decision_profile import _PHASES

    for module_name, qualname in _PHASES:
        owner = importlib.import_module(module_name)
        for part in qualname.split("."):
            assert hasattr(owner, part), f"{module_name}.{qualname}: no {part} (moved or renamed?)"
            owner = getattr(owner, part)
        assert callable(owner), f"{module_name}.{qualname}"
