"""Store writes are fenced on SQLite too (embedded mode, ``make run``'s default): ``fence_hold``'s SQLite
statement is a no-op update whose row count says whether the fence holds. The suite's own process runs on
PostgreSQL, so a probe runs the same takeover and cancel as tests/runtime/test_fencing.py on a fresh
SQLite database."""

from __future__ import annotations

import pytest

from tests.sqlite_probe import sqlite_probe

pytestmark = pytest.mark.usefixtures("live_db")

_PROBE = """
import json
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.db import transaction
from runtime.cancel import run_cancel
from runtime.fencing import LeaseLost, fence_hold
from runtime.runs import run_claim
from tests.runtime.test_fencing import _fenced_config, _memory, _run, _store_graph, _taken_over

def write(run, fence, by):
    try:
        _store_graph(run).invoke({"by": by}, _fenced_config(run.thread, fence))
        return "written"
    except LeaseLost as exc:
        return str(exc)

def shown(memory):
    return [memory[0] and memory[0][0], memory[1], memory[2]]

out = {}
a, b = _taken_over()
out["current"] = write(b, b.fence, "b")
before = _memory(b)
out["written"] = shown(before)
out["stale"] = write(a, a.fence, "zombie").replace(str(a.thread_id), "T")
out["after_stale"] = _memory(b) == before

run = run_claim(run_id=str(_run().id), worker="host:1:c")
kept = _memory(run)
with transaction.atomic():
    run_cancel(run=run, action="interrupt", actor_label="op", reason="stop")
out["cancelled"] = write(run, run.fence, "zombie").replace(str(run.thread_id), "T")
out["after_cancel"] = _memory(run) == kept

other = _run()
try:
    with transaction.atomic():
        fence_hold(thread_id=str(other.thread_id), fence=5, run_id=run.id)
    out["other"] = "held"
except LeaseLost as exc:
    out["other"] = str(exc).replace(str(other.thread_id), "T")
print(json.dumps(out))
"""


def test_a_stale_or_cancelled_runs_store_write_changes_nothing_on_sqlite(tmp_path):
    found = sqlite_probe(_PROBE, tmp_path / "var")
    assert found["current"] == "written"
    assert found["written"] == [{"paid_by": "b"}, 1, ["worker:host:2:b"]]
    assert found["stale"] == "thread T: write under fence 1 refused, the thread's fence is now 2"
    assert found["after_stale"] is True
    assert found["cancelled"] == "thread T: write under fence 1 refused, the thread's fence is now 2"
    assert found["after_cancel"] is True
    assert found["other"] == "thread T: write under fence 5 refused, the thread's fence is now 0"
