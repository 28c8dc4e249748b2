"""``gatehouse_audit_append`` finds a chain's head through its index under any plan, and plans nothing per call.

Migration 0022 made PostgreSQL plan the function's statements on every call
(``force_custom_plan``), because a cached generic plan of the head lookup
(``WHERE chain = $1 ORDER BY id DESC LIMIT 1``) walked the primary key
backwards: with ``chain`` an equality the planner drops it from the ordering,
and the primary key then looks as good as the ``audit_chain_head`` index.
That planning cost PostgreSQL ~0.12 ms per event (1.4 ms per bench cycle of
11 events; ``pg_stat_statements`` with ``track_planning``, round 17 in
docs/performance.md). Written as a range on ``chain`` ordered by ``chain, id
DESC``, the lookup asks for an order only the chain's index gives, so a generic
plan reads that index as a custom one did, and the function's plans are cached.
On a small trail a sequential scan and a sort cost less, and a plan cached then
would be kept as the trail grows, until the next ANALYZE: ``enable_seqscan = off``
for the function's statements keeps the index as their plan at any size.
"""

from importlib import import_module

from django.db import migrations

SIGNATURE = (
    "gatehouse_audit_append(integer, smallint, text, text, timestamptz, integer, varchar, varchar, varchar, "
    "varchar, uuid, varchar, jsonb)"
)

# As migration 0021's, but the head lookup: ``chain >= p AND chain <= p`` is not an equality, so ``ORDER BY
# e.chain, e.id DESC`` keeps both keys and only ``audit_chain_head (chain, id DESC)`` delivers that order.
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
  SELECT e.hash INTO v_prev FROM approvals_auditevent e
    WHERE e.chain >= p_chain AND e.chain <= p_chain ORDER BY e.chain, e.id DESC LIMIT 1;
  v_prev := COALESCE(v_prev, repeat('0', 64));
  v_id := nextval(pg_get_serial_sequence('approvals_auditevent', 'id'));
  v_hash := encode(sha256(convert_to(v_prev || '|' || hashed_head || v_id::text || hashed_tail, 'UTF8')), 'hex');
  INSERT INTO approvals_auditevent
    (id, chain, at, actor_id, actor_label, action, subject_type, subject_id, thread_id, graph, details, prev_hash, hash)
  VALUES (v_id, p_chain, p_at, p_actor_id, p_actor_label, p_action, p_subject_type, p_subject_id, p_thread_id,
          p_graph, p_details, v_prev, v_hash);
  RETURN QUERY SELECT v_id, v_prev, v_hash;
END;
$$ LANGUAGE plpgsql VOLATILE SET enable_seqscan = off;
"""


def generic_plans(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_SQL)
        schema_editor.execute(f"ALTER FUNCTION {SIGNATURE} RESET plan_cache_mode")


def custom_plans(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        # 0021's text, which 0022's setting went with
        schema_editor.execute(import_module("approvals.migrations.0021_audit_append_function").APPEND_SQL)
        schema_editor.execute(f"ALTER FUNCTION {SIGNATURE} SET plan_cache_mode = force_custom_plan")


class Migration(migrations.Migration):

    dependencies = [
        ("approvals", "0022_audit_append_custom_plans"),
    ]

    operations = [
        migrations.RunPython(generic_plans, custom_plans, elidable=False),
    ]
