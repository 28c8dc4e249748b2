"""Anchors of the audit chain in their own append-only table, and TRUNCATE refused on both audit tables.

0003 made audit rows refuse UPDATE and DELETE, but those are row triggers:
TRUNCATE (or ``TRUNCATE auth_user CASCADE``) fires none of them and emptied
the trail, after which ``audit_verify`` said "intact: 0 events". A
statement-level BEFORE TRUNCATE trigger with the same function closes that;
the anchors (chain length + head hash) let ``audit_verify`` see a tail that
was cut off by someone who can switch triggers off.

PostgreSQL only: SQLite has no TRUNCATE and this project installs no
triggers there (see docs/security-audit.md).
"""

from django.db import migrations, models

GUARD_SQL = """
CREATE OR REPLACE FUNCTION gatehouse_audit_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'audit events are append-only: %% refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS approvals_auditevent_no_truncate ON approvals_auditevent;
CREATE TRIGGER approvals_auditevent_no_truncate BEFORE TRUNCATE ON approvals_auditevent
  FOR EACH STATEMENT EXECUTE FUNCTION gatehouse_audit_append_only();
DROP TRIGGER IF EXISTS approvals_auditanchor_append_only ON approvals_auditanchor;
CREATE TRIGGER approvals_auditanchor_append_only BEFORE UPDATE OR DELETE ON approvals_auditanchor
  FOR EACH ROW EXECUTE FUNCTION gatehouse_audit_append_only();
DROP TRIGGER IF EXISTS approvals_auditanchor_no_truncate ON approvals_auditanchor;
CREATE TRIGGER approvals_auditanchor_no_truncate BEFORE TRUNCATE ON approvals_auditanchor
  FOR EACH STATEMENT EXECUTE FUNCTION gatehouse_audit_append_only();
"""
UNGUARD_SQL = """
DROP TRIGGER IF EXISTS approvals_auditevent_no_truncate ON approvals_auditevent;
DROP TRIGGER IF EXISTS approvals_auditanchor_append_only ON approvals_auditanchor;
DROP TRIGGER IF EXISTS approvals_auditanchor_no_truncate ON approvals_auditanchor;
"""


def guard_on(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(GUARD_SQL)


def guard_off(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNGUARD_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0005_console_scale_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditAnchor",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("at", models.DateTimeField()),
                ("head_id", models.BigIntegerField()),
                ("head_hash", models.CharField(max_length=64)),
                ("length", models.PositiveBigIntegerField()),
            ],
        ),
        migrations.RunPython(guard_on, guard_off),
    ]
