"""Signed decisions refuse DELETE, TRUNCATE and any UPDATE of what was signed, as the audit tables do.

The decision table had no trigger: ``TRUNCATE approvals_decision CASCADE`` by a
database user emptied it, and the effects those decisions authorised were
left with nothing signed behind them. Now a row trigger refuses DELETE and any
UPDATE but the one the application makes after insert: naming the resume run
that carried the decision, once (``run_id`` from NULL to a run; a quorum's
earlier decisions wait for it). A statement trigger refuses TRUNCATE, including
one cascading from ``approvals_approvaltask`` or ``auth_user``. No code path
deletes decisions (their task and actor are PROTECTed; retention prunes
checkpoints and blobs only).

PostgreSQL only, as for the audit tables (SQLite gets no triggers; see
docs/security-audit.md). Someone who switches triggers off can still delete a
row: ``decisions_verify`` names a decision the audit trail records and the
table lost.
"""

from django.db import migrations

GUARD_SQL = """
CREATE OR REPLACE FUNCTION gatehouse_decision_append_only() RETURNS trigger AS $$
BEGIN
  IF TG_LEVEL = 'ROW' AND TG_OP = 'UPDATE' THEN
    IF OLD.run_id IS NULL AND (to_jsonb(NEW) - 'run_id') IS NOT DISTINCT FROM (to_jsonb(OLD) - 'run_id') THEN
      RETURN NEW;
    END IF;
  END IF;
  RAISE EXCEPTION 'signed decisions are append-only: %% refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS approvals_decision_append_only ON approvals_decision;
CREATE TRIGGER approvals_decision_append_only BEFORE UPDATE OR DELETE ON approvals_decision
  FOR EACH ROW EXECUTE FUNCTION gatehouse_decision_append_only();
DROP TRIGGER IF EXISTS approvals_decision_no_truncate ON approvals_decision;
CREATE TRIGGER approvals_decision_no_truncate BEFORE TRUNCATE ON approvals_decision
  FOR EACH STATEMENT EXECUTE FUNCTION gatehouse_decision_append_only();
"""
UNGUARD_SQL = """
DROP TRIGGER IF EXISTS approvals_decision_append_only ON approvals_decision;
DROP TRIGGER IF EXISTS approvals_decision_no_truncate ON approvals_decision;
DROP FUNCTION IF EXISTS gatehouse_decision_append_only();
"""


def guard_on(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(GUARD_SQL)


def guard_off(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNGUARD_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0034_audit_append_stale_code_sqlstate"),
    ]

    operations = [
        migrations.RunPython(guard_on, guard_off, elidable=False),
    ]
