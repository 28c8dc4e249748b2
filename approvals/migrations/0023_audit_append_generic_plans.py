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

_0021 = import_module("approvals.migrations.0021_audit_append_function")
SIGNATURE = import_module("approvals.migrations.0022_audit_append_custom_plans").SIGNATURE

# 0021's function but for the head lookup: ``chain >= p AND chain <= p`` is not an equality, so ``ORDER BY
# e.chain, e.id DESC`` keeps both keys and only ``audit_chain_head (chain, id DESC)`` delivers that order.
_HEAD_EQUALITY = "WHERE e.chain = p_chain ORDER BY e.id DESC LIMIT 1;"
_HEAD_RANGE = "WHERE e.chain >= p_chain AND e.chain <= p_chain ORDER BY e.chain, e.id DESC LIMIT 1;"
_VOLATILE = "$$ LANGUAGE plpgsql VOLATILE;"
if _0021.APPEND_SQL.count(_HEAD_EQUALITY) != 1 or _0021.APPEND_SQL.count(_VOLATILE) != 1:
    raise RuntimeError("migration 0021's function text is not the one 0023 rewrites")
APPEND_SQL = _0021.APPEND_SQL.replace(_HEAD_EQUALITY, _HEAD_RANGE).replace(
    _VOLATILE, "$$ LANGUAGE plpgsql VOLATILE SET enable_seqscan = off;"
)


def generic_plans(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_SQL)
        schema_editor.execute(f"ALTER FUNCTION {SIGNATURE} RESET plan_cache_mode")


def custom_plans(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_0021.APPEND_SQL)  # the text 0022's setting went with
        schema_editor.execute(f"ALTER FUNCTION {SIGNATURE} SET plan_cache_mode = force_custom_plan")


class Migration(migrations.Migration):

    dependencies = [
        ("approvals", "0022_audit_append_custom_plans"),
    ]

    operations = [
        migrations.RunPython(generic_plans, custom_plans, elidable=False),
    ]
