"""Draw var/bench/summary.png from whatever scenario results exist under var/bench/ (``make bench`` calls it).

Each panel compares Gatehouse with the baseline measured in the same run.
Needs matplotlib (``pip install -e '.[bench]'``); without it, says so and exits 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "var" / "bench"


def _load(name: str) -> dict[str, Any] | None:
    path = OUT / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def main() -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart (pip install -e '.[bench]')")
        return 0
    fig, axes = plt.subplots(2, 3, figsize=(19, 9))
    fig.suptitle("Gatehouse benchmarks (ratios against a baseline from the same run)")

    full = _load("full_cycle")
    ax = axes[0][0]
    if full:
        rows = [r for r in full["results"] if r.get("throughput")]
        labels = sorted({r["scenario"] for r in rows})
        for offset, system in ((-0.2, "gatehouse"), (0.2, "baseline")):
            by_scenario = {r["scenario"]: r["throughput"] for r in rows if r["system"] == system}
            values = [by_scenario.get(s, 0) for s in labels]
            ax.bar([i + offset for i in range(len(labels))], values, width=0.4, label=system)
        ax.set_xticks(range(len(labels)), [s.replace(" → ", "→\n") for s in labels], fontsize=8)
        ax.set_ylabel("threads/s")
        ax.legend()
    ax.set_title("Full cycle throughput (vs raw LangGraph + PostgresSaver)")

    live = _load("live_latency")
    ax = axes[0][1]
    if live:
        for offset, key in ((-0.2, "websocket"), (0.2, "baseline_db_poll")):
            ax.bar([0 + offset, 1 + offset], [live[key]["p50_ms"], live[key]["p95_ms"]], width=0.4, label=key)
        ax.set_xticks([0, 1], ["p50", "p95"])
        ax.set_ylabel("ms")
        ax.legend()
    ax.set_title("Interrupt → task visible (websocket vs DB poll)")

    storage = _load("storage")
    ax = axes[1][0]
    if storage:
        names = list(storage["results"])
        values = [sum(storage["results"][n]["bytes"]) / len(storage["results"][n]["bytes"]) / 1024 for n in names]
        ax.barh(range(len(names)), values)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.set_xlabel("KiB stored per thread")
    ax.set_title("Checkpoint storage with a 200 KB document")

    scale = _load("console_scale")
    ax = axes[1][1]
    if scale:
        pages = [p for p in scale["pages"] if p.get("indexes") == "after"] or scale["pages"]
        ax.barh(range(len(pages)), [p["p95_ms"] for p in pages])
        ax.set_yticks(range(len(pages)), [p["page"] for p in pages], fontsize=8)
        ax.axvline(50, color="red", linestyle="--", label="50 ms target")
        ax.set_xlabel("server time p95, ms")
        ax.legend()
    ax.set_title("Console at 100k tasks / 1M audit events")

    audit = _load("audit_scaling")
    ax = axes[0][2]
    if audit:
        rows = audit["results"]
        modes = list(dict.fromkeys(r["mode"] for r in rows))
        processes = sorted({r["processes"] for r in rows})
        width = 0.8 / len(modes)
        for i, mode in enumerate(modes):
            mine = {r["processes"]: r for r in rows if r["mode"] == mode}
            x = [j + (i - (len(modes) - 1) / 2) * width for j in range(len(processes))]
            bars = ax.bar(x, [mine[k]["tx_per_s"] for k in processes], width=width, label=mode)
            if mode != "plain":  # how much of the workers' time went waiting for the chain lock
                labels = [f"{mine[k]['lock_wait_share']:.0%}" for k in processes]
                ax.bar_label(bars, labels=labels, fontsize=7)
        ax.set_xticks(range(len(processes)), [f"{k} processes" for k in processes])
        ax.set_ylabel("transactions/s (labels: lock wait)")
        ax.legend(fontsize=8)
    ax.set_title("Audited transactions vs worker processes")
    axes[1][2].axis("off")

    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / "summary.png", dpi=90)
    print(f"chart: {OUT / 'summary.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
