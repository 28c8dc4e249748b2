"""Fenced checkpoint writes: what a claimed run's fence costs each checkpoint write, beside unfenced writes.

    .venv/bin/python bench/fenced_writes.py [--threads 40] [--steps 6] [--rounds 5]

Self-contained like bench/storage.py (whose database setup and graph it reuses):
(re)creates ``gatehouse_bench_storage``, migrates it, then in this process runs
a chain of ``--steps`` nodes with ``durability="sync"`` on Gatehouse's saver,
N threads per round, each thread a ``runtime_thread`` row:

- fenced: the config carries the thread's fence (``gatehouse_fence``), as a
  worker's run does, so every checkpoint and pending write checks it in the
  same transaction (``runtime.fencing``);
- unfenced (the baseline): the same graph and saver without a fence, as the
  console's state edits write.

Rounds alternate the two; prints the medians of wall and CPU time (this
process) per thread and the ratio; writes var/bench/fenced_writes.json. With
steps=6 a thread makes 13 fenced writes (7 checkpoints, 6 pending writes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.storage import _graph, _setup_django  # noqa: E402


def _round(graph: Any, *, threads: int, fenced: bool) -> tuple[float, float]:
    """Wall and CPU milliseconds per thread for ``threads`` threads run one after another."""
    from runtime.fencing import FENCE_KEY
    from runtime.models import Thread

    rows = [Thread.objects.create(graph="bench_fenced") for _ in range(threads)]
    wall, cpu = time.perf_counter(), time.process_time()
    for row in rows:
        configurable: dict[str, Any] = {"thread_id": str(row.id)}
        if fenced:
            configurable[FENCE_KEY] = row.fence
        graph.invoke({"document": "small"}, {"configurable": configurable}, durability="sync")
    return (time.perf_counter() - wall) * 1000 / threads, (time.process_time() - cpu) * 1000 / threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    _setup_django()
    from runtime.checkpointer import checkpointer_close, checkpointer_get

    graph = _graph(checkpointer_get(), args.steps)
    _round(graph, threads=3, fenced=True)  # warm up pools and imports
    results: dict[str, dict[str, list[float]]] = {m: {"wall": [], "cpu": []} for m in ("fenced", "unfenced")}
    for _ in range(args.rounds):
        for mode in ("fenced", "unfenced"):
            wall, cpu = _round(graph, threads=args.threads, fenced=mode == "fenced")
            results[mode]["wall"].append(wall)
            results[mode]["cpu"].append(cpu)
    med = {m: {k: statistics.median(v) for k, v in r.items()} for m, r in results.items()}
    print(f"\n{args.threads} threads x {args.rounds} rounds, {args.steps} steps, durability=sync; medians per thread\n")
    for mode in ("unfenced", "fenced"):
        print(f"{mode:10} wall {med[mode]['wall']:7.2f} ms   CPU (this process) {med[mode]['cpu']:7.2f} ms")
    print(
        f"fenced / unfenced: wall {med['fenced']['wall'] / med['unfenced']['wall']:.2f}x, "
        f"CPU {med['fenced']['cpu'] / med['unfenced']['cpu']:.2f}x"
    )
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fenced_writes.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    checkpointer_close()


if __name__ == "__main__":
    main()
