"""One round trip per audit event on PostgreSQL: lock the chain, read its head, draw the id, hash, insert.

``approvals.audit`` used to send the chain's lock, its head and ids, and the
INSERT as three statements while holding the lock. This function does the
same steps in the same order inside the server. Each statement of a VOLATILE
PL/pgSQL function takes a fresh snapshot (READ COMMITTED), so the head is read
after the lock is held, as before. The hash is the one ``approvals.audit.event_hash``
computes: the caller passes the canonical JSON of the event's fields split
around its id (which is drawn here), so verification is unchanged.
"""

from django.db import migrations

APPEND_SQL = """
CREATE OR REPLACE FUNCTION gatehouse_audit_append(
    lock_class integer, p_chain smallint, hashed_head text, hashed_tail text,
    p_at timestamptz, p_actor_id integer, p_actor_label varchar, p_action varchar,
    p_subject_type varchar, p_subject_id varchar, p_thread_id uuid, p_graph varchar, p_details jsonb
) RETURNS TABLE (event_id bigint, event_prev_hash varchar, event_hash varchar) AS $$
DECLARE
  v_prev varchar;
  v_id bigint;
  v_hash varchar;
BEGIN
  PERFORM pg_advisory_xact_lock(lock_class, p_chain);
  SELECT e.hash INTO v_prev FROM approvals_auditevent e WHERE e.chain = p_chain ORDER BY e.id DESC LIMIT 1;
  v_prev := COALESCE(v_prev, repeat('0', 64));
  v_id := nextval(pg_get_serial_sequence('approvals_auditevent', 'id'));
  v_hash := encode(sha256(convert_to(v_prev || '|' || hashed_head || v_id::text || hashed_tail, 'UTF8')), 'hex');
  INSERT INTO approvals_auditevent
    (id, chain, at, actor_id, actor_label, action, subject_type, subject_id, thread_id, graph, details, prev_hash, hash)
  VALUES (v_id, p_chain, p_at, p_actor_id, p_actor_label, p_action, p_subject_type, p_subject_id, p_thread_id,
          p_graph, p_details, v_prev, v_hash);
  RETURN QUERY SELECT v_id, v_prev, v_hash;
END;
$$ LANGUAGE plpgsql VOLATILE;
"""
DROP_SQL = """
DROP FUNCTION IF EXISTS gatehouse_audit_append(
    integer, smallint, text, text, timestamptz, integer, varchar, varchar, varchar, varchar, uuid, varchar, jsonb);
"""


def append_function_create(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_SQL)


def append_function_drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_SQL)


class Migration(migrations.Migration):

    dependencies = [
        ("approvals", "0020_task_correlation_key"),
    ]

    operations = [
        migrations.RunPython(append_function_create, append_function_drop, elidable=False),
    ]
