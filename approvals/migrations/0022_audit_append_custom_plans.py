"""``gatehouse_audit_append`` plans its statements for the chain at hand, every call.

PL/pgSQL caches the plans of a function's statements, and after five calls
may keep a generic plan that ignores the parameter's value. For the chain's
head (``WHERE chain = $1 ORDER BY id DESC LIMIT 1``) the generic plan walks
the primary key backwards and filters on the chain, reading every newer event
of every other chain first: an append to a quiet chain got slower as the
others grew (seen in ``bench/audit_scaling.py``: audited tx/s fell from 358
to 82 between rounds). A custom plan uses the ``audit_chain_head`` index and
reads one row. Planning it costs a few hundredths of a millisecond.
"""

from django.db import migrations

SIGNATURE = (
    "gatehouse_audit_append(integer, smallint, text, text, timestamptz, integer, varchar, varchar, varchar, "
    "varchar, uuid, varchar, jsonb)"
)


def custom_plans(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER FUNCTION {SIGNATURE} SET plan_cache_mode = force_custom_plan")


def cached_plans(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER FUNCTION {SIGNATURE} RESET plan_cache_mode")


class Migration(migrations.Migration):

    dependencies = [
        ("approvals", "0021_audit_append_function"),
    ]

    operations = [
        migrations.RunPython(custom_plans, cached_plans, elidable=False),
    ]
