"""Create (or upgrade) LangGraph's checkpoint tables with the saver's own setup()."""

from django.db import migrations


def checkpoint_tables_setup(apps, schema_editor):  # type: ignore[no-untyped-def]
    from runtime.checkpointer import checkpointer_close, checkpointer_setup

    checkpointer_setup()
    checkpointer_close()  # the migrating process should not keep a pool open


class Migration(migrations.Migration):
    # setup() manages its own connection and transactions.
    atomic = False
    dependencies = [("runtime", "0001_initial")]
    operations = [migrations.RunPython(checkpoint_tables_setup, migrations.RunPython.noop, elidable=False)]
