"""langgraph-sdk stream parity: every stream mode through Gatehouse ``/lg/`` and through ``langgraph dev``.

    .venv/bin/python bench/sdk_compat.py [--langgraph-dev-python PATH]

Not a measurement of speed: the same servers as bench/sdk_wait.py (a fresh
database, a Celery worker and daphne; ``langgraph dev`` serving the same demo
graph), and the official ``langgraph_sdk`` sync client streaming a start to the
gate's interrupt and its resume in each mode ``/lg/`` offers. For each mode and
phase it compares the SSE event names in order and, for ``events``, each
event's kind, run name, tags and data keys. Gatehouse ends a stream with an
``end`` event (the SDK takes it as the run's end, and reconnects without one);
``langgraph dev`` 0.16 sends none, so a trailing ``end`` is not a difference.
Payload values are not compared: Gatehouse keys a resume by interrupt id and
names the reviewer who decided, and LangGraph Server adds its own metadata.
The demo loan graph is compared as it runs, and ``nested_review``
(bench/lgdev/nested.py: its pause is inside a subgraph) with
``stream_subgraphs``, whose events are named with the subgraph's namespace
(``updates|review:<task id>``; the ids, which differ between servers, are left
out). Results: ``var/bench/sdk_compat.json``; exits 1 when a mode differs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import OUT_DIR, loan_input  # noqa: E402
from bench.sdk_wait import RESUME, Side, both_servers, servers_arguments  # noqa: E402

# runtime.stream.CLIENT_MODES (importing it needs Django settings); tests/perf/test_sdk_compat.py keeps them equal.
CLIENT_MODES = ("values", "updates", "messages", "messages-tuple", "events", "debug", "custom", "tasks", "checkpoints")


@dataclass(frozen=True)
class Case:
    """A graph streamed through both servers: its start input, its resume, and whether subgraphs stream too."""

    graph: str
    input: dict[str, Any]
    resume: dict[str, Any]
    subgraphs: bool = False


CASES = (
    Case("loan_approval", loan_input(), RESUME),
    # bench/lgdev/nested.py: the pause is in the review subgraph, whose events carry its namespace
    Case("nested_review", {"amount": 5}, {"decision": "approve", "reason": "bench"}, subgraphs=True),
)
# A subgraph's namespace is "node:task id"; the ids differ between servers and runs, the nodes must not.
_TASK_ID = re.compile(r":[0-9a-f-]{8,}")


def _seen(part_event: str, data: Any, mode: str) -> Any:
    """What is compared of one SSE event (namespaces' task ids left out)."""
    name = _TASK_ID.sub(":<id>", part_event)
    if mode == "events" and name.split("|")[0] == "events" and isinstance(data, dict):
        return [data.get("event"), data.get("name"), data.get("tags"), sorted(data.get("data") or {})]
    return name


def stream_both_phases(side: Side, mode: str, case: Case = CASES[0]) -> dict[str, list[Any]]:
    from langgraph_sdk import get_sync_client

    operator = get_sync_client(url=side.url, api_key=side.operator_key, timeout=60)
    reviewer = get_sync_client(url=side.url, api_key=side.reviewer_key, timeout=60) if side.reviewer_key else operator
    assistant = operator.assistants.search(graph_id=case.graph)[0]["assistant_id"]
    thread = operator.threads.create()["thread_id"]
    options: dict[str, Any] = {"stream_mode": mode, "stream_subgraphs": case.subgraphs}
    start = operator.runs.stream(thread, assistant, input=case.input, **options)
    seen = {"start": [_seen(p.event, p.data, mode) for p in start]}
    resume = reviewer.runs.stream(thread, assistant, command={"resume": case.resume}, **options)
    seen["resume"] = [_seen(p.event, p.data, mode) for p in resume]
    for phase, events in seen.items():
        if events and events[-1] == "end":
            seen[phase] = events[:-1]
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    servers_arguments(parser, db="gatehouse_bench_compat")
    args = parser.parse_args()
    report: dict[str, Any] = {"modes": {}}
    with both_servers(args) as (mine, theirs):
        if isinstance(theirs, str):
            print(f"langgraph dev {theirs}: nothing to compare with")
            report["langgraph_dev"] = theirs
            (OUT_DIR / "sdk_compat.json").write_text(json.dumps(report, indent=2))
            return 0
        for case in CASES:
            for mode in CLIENT_MODES:
                ours, reference = stream_both_phases(mine, mode, case), stream_both_phases(theirs, mode, case)
                report["modes"][f"{case.graph} {mode}"] = {
                    "same": ours == reference,
                    "gatehouse_events": ours if ours == reference else {},
                    **({} if ours == reference else {"gatehouse": ours, "langgraph_dev": reference}),
                }
    print(f"\n{'graph and mode':<30} start and resume, against langgraph dev")
    for mode, result in report["modes"].items():
        counts = {phase: len(events) for phase, events in result["gatehouse_events"].items()}
        inside = sum(1 for events in result["gatehouse_events"].values() for e in events if "|" in str(e))
        shown = (
            f"same events (start {counts.get('start', 0)}, resume {counts.get('resume', 0)}; {inside} from subgraphs)"
        )
        print(f"{mode:<30} {shown if result['same'] else 'DIFFERENT'}")
        if not result["same"]:
            for phase in ("start", "resume"):
                print(f"  {phase} gatehouse:     {result['gatehouse'][phase]}")
                print(f"  {phase} langgraph dev: {result['langgraph_dev'][phase]}")
    (OUT_DIR / "sdk_compat.json").write_text(json.dumps(report, indent=2))
    print(f"results written to {OUT_DIR / 'sdk_compat.json'}")
    return 0 if all(result["same"] for result in report["modes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
