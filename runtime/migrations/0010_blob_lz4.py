"""Large checkpoint values (``runtime_blob.data``) compressed with LZ4 where the server has it.

PostgreSQL compresses a value it moves to TOAST with pglz by default. pglz is
slow, and it gives up on a value it cannot shrink by a quarter after doing the
work: a 239 KB JSON document that LZ4 stores in 185 KB took pglz 8.2 ms to
insert and was stored as it came (2.3 ms with LZ4), and a random 200 KB one
2.1 ms against 1.7 (one insert at a time; docs/performance.md, round 17).
Documents in state are what spills here, so the column uses LZ4 when the
server was built with it (PostgreSQL 14 and later lists it among
``default_toast_compression``'s values); elsewhere pglz stays. Rows already
stored keep their compression; both read back the same.
"""

from django.db import migrations

LZ4_AVAILABLE = "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"


def lz4_compression(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(LZ4_AVAILABLE)
        if cursor.fetchone() is not None:
            cursor.execute("ALTER TABLE runtime_blob ALTER COLUMN data SET COMPRESSION lz4")


def default_compression(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(LZ4_AVAILABLE)
        if cursor.fetchone() is not None:
            cursor.execute("ALTER TABLE runtime_blob ALTER COLUMN data SET COMPRESSION DEFAULT")


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0009_fence_hold_function"),
    ]

    operations = [
        migrations.RunPython(lz4_compression, default_compression, elidable=False),
    ]
