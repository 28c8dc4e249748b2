"""Large values compressed with LZ4 where the server has it: spilled checkpoint values (``runtime_blob.data``)
and the state and inputs a thread's rows carry (``runtime_thread.values``, ``runtime_run.input`` and ``command``).

PostgreSQL compresses a value it moves to TOAST with pglz by default. pglz is
slow, and it gives up on a value it cannot shrink by a quarter after doing the
work: a 239 KB JSON document that LZ4 stores in 185 KB took pglz 8.2 ms to
insert and was stored as it came (2.3 ms with LZ4), and a random 200 KB one
2.1 ms against 1.7 (one insert at a time; docs/performance.md, round 17).
Documents in state are what spills to blobs, and what a start's input and a
thread's mirrored values hold: these columns use LZ4 when the server was built
with it (PostgreSQL 14 and later lists it among ``default_toast_compression``'s
values); elsewhere pglz stays. Values under ~2 KB are never compressed either
way. Rows already stored keep their compression; both read back the same.
"""

from django.db import migrations

LZ4_AVAILABLE = "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
COLUMNS = (("runtime_blob", "data"), ("runtime_thread", "values"), ("runtime_run", "input"), ("runtime_run", "command"))


def _compression_set(schema_editor, method: str) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(LZ4_AVAILABLE)
        if cursor.fetchone() is None:
            return
        quote = schema_editor.quote_name
        for table, column in COLUMNS:
            cursor.execute(f"ALTER TABLE {quote(table)} ALTER COLUMN {quote(column)} SET COMPRESSION {method}")


def lz4_compression(apps, schema_editor):  # type: ignore[no-untyped-def]
    _compression_set(schema_editor, "lz4")


def default_compression(apps, schema_editor):  # type: ignore[no-untyped-def]
    _compression_set(schema_editor, "DEFAULT")


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0009_fence_hold_function"),
    ]

    operations = [
        migrations.RunPython(lz4_compression, default_compression, elidable=False),
    ]
