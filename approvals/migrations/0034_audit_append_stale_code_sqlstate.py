"""``gatehouse_audit_append`` refuses text from code older than the database with its own SQLSTATE, ``GH001``.

Migration 0032 refused the old form as ``check_violation``: an IntegrityError, which the API answered as a
500 ``internal`` on every audited write of a web process still running the code from before, as if it were a
defect. A refusal that means "this process is older than the database" is now SQLSTATE ``GH001`` (class GH:
Gatehouse's own, no PostgreSQL class uses it), which the API's error handler answers as a 503 naming the
cause: restart this process (``runtime.retry.STALE_CODE_SQLSTATE``; docs/deploy.md, "Upgrades").
Future functions that refuse a caller for being older than the schema raise the same code.
"""

from importlib import import_module

from django.db import migrations

_0032 = import_module("approvals.migrations.0032_audit_actor_id_hashed")

_OLD = "RAISE EXCEPTION USING ERRCODE = 'check_violation',"
_NEW = "RAISE EXCEPTION USING ERRCODE = 'GH001',"

if _0032.APPEND_SQL.count(_OLD) != 1:
    raise RuntimeError("migration 0032's function text is not the one 0034 rewrites")
APPEND_SQL = _0032.APPEND_SQL.replace(_OLD, _NEW)


def stale_code_sqlstate(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_SQL)


def check_violation(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_0032.APPEND_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0033_outbound_delivery_thread"),
    ]

    operations = [
        migrations.RunPython(stale_code_sqlstate, check_violation, elidable=False),
    ]
