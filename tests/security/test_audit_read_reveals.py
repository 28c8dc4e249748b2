"""What reading writes to the audit trail, as docs/security.md says: only a view of a sensitive value.

Opening a task (or a thread) as a reader who is shown masked values writes nothing; an auditor reading a
thread's audit trail is shown the sensitive values its events hold, and the reading writes ONE
``sensitive.revealed`` event naming the events it showed (each event shown wrote its own before: the trail grew
by a page's worth while it was read). An export is one reading too.
"""

from __future__ import annotations

import json

import pytest

from approvals.models import AuditAction, AuditEvent
from tests.integration.test_governance import _kyc_task

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_opening_a_task_masked_writes_nothing_and_reading_the_trail_unmasked_writes_reveals(personas):
    thread, task = _kyc_task(personas)
    events = AuditEvent.objects.filter(thread_id=thread["id"])
    before = events.count()
    assert personas["reviewer"].client.get(f"/api/tasks/{task['id']}").status_code == 200
    assert personas["reviewer"].client.get(f"/api/threads/{thread['id']}").status_code == 200
    assert events.count() == before  # a view is not audited; only a reveal is

    read = personas["auditor"].client.get(f"/api/audit?thread={thread['id']}")
    assert read.status_code == 200
    shown = [e for e in read.json() if "1920-07-25" in str(e["details"])]
    assert shown  # thread.started's input, at least
    reveals = events.filter(action=AuditAction.SENSITIVE_REVEALED, id__gt=max(e["id"] for e in read.json()))
    [reveal] = reveals  # one for the reading, however many events it showed
    assert (reveal.subject_type, reveal.subject_id, reveal.actor_label) == (
        "audit",
        "list",
        personas["auditor"].username,
    )
    assert set(reveal.details["subjects"]) == {f"audit:{e['id']}" for e in shown}
    assert reveal.details["count"] == len(shown)
    again = personas["auditor"].client.get(f"/api/audit?thread={thread['id']}").json()
    assert len(again) == len(read.json()) + 1  # the reading's reveal is in the trail read next


def test_an_export_is_one_reading_audited_as_one_reveal(personas):
    """An export by a reader who may see sensitive values wrote one reveal per row it revealed: an export of a
    long trail wrote a row for every row exported. One now, beside the export's own event."""
    thread, _ = _kyc_task(personas)
    personas["auditor"].client.get(f"/api/audit?thread={thread['id']}")  # two readings' events to export
    reveals = AuditEvent.objects.filter(action=AuditAction.SENSITIVE_REVEALED, actor=personas["auditor"].user)
    before = set(reveals.values_list("id", flat=True))
    body = personas["auditor"].client.get("/api/audit/export", thread=thread["id"], format="jsonl")
    assert body.status_code == 200
    rows = [json.loads(line) for line in b"".join(body.streaming_content).decode().splitlines()][:-1]
    shown = [r for r in rows if "1920-07-25" in json.dumps(r["details"])]
    assert len(shown) >= 1
    [reveal] = reveals.exclude(id__in=before)
    assert (reveal.subject_type, reveal.subject_id) == ("audit", "export")
    assert set(reveal.details["subjects"]) == {f"audit:{r['id']}" for r in shown}
