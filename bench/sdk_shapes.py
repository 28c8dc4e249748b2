"""langgraph-sdk payload parity: the shape of every answer ``/lg/`` gives, against ``langgraph dev``'s.

    .venv/bin/python bench/sdk_shapes.py [--langgraph-dev-python PATH]

Not a measurement of speed. The same two servers as bench/sdk_compat.py; the
official ``langgraph_sdk`` sync client makes the calls a LangGraph Platform
client makes around one thread of the demo graph (assistants, threads, runs,
state, history, a start to the gate's interrupt and its resume, streamed in
every mode; and a graph whose pause is inside a subgraph, streamed in every mode
with ``stream_subgraphs``) on both, and compares each answer's *shape*: the keys of every
object and the JSON type of every value, recursively (values themselves differ:
ids, times, Gatehouse's reviewer names). A key one side sends and the other
does not, or a value of another type (``null`` included), is a difference.

Statuses are compared by value (a run that paused at an interrupt is
"success" on LangGraph Server, its thread "interrupted").

``ACCEPTED`` lists the differences we keep, each with its reason; anything
else makes the script exit 1. Results: ``var/bench/sdk_shapes.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.full_cycle import OUT_DIR, loan_input  # noqa: E402
from bench.sdk_compat import CLIENT_MODES  # noqa: E402
from bench.sdk_wait import RESUME, Side, both_servers, servers_arguments  # noqa: E402

_SERVER_KEYS = (
    r"(langgraph_\w+|__after_seconds__|__request_start_time_ms__|assistant_id|graph_id|run_id|user_id|created_by"
    r"|run_attempt|parents|thread_id|bench)"
)
# (call, path, why) — differences kept on purpose, as regular expressions over the call's name and the
# path (the answer walked with "." for a key, "[]" for any list element, "<id>" for an id used as a key).
ACCEPTED: list[tuple[str, str, str]] = [
    (
        r"crons\..*",
        r"\.payload\.config$",
        "LangGraph Server puts a cron's id in its runs' configurable; Gatehouse's runs take no configurable "
        "values, and carry it in metadata.cron_id",
    ),
    (r"stream .*: end", r"", "Gatehouse ends every stream with an `end` event (the SDK reconnects without one)"),
    (
        r".*",
        rf"\.(config|parent_config)\.configurable\.{_SERVER_KEYS}$",
        "LangGraph Server puts its request and auth context in a run's configurable; Gatehouse does not run "
        "LangGraph Server's auth",
    ),
    (
        r"runs\.(get|list)",
        r"\.kwargs\.config\.configurable\.__pregel_node_finished$",
        "langgraph dev's in-memory runtime writes its node counter (a LangGraph internal) into the stored run's "
        "configurable as it executes the run: no option of the run",
    ),
    (
        r".*",
        r"\.configurable\.gatehouse_(fence|run_id)$",
        "Gatehouse's own configurable: the run's fence (zombie writers) and its run id",
    ),
    (
        r".*",
        rf"\.metadata\.{_SERVER_KEYS}$",
        "LangGraph Server copies its run metadata into every checkpoint (and task); Gatehouse's checkpoints "
        "keep the thread's own metadata",
    ),
    (
        r".*",
        r"\.metadata\.gatehouse_(fence|run_id|schema_version)$",
        "Gatehouse's checkpoint metadata: which claim wrote it, and the state schema's version (upcasters)",
    ),
    (r"stream tasks .*", r"\[\]\.metadata$", "LangGraph Server's run metadata, as above"),
    (
        r"stream (checkpoints|debug) nested resume: .*\(subgraph\)",
        r"\.metadata\.checkpoint_(map|ns)$",
        "LangGraph Server copies the resumed subgraph's configurable (with the rest of its run metadata) into "
        "the first checkpoint the subgraph writes",
    ),
    (
        r"threads\.get_(state|history).*",
        r"\.metadata\.writes$",
        "the nodes whose writes made the checkpoint (LangGraph 1.x dropped it; the console shows it)",
    ),
    (
        r"threads\.get_(state|history).*",
        r"\.state_unreadable$",
        "Gatehouse says why the graph cannot load a checkpoint (empty when it can; docs/platform-api.md)",
    ),
    (
        r"threads\.(get|search).*",
        r"\.config\.configurable$",
        "a thread's config: Gatehouse sends {} (langgraph dev sends {} at creation, {configurable: {}} after)",
    ),
    (
        r"threads\.(create|copy)",
        r"\.(error|interrupts|values)$",
        "Gatehouse answers with the whole thread (the SDK's Thread type has values, interrupts and error)",
    ),
    (
        r"assistants\.get_(schemas|subgraphs)",
        r"\.(input|output|state)_schema(\.|$)",
        "Gatehouse's schemas are the ones it validates inputs and state edits against (no titles or defaults, "
        "additionalProperties false); langgraph dev 0.16.7 could not build this graph's input and output schemas",
    ),
    (
        r"runs\..*",
        r"\.kwargs\.\w+$",
        "a run's kwargs hold its config only: its input and command would repeat state a reader may see only masked",
    ),
    (r"runs\..*", r"\.langsmith_session_name$", "no LangSmith tracing project in Gatehouse"),
    (
        r"runs\..*",
        r"\.(error|metadata\.kind|metadata\.attempts)$",
        "Gatehouse says why a run failed or was cancelled, its kind (start, resume, ...) and its attempts",
    ),
    (r"assistants\..*", r"\.description$", "Gatehouse describes each graph (its docstring); langgraph dev: null"),
    (
        r"stream events (nested )?resume.*",
        r"\.data\.input\.(goto|resume\.[\w<>]+)$",
        "Gatehouse resumes with Command(resume={interrupt id: value}) (goto left at its default), the "
        "reviewer's decision keyed by the interrupt it answers",
    ),
]


# What is streamed in every mode, start and resume: (label in the call's name, graph, its input, its
# resume, stream_subgraphs). The graph whose pause is in a subgraph streams with its subgraphs, whose
# own events ("<mode>|<namespace>") are compared apart from the root's.
STREAMED: tuple[tuple[str, str, Callable[[], dict[str, Any]], dict[str, Any], bool], ...] = (
    ("", "loan_approval", loan_input, RESUME, False),
    (" nested", "nested_review", lambda: {"amount": 5}, {"decision": "approve"}, True),
)

_ID = re.compile(r"^([\w-]+:)?[0-9a-f-]{16,}(\|[\w-]+:[0-9a-f-]{16,})*$")  # an id, or a namespace of ids


def shape(value: Any) -> Any:
    """The JSON shape of a value: objects keep their keys, lists merge their elements, scalars become type names.

    A key that is an id (an interrupt's, in a thread's ``interrupts``) or a subgraph's namespace (in a
    ``checkpoint_map``) becomes ``<id>``.
    """
    if isinstance(value, dict):
        shaped: dict[str, Any] = {}
        for key, item in value.items():
            key = "<id>" if _ID.match(key) else key
            # A status is compared by value: the same shape with another meaning is a difference too.
            shown = repr(item) if key == "status" and isinstance(item, str) else shape(item)
            shaped[key] = _merge(shaped.get(key), shown)
        return shaped
    if isinstance(value, list):
        merged: Any = None
        for item in value:
            merged = _merge(merged, shape(item))
        return [merged] if value else []
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _merge(a: Any, b: Any) -> Any:
    if a is None or b is None:  # absent on one side (not JSON null, which is "null")
        return b if a is None else a
    if "null" in (a, b) and (isinstance(a, dict) or isinstance(b, dict)):  # an object or null
        return {**(a if isinstance(a, dict) else b), "<or null>": "null"}
    if isinstance(a, dict) and isinstance(b, dict):
        return {key: _merge(a.get(key), b.get(key)) for key in {**a, **b}}
    if isinstance(a, list) and isinstance(b, list):
        return [_merge(a[0] if a else None, b[0] if b else None)] if a or b else []
    return a if a == b else f"{a}|{b}"


def differences(ours: Any, theirs: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, what differs) between two shapes."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted({*ours, *theirs}):
            sub = f"{path}.{key}"
            if key not in theirs:
                yield sub, "only gatehouse sends it"
            elif key not in ours:
                yield sub, "only langgraph dev sends it"
            else:
                yield from differences(ours[key], theirs[key], sub)
    elif isinstance(ours, list) and isinstance(theirs, list):
        if ours and theirs:
            yield from differences(ours[0], theirs[0], f"{path}[]")
        elif ours or theirs:
            sizes = ("a non-empty" if ours else "an empty", "a non-empty" if theirs else "an empty")
            yield path, f"gatehouse {sizes[0]} list, langgraph dev {sizes[1]} one"
    elif ours != theirs:
        yield path, f"gatehouse {_kind(ours)}, langgraph dev {_kind(theirs)}"


def _kind(shaped: Any) -> str:
    return "an object" if isinstance(shaped, dict) else "a list" if isinstance(shaped, list) else str(shaped)


def answers(side: Side, dump: Path | None = None) -> dict[str, Any]:
    """Each call's answer (its shape), around one thread: start, interrupt, resume, and streams in every mode."""
    from langgraph_sdk import get_sync_client

    operator = get_sync_client(url=side.url, api_key=side.operator_key, timeout=60)
    reviewer = get_sync_client(url=side.url, api_key=side.reviewer_key, timeout=60) if side.reviewer_key else operator
    seen: dict[str, Any] = {}
    found = operator.assistants.search(graph_id="loan_approval")
    seen["assistants.search"] = found
    seen["assistants.count"] = operator.assistants.count(graph_id="loan_approval")
    assistant = found[0]["assistant_id"]
    seen["assistants.get"] = operator.assistants.get(assistant)
    seen["assistants.get_graph"] = operator.assistants.get_graph(assistant)
    seen["assistants.get_schemas"] = operator.assistants.get_schemas(assistant)
    seen["assistants.get_versions"] = operator.assistants.get_versions(assistant)
    thread = operator.threads.create(metadata={"bench": "shapes"})
    seen["threads.create"] = thread
    thread_id = thread["thread_id"]
    run = operator.runs.create(thread_id, assistant, input=loan_input())
    seen["runs.create"] = run
    seen["runs.join (to the interrupt)"] = operator.runs.join(thread_id, run["run_id"])
    seen["runs.get"] = operator.runs.get(thread_id, run["run_id"])
    seen["threads.get (interrupted)"] = operator.threads.get(thread_id)
    seen["threads.get_state (interrupted)"] = operator.threads.get_state(thread_id)
    seen["threads.get_history (interrupted)"] = operator.threads.get_history(thread_id, limit=3)
    seen["runs.wait (resume)"] = reviewer.runs.wait(thread_id, assistant, command={"resume": RESUME})
    seen["runs.list"] = operator.runs.list(thread_id)
    seen["threads.get (idle)"] = operator.threads.get(thread_id)
    seen["threads.get_state (idle)"] = operator.threads.get_state(thread_id)
    seen["threads.search"] = operator.threads.search(metadata={"bench": "shapes"}, limit=5)
    seen["threads.update"] = operator.threads.update(thread_id, metadata={"title": "shapes"})
    seen["threads.update_state"] = operator.threads.update_state(thread_id, {"status": "reviewed"})
    seen["threads.copy"] = operator.threads.copy(thread_id, headers={"X-Gatehouse-Reason": "bench: answer shapes"})
    nested = operator.threads.create()["thread_id"]
    seen["runs.wait (paused in a subgraph)"] = operator.runs.wait(nested, "nested_review", input={"amount": 5})
    seen["threads.get_state (subgraphs)"] = operator.threads.get_state(nested, subgraphs=True)
    seen["threads.get_history (subgraph paused)"] = operator.threads.get_history(nested, limit=5)
    nested_assistant = operator.assistants.search(graph_id="nested_review")[0]["assistant_id"]
    seen["assistants.get_subgraphs"] = operator.assistants.get_subgraphs(nested_assistant, recurse=True)
    # Stateless runs: langgraph dev deletes each thread afterwards (on_completion's default), Gatehouse keeps it.
    seen["runs.wait (stateless, to the interrupt)"] = operator.runs.wait(None, assistant, input=loan_input())
    seen["runs.create (stateless)"] = operator.runs.create(None, assistant, input=loan_input())
    batch = [{"assistant_id": assistant, "input": loan_input()}]
    seen["runs.create_batch (stateless)"] = operator.runs.create_batch(batch)  # type: ignore[list-item]
    for part in operator.runs.stream(None, assistant, input=loan_input(), stream_mode="values"):
        key = f"stream values stateless: {part.event}"
        seen[key] = [*seen.get(key, []), part.data]
    # Crons (never due: New Year's midnight), on the thread and not; deleted at the end.
    cron = operator.crons.create(assistant, schedule="0 0 1 1 *", input=loan_input(), metadata={"bench": "shapes"})
    seen["crons.create"] = cron
    on_thread = operator.crons.create_for_thread(thread_id, assistant, schedule="0 0 1 1 *", input=loan_input())
    seen["crons.create_for_thread"] = on_thread
    seen["crons.search"] = operator.crons.search(thread_id=thread_id)
    seen["crons.search (select)"] = operator.crons.search(thread_id=thread_id, select=["cron_id", "schedule"])
    seen["crons.count"] = operator.crons.count(thread_id=thread_id)
    seen["crons.update"] = operator.crons.update(on_thread["cron_id"], schedule="30 9 * * 1-5")
    for made in (cron, on_thread):
        operator.crons.delete(made["cron_id"])
    namespace = ["bench", "shapes"]
    seen["store.put_item"] = operator.store.put_item(namespace, "k", {"note": "n"})
    seen["store.get_item"] = operator.store.get_item(namespace, "k")
    seen["store.search_items"] = operator.store.search_items(namespace)
    seen["store.list_namespaces"] = operator.store.list_namespaces(prefix=["bench"])
    for label, graph, start_input, resume, subgraphs in STREAMED:
        graph_assistant = operator.assistants.search(graph_id=graph)[0]["assistant_id"]
        for mode in CLIENT_MODES:
            streamed = operator.threads.create()["thread_id"]
            for phase, client, kwargs in (
                ("start", operator, {"input": start_input()}),
                ("resume", reviewer, {"command": {"resume": resume}}),
            ):
                options = {"stream_mode": mode, "stream_subgraphs": subgraphs, **kwargs}
                for part in client.runs.stream(streamed, graph_assistant, **options):  # type: ignore[call-overload]
                    name, _, namespace = part.event.partition("|")
                    key = f"stream {mode}{label} {phase}: {name}{' (subgraph)' if namespace else ''}"
                    seen[key] = [*seen.get(key, []), part.data]
    if dump is not None:
        (dump / f"sdk_shapes_{side.name.split()[0]}.json").write_text(json.dumps(seen, indent=1, default=str))
    return {call: shape(answer) for call, answer in seen.items()}


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> list[dict[str, str]]:
    found = []
    for call in sorted({*ours, *theirs}):
        if call not in theirs or call not in ours:
            only = "gatehouse" if call in ours else "langgraph dev"
            found.append({"call": call, "path": "", "what": f"only {only}"})
            continue
        for path, what in differences(ours[call], theirs[call]):
            found.append({"call": call, "path": path, "what": what})
    return found


