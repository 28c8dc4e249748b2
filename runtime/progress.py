"""Progress bars for long management commands: drawn on a terminal, silent in logs.

``audit_verify``, ``audit_export`` and ``checkpoints_prune`` run by hand on a
terminal (a bar is welcome) and from cron, Kubernetes jobs or CI (carriage
returns in a log file are noise). The bar is drawn only when the stream is a
TTY. Here, in ``runtime``, because commands of every layer use it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from tqdm import tqdm

Update = Callable[..., None]


def progress_enabled(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def progress(
    total: int | None, *, desc: str, unit: str = "it", stream: TextIO | None = None, enabled: bool = True
) -> Iterator[Update]:
    """Yields ``update(done, total=None)``: the absolute count so far (and the total once known).

    Without a total the bar is a counter.
    """
    stream = stream or sys.stderr
    if not (enabled and progress_enabled(stream)):
        yield lambda done, total=None: None
        return
    bar = tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True, mininterval=0.2, leave=True)

    def update(done: int, total: int | None = None) -> None:
        if total is not None and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        bar.close()


@contextmanager
def progress_spinner(*, desc: str, stream: TextIO | None = None, enabled: bool = True) -> Iterator[None]:
    """Elapsed time on a terminal while a call that reports no progress of its own runs."""
    stream = stream or sys.stderr
    if not (enabled and progress_enabled(stream)):
        yield
        return
    bar = tqdm(total=None, desc=desc, file=stream, bar_format="{desc} {elapsed}", leave=False)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.5):
            bar.refresh()

    ticker = threading.Thread(target=tick, name="progress-spinner", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join(timeout=2)
        bar.close()
