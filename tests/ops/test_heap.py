"""Server processes freeze their start-up heap (console/heap.py): daphne's application and the worker.

Each is started as its own interpreter, as daphne and ``celery worker`` start them, and asked how many
objects the garbage collector has frozen. Without the freeze, a full collection in a server walked
~250k start-up objects (~180 ms on 2 cores) — the pause behind the console's ~200 ms outliers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import scaled

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# Start-up objects of a server here: 240–280k; a process that froze nothing reports 0.
FROZEN_AT_LEAST = 100_000


def _frozen_after(code: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", f"import gc\n{code}\nprint(gc.get_freeze_count())"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.strip().splitlines()[-1])


def test_the_web_application_freezes_its_start_up_heap() -> None:
    assert _frozen_after("import console.asgi") >= FROZEN_AT_LEAST


def test_a_worker_freezes_its_heap_once_its_graphs_are_loaded() -> None:
    code = (
        "import django\n"
        "django.setup()\n"  # what the worker's Django fixup has done by worker_init
        "from console.celery import app\n"
        "app.finalize()\n"
        "from celery.signals import worker_init\n"
        "import runtime.registry as registry\n"
        "for receiver, result in worker_init.send(sender=None):\n"
        "    assert not isinstance(result, Exception), (receiver, result)\n"
        "assert registry._registry, 'the graphs load before the freeze'\n"
    )
    assert _frozen_after(code) >= FROZEN_AT_LEAST