def _accepted(found: dict[str, str]) -> str | None:
    for call, path, why in ACCEPTED:
        if not re.fullmatch(call, found["call"]):
            continue
        if re.search(path, found["path"]) if path else not found["path"]:
            return why
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    servers_arguments(parser, db="gatehouse_bench_shapes")
    parser.add_argument("--dump", action="store_true", help="also write both sides' answers as they came")
    args = parser.parse_args()
    dump = OUT_DIR if args.dump else None
    report: dict[str, Any] = {}
    with both_servers(args) as (mine, theirs):
        if isinstance(theirs, str):
            print(f"langgraph dev {theirs}: nothing to compare with")
            (OUT_DIR / "sdk_shapes.json").write_text(json.dumps({"langgraph_dev": theirs}, indent=2))
            return 0
        found = compare(answers(mine, dump), answers(theirs, dump))
    for item in found:
        reason = _accepted(item)
        item["accepted"] = reason or ""
    report["differences"] = found
    unexpected = [item for item in found if not item["accepted"]]
    print(f"\n{len(found)} differences in payload shape against langgraph dev, {len(unexpected)} not accepted")
    for item in unexpected:
        print(f"  DIFFERENT {item['call']} {item['path'] or '(whole answer)'}: {item['what']}")
    by_reason = Counter(item["accepted"] for item in found if item["accepted"])
    for reason, count in by_reason.most_common():
        print(f"  accepted ({count}): {reason}")
    (OUT_DIR / "sdk_shapes.json").write_text(json.dumps(report, indent=2))
    print(f"results written to {OUT_DIR / 'sdk_shapes.json'}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
