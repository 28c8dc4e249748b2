"""SQLite: rewrite the dispatch stamps of active runs that the sweeper wrote with ``Now()``.

``Now()`` stored milliseconds as text ('2026-12-06 00:13:53.773'), which the sweeper's compare-and-set
(``runtime.runs._redispatch_claim``) never matched again, so such a run was neither re-sent nor
dead-lettered. Written back as values they take the form the compare matches. PostgreSQL's
timestamps compare exactly already: nothing to do there.
"""

from typing import Any

from django.db import migrations

_ACTIVE = ("queued", "running")


def _stamps_exact(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    Run = apps.get_model("runtime", "Run")
    active = Run.objects.filter(status__in=_ACTIVE, dispatched_at__isnull=False)
    for run_id, stamp in active.values_list("id", "dispatched_at"):
        Run.objects.filter(pk=run_id).update(dispatched_at=stamp)


class Migration(migrations.Migration):
    dependencies = [("runtime", "0014_effect_status_unknown")]

    operations = [migrations.RunPython(_stamps_exact, migrations.RunPython.noop, elidable=True)]
