"""Storage benchmark: a 200 KB document in state, plain PostgresSaver beside Gatehouse's saver.

    .venv/bin/python bench/storage.py [--threads 40] [--steps 6] [--rounds 3] [--doc-kb 200]

Self-contained: (re)creates the PostgreSQL database ``gatehouse_bench_storage``
(DATABASE_URL's server, default postgres@127.0.0.1:5432), migrates it, then
in this process runs the same graph — ``--steps`` nodes in a chain, each
appending to a small list while the document stays in state — with
``durability="sync"``, N threads per round, on:

- plain ``PostgresSaver`` on the same pool (the baseline), small state and
  with the document;
- Gatehouse's saver (blobs over GATEHOUSE_BLOB_THRESHOLD_BYTES stored once),
  small state and with the document.

Each thread gets its own document (random base64, so neither TOAST
compression nor cross-thread deduplication flatters the numbers): the targets
are judged on those. A second pair of rows stores a JSON document of the same
size (records of words, each thread's its own), which compresses as real
documents do; Gatehouse's blob column uses LZ4 (runtime/migrations/0010_lz4_compression), the
plain saver's tables PostgreSQL's default pglz. Bytes per
thread = stored size (``pg_column_size``) of the thread's rows in
checkpoints, checkpoint_blobs and checkpoint_writes, plus the blobs it
references. Prints medians with min–max over rounds; writes
var/bench/storage.json.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DB_NAME = "gatehouse_bench_storage"


def _setup_django() -> None:
    import psycopg

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gatehouse")
    server = base.rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [DB_NAME],
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
        conn.execute(f'CREATE DATABASE "{DB_NAME}"')
    os.environ["DATABASE_URL"] = f"{server}/{DB_NAME}"
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")  # required beside DATABASE_URL; unused here
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ.setdefault("GATEHOUSE_GRAPHS", str(ROOT / "demo" / "langgraph.json"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class State(TypedDict, total=False):
    document: str
    steps: list[str]


def _graph(saver: Any, steps: int) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(State)
    names = [f"s{i}" for i in range(steps)]
    for name in names:
        builder.add_node(name, lambda s, name=name: {"steps": [*s.get("steps", []), name]})
    builder.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        builder.add_edge(a, b)
    builder.add_edge(names[-1], END)
    return builder.compile(checkpointer=saver)


def _bytes(thread_ids: list[str]) -> int:
    from runtime.checkpointer import checkpointer_get

    with checkpointer_get()._cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(
            """SELECT
                 (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c WHERE thread_id = ANY(%(t)s))
               + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b WHERE thread_id = ANY(%(t)s))
               + (SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w WHERE thread_id = ANY(%(t)s))
               + (SELECT coalesce(sum(pg_column_size(x.*)), 0) FROM runtime_blob x
                  WHERE sha256 IN (SELECT sha256 FROM runtime_blobref WHERE thread_id = ANY(%(t)s)))
               AS n""",
            {"t": thread_ids},
        )
        return int(cur.fetchone()["n"])


# A vocabulary of 400 made-up words (fixed seed): records of names, words, ids and numbers, compressible about
# as much as a real document (neither a run of one word nor random bytes).
_WORDS = ["".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=3 + i % 8)) for i in range(400)]  # noqa: S311


def json_document(size: int) -> str:
    """About ``size`` bytes of JSON records, unique to the call: compressible as a real document is."""
    rng = random.Random(uuid.uuid4().int)  # noqa: S311 - test data, not a secret
    records, length = [], 0
    while length < size:
        record = json.dumps(
            {
                "row": len(records),
                "ref": uuid.UUID(int=rng.getrandbits(128)).hex[:12],
                "text": " ".join(rng.choices(_WORDS, k=10)),
                "amount": round(rng.random() * 100_000, 2),
            }
        )
        records.append(record)
        length += len(record) + 2
    return "[" + ", ".join(records) + "]"


def _document(doc_bytes: int, kind: str) -> str:
    if not doc_bytes:
        return "small"
    if kind == "json":
        return json_document(doc_bytes)
    return base64.b64encode(os.urandom(doc_bytes * 3 // 4)).decode()


def _round(saver: Any, *, threads: int, steps: int, doc_bytes: int, kind: str = "random") -> tuple[float, float]:
    graph = _graph(saver, steps)
    ids = [f"bench-{uuid.uuid4().hex}" for _ in range(threads)]
    docs = [_document(doc_bytes, kind) for _ in ids]
    started = time.perf_counter()
    for thread_id, doc in zip(ids, docs, strict=True):
        graph.invoke({"document": doc}, {"configurable": {"thread_id": thread_id}}, durability="sync")
    elapsed = time.perf_counter() - started
    return threads / elapsed, _bytes(ids) / threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--doc-kb", type=int, default=200)
    args = parser.parse_args()
    _setup_django()
    from langgraph.checkpoint.postgres import PostgresSaver

    from runtime.checkpointer import checkpointer_get

    gatehouse = checkpointer_get()
    plain = PostgresSaver(gatehouse.conn)  # type: ignore[attr-defined]
    doc = args.doc_kb * 1024
    scenarios = [
        ("plain PostgresSaver, small state", plain, 0, "random"),
        (f"plain PostgresSaver, {args.doc_kb} KB document", plain, doc, "random"),
        ("Gatehouse saver, small state", gatehouse, 0, "random"),
        (f"Gatehouse saver, {args.doc_kb} KB document", gatehouse, doc, "random"),
        (f"plain PostgresSaver, {args.doc_kb} KB JSON", plain, doc, "json"),
        (f"Gatehouse saver, {args.doc_kb} KB JSON", gatehouse, doc, "json"),
    ]
    _round(gatehouse, threads=3, steps=args.steps, doc_bytes=doc)  # warm up pools and imports
    results: dict[str, dict[str, list[float]]] = {name: {"tps": [], "bytes": []} for name, *_ in scenarios}
    for _ in range(args.rounds):
        for name, saver, size, kind in scenarios:
            tps, per_thread = _round(saver, threads=args.threads, steps=args.steps, doc_bytes=size, kind=kind)
            results[name]["tps"].append(tps)
            results[name]["bytes"].append(per_thread)

    def med(name: str, key: str) -> float:
        return statistics.median(results[name][key])

    names = [s[0] for s in scenarios]
    print(f"\n{args.threads} threads x {args.rounds} rounds, {args.steps} steps, durability=sync; median (min-max)\n")
    print(f"{'scenario':40} {'threads/s':>22} {'KB stored/thread':>24} {'x document':>11}")
    for name, _, size, _ in scenarios:
        tps, kb = results[name]["tps"], [b / 1024 for b in results[name]["bytes"]]
        ratio = f"{med(name, 'bytes') / size:.2f}" if size else "-"
        print(
            f"{name:40} {statistics.median(tps):9.1f} ({min(tps):5.1f}-{max(tps):5.1f}) "
            f"{statistics.median(kb):10.1f} ({min(kb):6.1f}-{max(kb):6.1f}) {ratio:>11}"
        )
    print()
    print(f"plain:     document / small throughput = {med(names[1], 'tps') / med(names[0], 'tps'):.2f}")
    print(f"gatehouse: document / small throughput = {med(names[3], 'tps') / med(names[2], 'tps'):.2f}")
    print(f"document bytes per thread, gatehouse / plain = {med(names[3], 'bytes') / med(names[1], 'bytes'):.2f}")
    json_tps = med(names[5], "tps") / med(names[4], "tps")
    print(
        f"JSON document (not a target): gatehouse / plain throughput = {json_tps:.2f}, "
        f"gatehouse stores {med(names[5], 'bytes') / doc:.2f}x the document, plain {med(names[4], 'bytes') / doc:.2f}x"
    )
    stored = med(names[3], "bytes") / doc
    kept = med(names[3], "tps") / med(names[2], "tps")
    print(f"target: a document costs ≤ 1.2x itself per thread: {stored:.2f}x — {'met' if stored <= 1.2 else 'MISSED'}")
    print(f"target: ≥ 0.8x the small state's throughput: {kept:.2f}x — {'met' if kept >= 0.8 else 'MISSED'}")
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "storage.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    from runtime.checkpointer import checkpointer_close

    checkpointer_close()


if __name__ == "__main__":
    main()
