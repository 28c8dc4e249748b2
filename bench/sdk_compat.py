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
Results: ``var/bench/sdk_compat.json``; exits 1 when a mode differs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import OUT_DIR, loan_input, log  # noqa: E402
from bench.sdk_wait import RESUME, Side, Unavailable, gatehouse, langgraph_dev, servers_arguments  # noqa: E402

# runtime.stream.CLIENT_MODES (importing it needs Django settings); tests/perf/test_sdk_compat.py keeps them equal.
CLIENT_MODES = ("values", "updates", "messages", "messages-tuple", "events", "debug", "custom", "tasks", "checkpoints")


def _seen(part_event: str, data: Any, mode: str) -> Any:
    """What is compared of one SSE event."""
    if mode == "events" and part_event == "events" and isinstance(data, dict):
        return [data.get("event"), data.get("name"), data.get("tags"), sorted(data.get("data") or {})]
    return part_event


def stream_both_phases(side: Side, mode: str) -> dict[str, list[Any]]:
    from langgraph_sdk import get_sync_client

    operator = get_sync_client(url=side.url, api_key=side.operator_key, timeout=60)
    reviewer = get_sync_client(url=side.url, api_key=side.reviewer_key, timeout=60) if side.reviewer_key else operator
    assistant = operator.assistants.search(graph_id="loan_approval")[0]["assistant_id"]
    thread = operator.threads.create()["thread_id"]
    start = operator.runs.stream(thread, assistant, input=loan_input(), stream_mode=mode)  # type: ignore[arg-type]
    seen = {"start": [_seen(p.event, p.data, mode) for p in start]}
    resume = reviewer.runs.stream(thread, assistant, command={"resume": RESUME}, stream_mode=mode)  # type: ignore[arg-type]
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
    with contextlib.ExitStack() as stack:
        log("gatehouse /lg/ and langgraph dev: starting")
        mine = stack.enter_context(gatehouse(args))
        try:
            theirs = stack.enter_context(langgraph_dev(args))
        except Unavailable as exc:
            print(f"langgraph dev {exc}: nothing to compare with")
            report["langgraph_dev"] = str(exc)
            (OUT_DIR / "sdk_compat.json").write_text(json.dumps(report, indent=2))
            return 0
        for mode in CLIENT_MODES:
            ours, reference = stream_both_phases(mine, mode), stream_both_phases(theirs, mode)
            report["modes"][mode] = {
                "same": ours == reference,
                **({} if ours == reference else {"gatehouse": ours, "langgraph_dev": reference}),
            }
    print(f"\n{'mode':<16} start and resume, against langgraph dev")
    for mode, result in report["modes"].items():
        print(f"{mode:<16} {'same events' if result['same'] else 'DIFFERENT'}")
        if not result["same"]:
            for phase in ("start", "resume"):
                print(f"  {phase} gatehouse:     {result['gatehouse'][phase]}")
                print(f"  {phase} langgraph dev: {result['langgraph_dev'][phase]}")
    (OUT_DIR / "sdk_compat.json").write_text(json.dumps(report, indent=2))
    print(f"results written to {OUT_DIR / 'sdk_compat.json'}")
    return 0 if all(result["same"] for result in report["modes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
