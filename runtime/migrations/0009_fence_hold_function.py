"""``gatehouse_fence_hold``: a fenced checkpoint write checks its fence in the server, in one round trip.

A fenced write (``runtime.fencing.FencedPostgresSaver``) used to read the thread's fence ``FOR SHARE``,
sync the pipeline to see the value, compare it in Python, then send ``COMMIT``: two round trips per
checkpoint write. This function takes the same row lock and raises when the fence moved on, which
aborts the transaction in the server: ``BEGIN``, the check, the writes and ``COMMIT`` go out together,
and a stale write's statements are skipped and rolled back. Its SQLSTATE (``GHFEN``) and its detail
(the fence the thread holds now, empty when the thread is gone) are what ``runtime.fencing`` reads.
"""

from django.db import migrations

FENCE_SQLSTATE = "GHFEN"  # also runtime.fencing.FENCE_SQLSTATE

HOLD_SQL = f"""
CREATE OR REPLACE FUNCTION gatehouse_fence_hold(p_thread uuid, p_fence bigint) RETURNS void AS $$
DECLARE
  v_fence bigint;
BEGIN
  SELECT fence INTO v_fence FROM runtime_thread WHERE id = p_thread FOR SHARE;
  IF v_fence IS DISTINCT FROM p_fence THEN
    RAISE EXCEPTION USING
      ERRCODE = '{FENCE_SQLSTATE}',
      MESSAGE = 'thread ' || p_thread || ': write under fence ' || p_fence || ' refused',
      DETAIL = coalesce(v_fence::text, '');
  END IF;
END;
$$ LANGUAGE plpgsql VOLATILE;
"""
DROP_SQL = "DROP FUNCTION IF EXISTS gatehouse_fence_hold(uuid, bigint);"


def hold_function_create(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(HOLD_SQL)


def hold_function_drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0008_run_stream"),
    ]

    operations = [
        migrations.RunPython(hold_function_create, hold_function_drop, elidable=False),
    ]
