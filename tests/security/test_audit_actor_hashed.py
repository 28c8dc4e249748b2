"""Threat: someone with SQL access gives an audit event to another user (or to nobody), and audit_verify says "intact".

The hash covered the actor's name (``actor_label``) but not ``actor_id``, the link to the user that separation
of duties reads (``approvals.abilities.thread_started_by``): a pentester's
``SET LOCAL session_replication_role = replica; UPDATE approvals_auditevent SET actor_id = …`` went unnoticed.
Events written now hash their actor's user id; events written before keep verifying as they are, and an event
of today made to read as one from before (its hash recomputed without the id) is reported, in the database
(``audit_verify``) and in an export (``audit_export --verify``), on PostgreSQL and on SQLite (a probe running
the same scenarios). The design: docs/security-audit.md, "Who acted".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.test import override_settings
from django.utils import timezone

from approvals.audit import GENESIS, audit_record, chain_for, event_fields, event_hash
from approvals.models import AuditEvent
from tests.conftest import ROOT, scaled
from tests.sqlite_probe import sqlite_probe

CHAINS = 1000  # enough chains that one no other event is in can be found, for events "from before"


def _attacker(sql: str, params: list[Any]) -> None:
    """Run ``sql`` as a superuser with triggers off (PostgreSQL); SQLite has no triggers to switch off."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = origin")


def _verify() -> str:
    """``audit_verify``'s output when intact, else its findings prefixed with FINDINGS."""
    out = StringIO()
    try:
        call_command("audit_verify", stdout=out)
    except CommandError as exc:
        return f"FINDINGS {exc}"
    return out.getvalue()


def _users() -> tuple[User, User]:
    tag = uuid.uuid4().hex[:8]
    return User.objects.create(username=f"starter-{tag}"), User.objects.create(username=f"approver-{tag}")


def _record(actor: User | None, subject: str, action: str = "test.actor.hashed") -> AuditEvent:
    with transaction.atomic():
        return audit_record(actor=actor, action=action, subject_type="test", subject_id=subject)


def _old_form_hash(event: AuditEvent) -> str:
    """The hash the code before this change gave ``event``: its fields without the actor's user id."""
    fields = event_fields(event)
    fields.pop("actor_id", None)
    return event_hash(fields, event.prev_hash)


def _empty_chain_subject() -> tuple[str, int]:
    """A subject whose chain (of ``CHAINS``) holds no event yet: there, events "from before" come first."""
    used = set(AuditEvent.objects.values_list("chain", flat=True).distinct())
    while True:
        subject = uuid.uuid4().hex
        chain = chain_for(f"test:{subject}", chains=CHAINS)
        if chain not in used:
            return subject, chain


