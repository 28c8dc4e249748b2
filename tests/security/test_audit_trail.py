"""Threat: someone with SQL access empties or cuts off the audit trail, and audit_verify still says "intact".

Row triggers refuse UPDATE and DELETE; TRUNCATE fires none of them, so a
statement trigger refuses it too (as the application's own database role and
as any role merely granted TRUNCATE). Whoever can switch triggers off (a
superuser, or the tables' owner) can still delete rows: anchors (the chain's
length and head hash, append-only) and a copy of them outside the database let
``audit_verify`` see that the newest rows went or were rewritten.
"""

from __future__ import annotations

import json
import stat
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from approvals.audit import audit_anchor, audit_record, event_fields, event_hash
from approvals.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("audit_quiet")]


def _events(count: int) -> list[AuditEvent]:
    with transaction.atomic():
        return [
            audit_record(actor=None, actor_label="probe", action="test.event", subject_type="test", subject_id=i)
            for i in range(count)
        ]


def _as_attacker(sql: str, params: list[object] | None = None) -> None:
    """Run ``sql`` with triggers off, as a superuser (or the tables' owner) could."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params or [])
        cursor.execute("SET LOCAL session_replication_role = origin")


def _verify(*args: str) -> str:
    out = StringIO()
    call_command("audit_verify", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def granted_role():
    """A role that is not a superuser and holds every privilege on the audit tables (created in this test's
    transaction, so it disappears with it)."""
    name = f"gatehouse_probe_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {name} NOLOGIN")
        cursor.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {name}")
    return name


@pytest.mark.parametrize("role", ["app", "granted"])
@pytest.mark.parametrize(
    "statement",
    ["TRUNCATE approvals_auditevent", "TRUNCATE auth_user CASCADE", "TRUNCATE approvals_auditanchor"],
    ids=["audit-table", "cascade-from-users", "anchor-table"],
)
def test_truncating_the_audit_table_is_refused(statement, role, granted_role):
    events = _events(2)
    audit_anchor()
    before = AuditEvent.objects.count()
    with connection.cursor() as cursor:
        # Run the deferred FK checks of the rows above now: TRUNCATE refuses a table with pending
        # trigger events, which would hide whether our trigger is what stops it.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        if role == "granted":
            cursor.execute(f"SET LOCAL ROLE {granted_role}")
        cursor.execute(statement)
    assert AuditEvent.objects.count() == before and AuditEvent.objects.filter(pk=events[0].pk).exists()
    assert "intact" in _verify()


@pytest.mark.parametrize(
    "statement",
    ["UPDATE approvals_auditanchor SET length = length + 1", "DELETE FROM approvals_auditanchor"],
    ids=["update", "delete"],
)
def test_anchors_cannot_be_changed_or_deleted(statement):
    audit_anchor()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)


def test_audit_verify_detects_deleted_newest_rows():
    _events(3)
    audit_anchor()
    newest = _events(2)
    assert "intact" in _verify()
    anchored = AuditEvent.objects.filter(action="audit.anchor").order_by("-id").first()
    # The tail from the anchored event on goes; what is left still links up perfectly.
    _as_attacker("DELETE FROM approvals_auditevent WHERE id >= %s", [anchored.pk])
    assert not AuditEvent.objects.filter(pk=newest[-1].pk).exists()
    with pytest.raises(CommandError, match="TAIL LOST"):
        _verify()


def test_an_emptied_trail_is_not_called_intact():
    _events(2)
    audit_anchor()
    _as_attacker("DELETE FROM approvals_auditevent")
    with pytest.raises(CommandError, match=r"TAIL LOST.*now has 0 \(empty\)"):
        _verify()


def test_audit_verify_detects_a_tail_rewritten_with_consistent_hashes():
    chain = _events(2)[0].chain
    anchor = next(a for a in audit_anchor() if a.chain == chain)
    _events(1)
    # Rewrite the anchored event and re-chain everything after it in its chain: every link matches again.
    rows = list(AuditEvent.objects.filter(chain=chain, pk__gte=anchor.head_id).order_by("id"))
    prev = rows[0].prev_hash
    for row in rows:
        if row.pk == anchor.head_id:
            row.details = {**row.details, "length": 0}
        row.prev_hash = prev
        row.hash = event_hash(event_fields(row), prev)
        _as_attacker(
            "UPDATE approvals_auditevent SET details = %s::jsonb, prev_hash = %s, hash = %s WHERE id = %s",
            [json.dumps(row.details), row.prev_hash, row.hash, row.pk],
        )
        prev = row.hash
    with pytest.raises(CommandError, match="REWRITTEN") as caught:
        _verify()
    assert "BROKEN" not in str(caught.value)  # the links alone would not have shown it


def test_the_anchor_sink_catches_rows_and_anchors_deleted_together(
    settings, tmp_path, django_capture_on_commit_callbacks
):
    sink = tmp_path / "anchors.jsonl"
    settings.GATEHOUSE_AUDIT_ANCHOR_SINK = str(sink)
    _events(2)
    with django_capture_on_commit_callbacks(execute=True):
        first = audit_anchor()
    with django_capture_on_commit_callbacks(execute=True):
        second = audit_anchor()
    lines = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [(line["anchor"], line["chain"]) for line in lines] == [(a.pk, a.chain) for a in first + second]
    assert stat.S_IMODE(sink.stat().st_mode) == 0o600
    assert f"{len(lines)} in the sink" in _verify("--sink")

    # An attacker with triggers off removes the newest events and the anchors that pinned them.
    _as_attacker("DELETE FROM approvals_auditanchor WHERE id >= %s", [first[0].pk])
    _as_attacker("DELETE FROM approvals_auditevent WHERE id >= %s", [min(a.head_id for a in first if a.chain)])
    assert "intact" in _verify()  # the database alone can no longer tell
    with pytest.raises(CommandError) as caught:
        _verify("--sink")
    assert f"anchor #{first[0].pk} (sink line 1) is missing from the database" in str(caught.value)
    assert "TAIL LOST" in str(caught.value)


def test_a_failed_sink_write_is_loud_caught_up_later_and_a_gap_until_then(
    settings, tmp_path, django_capture_on_commit_callbacks, caplog
):
    """A sink that could not be written (here: its directory gone) raised FileNotFoundError in an on-commit
    hook after the anchors committed, nothing wrote them later, and `audit_verify --sink` said "intact" with
    fewer anchors in the sink than in the database. The failure now names the setting, the next round
    appends everything the sink lacks, and until then the verifier reports the gap as a finding."""
    from approvals.audit import AnchorSinkError

    folder = tmp_path / "sink"
    folder.mkdir()
    sink = folder / "anchors.jsonl"
    settings.GATEHOUSE_AUDIT_ANCHOR_SINK = str(sink)
    _events(1)
    with django_capture_on_commit_callbacks(execute=True):
        first = audit_anchor()

    folder.rename(tmp_path / "away")  # the mount is gone
    with (
        pytest.raises(AnchorSinkError, match=f"GATEHOUSE_AUDIT_ANCHOR_SINK={sink}: cannot append"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        missed = audit_anchor()
    assert any(r.levelname == "ERROR" and "GATEHOUSE_AUDIT_ANCHOR_SINK" in r.getMessage() for r in caplog.records), (
        caplog.text
    )
    (tmp_path / "away").rename(folder)  # back

    with pytest.raises(CommandError, match="MISSING FROM THE SINK") as caught:
        _verify("--sink")
    assert f"#{missed[0].pk}" in str(caught.value)

    with django_capture_on_commit_callbacks(execute=True):
        third = audit_anchor()
    lines = [json.loads(line)["anchor"] for line in sink.read_text().splitlines()]
    assert lines == [a.pk for a in first + missed + third]  # caught up, in order, once each
    assert f"{len(lines)} in the sink" in _verify("--sink")


def test_anchors_from_before_the_sink_existed_are_counted_not_reported(
    settings, tmp_path, django_capture_on_commit_callbacks
):
    _events(1)
    earlier = audit_anchor()  # no sink configured yet
    settings.GATEHOUSE_AUDIT_ANCHOR_SINK = str(tmp_path / "anchors.jsonl")
    with django_capture_on_commit_callbacks(execute=True):
        audit_anchor()

    assert "older anchors predate the sink's first line" in _verify("--sink")
    assert earlier  # not written to the new sink, and no finding about them
