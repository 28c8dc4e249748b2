"""A generation number for the webhook subscriptions, moved by every change to them (PostgreSQL).

Every transaction that emits events (a run's outcome, a decision) read the active subscriptions of
its graph: one statement, nearly always answered "none". ``approvals.audit`` now reads this number
with each event it appends (same statement), and ``approvals.outbound.outbox`` keeps, per process,
the subscriptions it read with the number they were read at: while the number an append saw is the
one they were read at, they are still the table as that transaction sees it.

The number is drawn from a sequence, not counted up: a transaction that changed subscriptions and
rolled back used a number nobody will see again, so subscriptions read inside it (its own, never
committed) can never be taken for the committed ones. Concurrent changes serialise on the row.
"""

from django.db import migrations

GENERATION_SQL = """
CREATE SEQUENCE IF NOT EXISTS gatehouse_webhook_generation_seq;
CREATE TABLE IF NOT EXISTS gatehouse_webhook_generation (
  id smallint PRIMARY KEY CHECK (id = 1),
  value bigint NOT NULL
);
INSERT INTO gatehouse_webhook_generation (id, value)
  VALUES (1, nextval('gatehouse_webhook_generation_seq')) ON CONFLICT (id) DO NOTHING;
CREATE OR REPLACE FUNCTION gatehouse_webhook_generation_move() RETURNS trigger AS $$
BEGIN
  UPDATE gatehouse_webhook_generation SET value = nextval('gatehouse_webhook_generation_seq') WHERE id = 1;
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS approvals_webhooksubscription_generation ON approvals_webhooksubscription;
CREATE TRIGGER approvals_webhooksubscription_generation
  AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON approvals_webhooksubscription
  FOR EACH STATEMENT EXECUTE FUNCTION gatehouse_webhook_generation_move();
"""
DROP_SQL = """
DROP TRIGGER IF EXISTS approvals_webhooksubscription_generation ON approvals_webhooksubscription;
DROP FUNCTION IF EXISTS gatehouse_webhook_generation_move();
DROP TABLE IF EXISTS gatehouse_webhook_generation;
DROP SEQUENCE IF EXISTS gatehouse_webhook_generation_seq;
"""


def generation_on(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(GENERATION_SQL)


def generation_off(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_SQL)


class Migration(migrations.Migration):

    dependencies = [
        ("approvals", "0023_audit_append_generic_plans"),
    ]

    operations = [
        migrations.RunPython(generation_on, generation_off, elidable=False),
    ]
