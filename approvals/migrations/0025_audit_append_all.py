"""``gatehouse_audit_append_all``: several events of one transaction appended by one statement, in order.

A run's outcome and the thread's (``run.succeeded``, ``thread.completed``), a paused run and the tasks it
opens, a decision and the run it queues: each pair was two calls of ``gatehouse_audit_append``, two
round trips and two statements for PostgreSQL to run. This function takes the events as arrays (one
element per event, in the order they are appended) and calls ``gatehouse_audit_append`` for each, in a
loop: every event is locked, linked, numbered, hashed and inserted exactly as one call does it (each
statement of a VOLATILE function takes a fresh snapshot, so each event's head is the one before it), and
the rows come back in the order given.
"""

from django.db import migrations

APPEND_ALL_SQL = """
CREATE OR REPLACE FUNCTION gatehouse_audit_append_all(
    lock_class integer, p_chain smallint, hashed_heads text[], hashed_tails text[],
    p_ats timestamptz[], p_actor_ids integer[], p_actor_labels varchar[], p_actions varchar[],
    p_subject_types varchar[], p_subject_ids varchar[], p_thread_ids uuid[], p_graphs varchar[], p_details jsonb[]
) RETURNS TABLE (event_id bigint, event_prev_hash varchar, event_hash varchar) AS $$
BEGIN
  FOR i IN 1 .. coalesce(array_length(hashed_heads, 1), 0) LOOP
    RETURN QUERY SELECT a.event_id, a.event_prev_hash, a.event_hash FROM gatehouse_audit_append(
      lock_class, p_chain, hashed_heads[i], hashed_tails[i], p_ats[i], p_actor_ids[i], p_actor_labels[i],
      p_actions[i], p_subject_types[i], p_subject_ids[i], p_thread_ids[i], p_graphs[i], p_details[i]) a;
  END LOOP;
END;
$$ LANGUAGE plpgsql VOLATILE;
"""
DROP_SQL = """
DROP FUNCTION IF EXISTS gatehouse_audit_append_all(
    integer, smallint, text[], text[], timestamptz[], integer[], varchar[], varchar[], varchar[], varchar[], uuid[],
    varchar[], jsonb[]);
"""


def append_all_on(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ALL_SQL)


def append_all_off(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_SQL)


class Migration(migrations.Migration):

    dependencies = [
        ("approvals", "0024_webhook_subscriptions_generation"),
    ]

    operations = [
        migrations.RunPython(append_all_on, append_all_off, elidable=False),
    ]
