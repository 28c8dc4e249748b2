"""Run every benchmark scenario in turn (``make bench``); each writes its own JSON under var/bench/.

    .venv/bin/python bench/run_all.py [--only full_cycle,live_latency,console_scale,audit_scaling] [--quick]

Scenarios run one after another (never together: they would measure each
other) in subprocesses, each bounded by its own --timeout and by this
script's per-scenario limit. ``--quick`` passes smaller sizes for a smoke run.
A summary of exit statuses and result files is printed at the end.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS: dict[str, tuple[list[str], list[str], int]] = {
    # name: (full arguments, --quick arguments, wall-clock limit in seconds)
    "full_cycle": ([], ["--threads", "40", "--idle-samples", "10"], 1900),
    "live_latency": ([], ["--threads", "15"], 1000),
    "console_scale": ([], ["--tasks", "10000", "--events", "100000", "--samples", "20"], 1600),
    "storage": (["--threads", "30", "--rounds", "3"], ["--threads", "10", "--rounds", "1"], 900),
    "fenced_writes": (["--rounds", "10"], ["--threads", "10", "--rounds", "2"], 600),
    "sdk_wait": ([], ["--threads", "10"], 900),
    "sdk_compat": ([], [], 600),  # every stream mode's events beside langgraph dev's (not a measurement)
    "sdk_shapes": ([], [], 600),  # every answer's shape and statuses beside langgraph dev's (not a measurement)
    "sdk_crowd": ([], ["--clients", "10", "--threads", "2"], 600),  # 40 SDK clients at once: no 5xx (round 24)
    "decision_profile": ([], ["--samples", "10", "--profiled", "4"], 600),
    "request_cost": ([], ["--requests", "300"], 300),  # daphne's CPU per request, one client (round 23)
    "audit_scaling": ([], ["--rounds", "1", "--seconds", "2"], 900),
    # py-spy flame graphs of daphne and the worker under a shorter full cycle of their own (sampling costs
    # CPU, so not under the measured one): var/bench/flame-web.svg, flame-worker.svg.
    "flame_graphs": (
        ["--threads", "100", "--rounds", "1", "--idle-samples", "5", "--profile", "--name", "full_cycle_profiled"],
        ["--threads", "20", "--rounds", "1", "--idle-samples", "3", "--profile", "--name", "full_cycle_profiled"],
        900,
    ),
}
# Scenarios run by another scenario's script, and what they leave (the others: bench/NAME.py, var/bench/NAME.json).
SCRIPTS = {"flame_graphs": "full_cycle"}
RESULTS = {"flame_graphs": "var/bench/flame-web.svg, flame-worker.svg"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    summary = []
    for name in names:
        full, quick, limit = SCENARIOS[name]
        script = SCRIPTS.get(name, name)
        command = [sys.executable, str(ROOT / "bench" / f"{script}.py"), *(quick if args.quick else full)]
        print(f"\n=== {name}: {' '.join(command[1:])}", flush=True)
        t0 = time.monotonic()
        try:
            status = subprocess.run(command, cwd=ROOT, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            status = -1
        summary.append((name, status, time.monotonic() - t0))
    print("\nscenario        status   seconds  results")
    for name, status, seconds in summary:
        outcome = "ok" if status == 0 else ("timeout" if status == -1 else f"exit {status}")
        print(f"{name:<15} {outcome:<8} {seconds:>7.0f}  {RESULTS.get(name, f'var/bench/{name}.json')}")
    subprocess.run([sys.executable, str(ROOT / "bench" / "chart.py")], cwd=ROOT, timeout=120)
    return 0 if all(status == 0 for _, status, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