def _append_as_before(chain: int, subject: str, actor: User) -> AuditEvent:
    """An event as the code before this change appended it: linked and numbered alike, hashed without its actor's
    user id (inserted as an attacker would, past the append function, which now refuses that form)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT nextval(pg_get_serial_sequence('approvals_auditevent', 'id'))")
        else:
            cursor.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM approvals_auditevent")
        event_id = int(cursor.fetchone()[0])
    prev = AuditEvent.objects.filter(chain=chain).order_by("-id").values_list("hash", flat=True).first() or GENESIS
    event = AuditEvent(
        id=event_id, chain=chain, at=timezone.now(), actor=actor, actor_label=actor.username,
        action="test.actor.before", subject_type="test", subject_id=subject, graph="", details={}, prev_hash=prev,
    )  # fmt: skip
    event.hash = _old_form_hash(event)
    event.save(force_insert=True)
    return event


# --- the scenarios, run on PostgreSQL here and on SQLite by the probe ------------------------------------


def scenario_moved(target: str) -> dict[str, str]:
    """The pentester's UPDATE: an event of today's given to another user, to nobody, or to a user from nobody."""
    starter, approver = _users()
    event = _record(None if target == "from-null" else starter, uuid.uuid4().hex)
    before = _verify()
    new_actor = {"other": approver.pk, "null": None, "from-null": approver.pk}[target]
    _attacker("UPDATE approvals_auditevent SET actor_id = %s WHERE id = %s", [new_actor, event.pk])
    after = _verify()
    _attacker("UPDATE approvals_auditevent SET actor_id = %s WHERE id = %s", [event.actor_id, event.pk])
    return {"before": before, "after": after, "restored": _verify(), "event": str(event.pk), "chain": str(event.chain)}


def scenario_before_and_after() -> dict[str, Any]:
    """A chain whose first event is from before the change, then events of today: it verifies; the old event's
    actor id is not covered (it never was); an event of today downgraded to the old form, relinked, is found."""
    out: dict[str, Any] = {}
    starter, approver = _users()
    with override_settings(GATEHOUSE_AUDIT_CHAINS=CHAINS):
        subject, chain = _empty_chain_subject()
        old = _append_as_before(chain, subject, starter)
        with transaction.atomic():
            new = [
                audit_record(actor=approver, action="test.actor.after", subject_type="test", subject_id=subject)
                for _ in range(3)
            ]
    out["linked"] = [e.chain for e in new] == [chain] * 3 and new[0].prev_hash == old.hash
    out["intact"] = _verify()
    out["exported"] = _export_checked()

    # Known and documented: an event from before keeps its uncovered actor id.
    _attacker("UPDATE approvals_auditevent SET actor_id = %s WHERE id = %s", [approver.pk, old.pk])
    out["old_moved"] = _verify()
    _attacker("UPDATE approvals_auditevent SET actor_id = %s WHERE id = %s", [starter.pk, old.pk])

    # The downgrade: new[1] given to the starter and re-hashed as the old code would have, the event after it
    # relinked and re-hashed, so every link matches; only the cut-over (new[0] covers its actor) shows it.
    moved = AuditEvent.objects.get(pk=new[1].pk)
    moved.actor_id = starter.pk
    moved.hash = _old_form_hash(moved)
    after = AuditEvent.objects.get(pk=new[2].pk)
    after.prev_hash = moved.hash
    after.hash = event_hash(event_fields(after), after.prev_hash)
    _attacker(
        "UPDATE approvals_auditevent SET actor_id = %s, hash = %s WHERE id = %s", [starter.pk, moved.hash, moved.pk]
    )
    relink = "UPDATE approvals_auditevent SET prev_hash = %s, hash = %s WHERE id = %s"
    _attacker(relink, [after.prev_hash, after.hash, after.pk])
    out["downgraded"] = _verify()
    out["downgraded_export"] = _export_checked()
    out["ids"] = {"old": old.pk, "new": [e.pk for e in new], "chain": chain}
    return out


def _export_checked(edit: Any = None) -> str:
    """Export this module's events (JSON Lines), optionally edit the rows, and ``audit_export --verify`` it."""
    path = Path(tempfile.gettempdir()) / f"gatehouse-actor-export-{uuid.uuid4().hex}.jsonl"
    call_command("audit_export", "--output", str(path), "--action", "test.actor.", "--no-progress", stderr=StringIO())
    try:
        lines = path.read_text().splitlines()
        if edit is not None:
            rows = [json.loads(line) for line in lines]
            edit(rows)
            path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        out = StringIO()
        try:
            call_command("audit_export", "--verify", str(path), stdout=out)
        except CommandError as exc:
            return f"FINDINGS {exc}"
        return out.getvalue()
    finally:
        path.unlink()


def scenario_export_edits() -> dict[str, str]:
    """An export's rows edited: an actor id changed, cleared or dropped; a downgraded row; an old file."""
    starter, approver = _users()
    subject = uuid.uuid4().hex
    first, second = _record(starter, subject), _record(approver, subject)
    ids = (first.pk, second.pk)

    def row_of(rows: list[dict[str, Any]], pk: int) -> dict[str, Any]:
        return next(r for r in rows if r.get("id") == pk)

    def other(rows: list[dict[str, Any]]) -> None:
        row_of(rows, ids[0])["actor_id"] = approver.pk

    def cleared(rows: list[dict[str, Any]]) -> None:
        row_of(rows, ids[0])["actor_id"] = None

    def dropped(rows: list[dict[str, Any]]) -> None:
        row_of(rows, ids[0]).pop("actor_id", None)

    def downgraded(rows: list[dict[str, Any]]) -> None:
        row = row_of(rows, ids[1])
        row.pop("actor_id", None)
        row["actor"] = starter.username
        fields = {k: row[k] for k in ("at", "actor", "action", "subject", "thread", "graph", "details")}
        row["hash"] = event_hash({**fields, "chain": row["chain"], "id": row["id"]}, row["prev_hash"])

    return {
        "whole": _export_checked(),
        "other": _export_checked(other),
        "cleared": _export_checked(cleared),
        "dropped": _export_checked(dropped),
        "downgraded": _export_checked(downgraded),
    }


