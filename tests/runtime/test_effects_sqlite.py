"""The effect key's input cycle on SQLite (embedded mode, ``make run``'s default): the ledger reads the
thread's start runs with one fixed statement, whose ids SQLite stores as text. The suite's own process runs
on PostgreSQL, so a probe runs tests/runtime/test_effects.py's cycle tests on a fresh SQLite database."""

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
from runtime import signals
from runtime.models import Effect
from tests.runtime import test_effects

out = {}
for name in (
    "test_a_finished_thread_given_new_input_pays_again_under_a_key_of_its_own",
    "test_a_second_cycles_effect_recorded_under_the_threads_key_keeps_answering",
    "test_the_start_run_after_a_rolled_back_one_continues_its_cycle",
):
    seen = []
    on = lambda sender, effect, **kwargs: seen.append(effect)
    signals.effect_executed.connect(on, sender=Effect, weak=False)
    try:
        getattr(test_effects, name)(seen)
        out[name] = "passed"
    except AssertionError as exc:
        out[name] = f"failed: {exc!r}"
    finally:
        signals.effect_executed.disconnect(on, sender=Effect)
print(json.dumps(out))
"""


def test_a_later_input_cycle_pays_under_its_own_key_on_sqlite(tmp_path):
    assert sqlite_probe(_PROBE, tmp_path) == {
        "test_a_finished_thread_given_new_input_pays_again_under_a_key_of_its_own": "passed",
        "test_a_second_cycles_effect_recorded_under_the_threads_key_keeps_answering": "passed",
        "test_the_start_run_after_a_rolled_back_one_continues_its_cycle": "passed",
    }
