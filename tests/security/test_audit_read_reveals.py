"""What reading writes to the audit trail, as docs/security.md says: only a view of a sensitive value.

Opening a task (or a thread) as a reader who is shown masked values writes nothing; an auditor reading a
thread's audit trail is shown the sensitive values its events hold, and each such event shown writes a
``sensitive.revealed`` event: the trail grows while it is read, so counts taken while reading drift.
"""

from __future__ import annotations

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
    assert reveals.count() == len(shown)  # one per event shown with a sensitive value
    assert {r.subject_type for r in reveals} == {"audit"} and {r.actor_label for r in reveals} == {
        personas["auditor"].username
    }
    again = personas["auditor"].client.get(f"/api/audit?thread={thread['id']}").json()
    assert len(again) == len(read.json()) + len(shown)  # the reveals are in the trail read next