def check_moved(target: str, found: dict[str, str]) -> None:
    assert "intact" in found["before"] and "FINDINGS" not in found["before"]
    assert f"audit chain {found['chain']} BROKEN at event #{found['event']}" in found["after"], found["after"]
    assert "FINDINGS" not in found["restored"]


def check_before_and_after(found: dict[str, Any]) -> None:
    assert found["linked"] is True
    assert "intact" in found["intact"] and "FINDINGS" not in found["intact"], found["intact"]
    assert "from before the actor's user id was hashed" in found["intact"]
    assert ": OK," in found["exported"] and "1 rows from before the actor's user id was hashed" in found["exported"]
    assert "intact" in found["old_moved"] and "FINDINGS" not in found["old_moved"]  # the documented limit
    downgraded, target = found["downgraded"], found["ids"]["new"][1]
    assert f"audit chain {found['ids']['chain']} BROKEN at event #{target}" in downgraded, downgraded
    assert f"DOWNGRADED: event #{target}" in downgraded
    assert f"event {target}: hashed without its actor's user id" in found["downgraded_export"]


def check_export_edits(found: dict[str, str]) -> None:
    assert ": OK," in found["whole"] and "rows from before" not in found["whole"], found["whole"]
    for edit in ("other", "cleared", "dropped"):
        assert "BROKEN" in found[edit] and "hash does not match its fields (altered)" in found[edit], found[edit]
    assert "hashed without its actor's user id" in found["downgraded"], found["downgraded"]


# --- PostgreSQL ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("audit_quiet")
@pytest.mark.parametrize("target", ["other", "null", "from-null"])
def test_an_event_given_to_another_actor_is_found_by_audit_verify(target):
    check_moved(target, scenario_moved(target))


@pytest.mark.django_db
@pytest.mark.usefixtures("audit_quiet")
def test_events_from_before_still_verify_and_a_downgraded_event_of_today_is_found():
    check_before_and_after(scenario_before_and_after())


@pytest.mark.django_db
@pytest.mark.usefixtures("audit_quiet")
def test_an_exports_actor_ids_are_covered_by_its_hashes():
    check_export_edits(scenario_export_edits())


@pytest.mark.django_db
@pytest.mark.usefixtures("audit_quiet")
@pytest.mark.parametrize("claimed", ["another user", "no user", "old form"])
def test_the_append_function_refuses_hashed_fields_that_do_not_name_the_stored_actor(claimed):
    """A caller (or a process still running the code from before) cannot store one actor id and hash another,
    or none: the function checks the hashed text names the id it inserts."""
    from approvals.audit import _APPEND_SQL, _LOCK_CLASS, _append_arguments, _event_new, chains_configured, hashed_parts

    starter, approver = _users()
    event = _event_new(chain=chain_for("test:x", chains=chains_configured()), user=starter, label=starter.username,
                       action="test.actor.forged", subject_type="test", subject_id="x", thread_id=None, graph="",
                       details={})  # fmt: skip
    fields = event_fields(event)
    del fields["id"]
    if claimed == "another user":
        fields["actor_id"] = approver.pk
    elif claimed == "no user":
        fields["actor_id"] = None
    else:
        fields.pop("actor_id", None)
    head, tail = hashed_parts(fields)
    _head, _tail, values = _append_arguments(event)
    refused = pytest.raises(DatabaseError, match="do not name the actor's user id")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_APPEND_SQL, [_LOCK_CLASS, values[0], head, tail, *values[1:]])


# --- SQLite (embedded) ---------------------------------------------------------------------------------

_PROBE = """
import json
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from tests.security import test_audit_actor_hashed as t
out = {"moved": {target: t.scenario_moved(target) for target in ("other", "null", "from-null")}}
out["before_and_after"] = t.scenario_before_and_after()
print(json.dumps(out))
"""

_PROBE_EXPORT = """
import json
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from tests.security import test_audit_actor_hashed as t
print(json.dumps(t.scenario_export_edits()))
"""


@pytest.mark.slow
def test_on_sqlite_a_moved_actor_and_a_downgrade_are_found_and_events_from_before_verify(tmp_path):
    found = sqlite_probe(_PROBE, tmp_path / "var")
    for target, moved in found["moved"].items():
        check_moved(target, moved)
    check_before_and_after(found["before_and_after"])


@pytest.mark.slow
def test_on_sqlite_an_exports_actor_ids_are_covered_by_its_hashes(tmp_path):
    check_export_edits(sqlite_probe(_PROBE_EXPORT, tmp_path / "var"))


# --- the upgrade (PostgreSQL): a trail appended by the function as it was, then migration 0032 ----------------

