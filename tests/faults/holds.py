"""Hold points for the ``zombie_pay`` test graph (tests/graphs/zombie.py), and worker signals."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.faults.conftest import FaultWorker


def pay_input(hold_dir: Path, hold: str, *, review: bool = False) -> dict[str, Any]:
    return {
        "payment_id": f"P-{hold_dir.name[-8:]}",
        "amount": 120,
        "review": review,
        "hold": hold,
        "hold_dir": str(hold_dir),
    }


def hold_reached(hold_dir: Path, point: str, *, besides: int | None = None) -> int | None:
    for path in hold_dir.glob(f"{point}.*.reached"):
        pid = int(path.name.split(".")[1])
        if pid != besides:
            return pid
    return None


def hold_release(hold_dir: Path, point: str, pid: int) -> None:
    Path(hold_dir / f"{point}.{pid}.go").write_text("go")


def signal_group(worker: FaultWorker, sig: signal.Signals) -> None:
    assert worker.proc is not None
    os.killpg(worker.proc.pid, sig)


def logged(worker: FaultWorker, text: str) -> bool:
    return text in worker.log_path.read_text(errors="replace")
