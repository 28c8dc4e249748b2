"""The sweeper on SQLite (embedded mode): its compare-and-set on the dispatch stamp matches the stamp it wrote.

``Now()`` on SQLite writes text with milliseconds, which no Python datetime read back from it compares equal
to; a run re-sent once could then never be re-sent or dead-lettered again. The suite's own process runs on
PostgreSQL, so a probe runs tests/runtime/test_sweeper.py's lost-worker rounds on a fresh SQLite database.
"""

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
from django.test.utils import override_settings
from runtime import runs
from tests.runtime.test_sweeper import worker_lost_each_time

sent = []
runs.run_dispatch = lambda *, run_id: sent.append(run_id)
with override_settings(GATEHOUSE_MAX_RUN_ATTEMPTS=4):
    print(json.dumps(worker_lost_each_time(sent)))
"""


def test_a_run_whose_worker_is_lost_three_times_is_resent_each_time_then_dead_lettered_on_sqlite(tmp_path):
    rounds = sqlite_probe(_PROBE, tmp_path / "var")
    assert rounds == [[True, "running"]] * 3 + [[False, "failed"]]


_LEGACY_PROBE = """
import importlib
import json
import django
django.setup()
from django.apps import apps
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.db import connection
from django.db.models.functions import Now
from django.test.utils import override_settings
from runtime import runs
from runtime.models import Run
from tests.runtime.test_sweeper import _run

sent = []
runs.run_dispatch = lambda *, run_id: sent.append(run_id)
run = _run()
Run.objects.filter(pk=run.pk).update(dispatched_at=Now())  # as the sweeper stamped it before
out = {}
with connection.cursor() as cursor:
    cursor.execute("SELECT CAST(dispatched_at AS TEXT) FROM runtime_run WHERE id = %s", [run.pk.hex])
    out["stored"] = len(cursor.fetchone()[0])
migration = importlib.import_module("runtime.migrations.0015_run_dispatch_stamps_exact")
with connection.schema_editor() as editor:
    migration._stamps_exact(apps, editor)
with override_settings(GATEHOUSE_REDISPATCH_AFTER_SECONDS=0):
    runs.runs_sweep()
out["resent"] = run.id in sent
print(json.dumps(out))
"""


def test_a_run_stamped_by_the_old_sweeper_is_resent_after_the_migration_on_sqlite(tmp_path):
    found = sqlite_probe(_LEGACY_PROBE, tmp_path / "var")
    assert found == {"stored": len("2026-12-06 00:13:53.773"), "resent": True}