_OLD_APPEND = (
    "SELECT event_id, event_hash FROM gatehouse_audit_append(%s, %s::smallint, %s, %s, %s::timestamptz, %s, %s, "
    "'test.actor.before', 'test', %s, NULL, '', '{}'::jsonb)"
)


@pytest.fixture
def upgraded_database() -> Any:
    """A database of its own, to migrate step by step (as tests/approvals/test_audit_migration.py does)."""
    from tests.conftest import _admin_connection

    name = f"test_gatehouse_actor_{os.getpid()}"
    with _admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    db = connection.settings_dict
    yield f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
    with _admin_connection() as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def _append_old_code(conn: Any, chain: int, subject: str, actor_id: int, label: str) -> tuple[int, str]:
    """What the code before this change sent ``gatehouse_audit_append``: its fields hashed without the user id."""
    from approvals.audit import _LOCK_CLASS, hashed_parts

    at = datetime.now(UTC)
    fields = {"at": at.isoformat(), "actor": label, "action": "test.actor.before", "subject": f"test:{subject}",
              "thread": None, "graph": "", "details": {}, "chain": chain}  # fmt: skip
    head, tail = hashed_parts(fields)
    row = conn.execute(_OLD_APPEND, [_LOCK_CLASS, chain, head, tail, at, actor_id, label, subject]).fetchone()
    return int(row[0]), str(row[1])


@pytest.mark.integration
def test_a_trail_appended_before_migration_0032_verifies_after_it_and_the_old_form_is_refused(upgraded_database):
    url = upgraded_database
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "GATEHOUSE_AUDIT"))}
    env.update(DJANGO_SETTINGS_MODULE="console.settings", DATABASE_URL=url, PYTHONUNBUFFERED="1")

    def manage(*args: str, chains: int | None = None) -> subprocess.CompletedProcess[str]:
        extra = {"GATEHOUSE_AUDIT_CHAINS": str(chains)} if chains else {}
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env={**env, **extra}, capture_output=True, text=True,
            timeout=scaled(600),
        )  # fmt: skip

    done = manage("migrate", "approvals", "0031_audit_task_claim_newest", "--noinput")
    assert done.returncode == 0, done.stderr[-3000:]
    subject = uuid.uuid4().hex
    with psycopg.connect(url, autocommit=True) as conn:
        used = {r[0] for r in conn.execute("SELECT DISTINCT chain FROM approvals_auditevent")}
        while chain_for(f"test:{subject}", chains=CHAINS) in used:
            subject = uuid.uuid4().hex
        chain = chain_for(f"test:{subject}", chains=CHAINS)
        user = conn.execute(
            "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email, is_staff, "
            "is_active, date_joined) VALUES ('', false, 'old-code', '', '', '', false, true, now()) RETURNING id"
        ).fetchone()[0]
        old = [_append_old_code(conn, chain, subject, user, "old-code") for _ in range(2)]

    done = manage("migrate", "--noinput")
    assert done.returncode == 0, done.stderr[-3000:]
    script = (
        "from django.db import transaction\n"
        "from approvals.audit import audit_record\n"
        "with transaction.atomic():\n"
        f"    audit_record(actor=None, action='test.actor.after', subject_type='test', subject_id={subject!r})\n"
    )
    done = manage("shell", "-c", script, chains=CHAINS)
    assert done.returncode == 0, done.stderr[-3000:]
    verified = manage("audit_verify")
    assert verified.returncode == 0, verified.stderr
    assert "2 events from before the actor's user id was hashed" in verified.stdout

    with psycopg.connect(url, autocommit=True) as conn:
        after = conn.execute(
            "SELECT id, prev_hash FROM approvals_auditevent WHERE chain = %s ORDER BY id", [chain]
        ).fetchall()
        assert [row[0] for row in after[:2]] == [event_id for event_id, _ in old] and after[2][1] == old[1][1]
        with pytest.raises(psycopg.DatabaseError, match="do not name the actor's user id") as refused:
            _append_old_code(conn, chain, subject, user, "old-code")
        assert refused.value.sqlstate == "GH001"  # migration 0034: "this process is older than the database"
        conn.execute("SET session_replication_role = replica")  # the pentester, on an event of today
        conn.execute("UPDATE approvals_auditevent SET actor_id = %s WHERE id = %s", [user, after[2][0]])
    broken = manage("audit_verify")
    assert broken.returncode == 1 and f"audit chain {chain} BROKEN at event #{after[2][0]}" in broken.stderr
