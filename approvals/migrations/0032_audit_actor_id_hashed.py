"""``gatehouse_audit_append`` appends only events whose hash covers the actor's user id, the one it stores.

The hash covered the actor's name (``actor_label``) but not ``actor_id``, the link to the user that
separation of duties reads (``approvals.abilities.thread_started_by``): a superuser with triggers off
could give an event to another user, or to nobody, and ``audit_verify`` still said "intact". Events are
now hashed with ``"actor_id"`` among their fields (``approvals.audit.event_fields``); events written
before keep the hash they have and verify as they are (``approvals.audit.hash_form``).

The client builds the canonical text that is hashed, so the function checks that the text it hashes
names, right after the actor's name, the user id it inserts: keys are sorted, so the text starts
``{"action":…,"actor":…,"actor_id":<id or null>,``. A row's ``actor_id`` column and what its hash covers
cannot differ, whatever the caller sends; and a process still running the code from before this
migration, which hashes without the id, fails its audited writes (they roll back with their change)
until it is restarted, instead of appending events that do not cover it after ones that do (which
``audit_verify`` reports as downgraded). One regular expression on the first ~100 characters of the
text: no statement or round trip is added to the append.
"""

from importlib import import_module

from django.db import migrations

_0023 = import_module("approvals.migrations.0023_audit_append_generic_plans")

_LOCK = "BEGIN\n  PERFORM pg_advisory_xact_lock(lock_class, p_chain);"
# ``substring(... FROM pattern)`` returns the first capturing group: the actor id as the hashed text has it.
ACTOR_CHECK = r"""BEGIN
  IF substring(hashed_head FROM '^\{"action":"(?:[^"\\]|\\.)*","actor":"(?:[^"\\]|\\.)*","actor_id":(null|[0-9]+),')
      IS DISTINCT FROM coalesce(p_actor_id::text, 'null') THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
      MESSAGE = 'gatehouse_audit_append: the hashed fields do not name the actor''s user id ('
        || coalesce(p_actor_id::text, 'null') || ') after its name; a process running code from before '
        || 'migration 0032 must be restarted';
  END IF;
  PERFORM pg_advisory_xact_lock(lock_class, p_chain);"""

if _0023.APPEND_SQL.count(_LOCK) != 1:
    raise RuntimeError("migration 0023's function text is not the one 0032 rewrites")
APPEND_SQL = _0023.APPEND_SQL.replace(_LOCK, ACTOR_CHECK)


def actor_checked(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_SQL)


def actor_unchecked(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_0023.APPEND_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0031_audit_task_claim_newest"),
    ]

    operations = [
        migrations.RunPython(actor_checked, actor_unchecked, elidable=False),
    ]
