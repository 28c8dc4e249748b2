"""On the embedded SQLite, a large value written by a request is stored in the request's own transaction.

An outside tester's find: ``update_state`` of a value over ``GATEHOUSE_BLOB_THRESHOLD_BYTES`` (and a fork with
one, through ``/lg/`` or ``/api/``) waited 30 s and answered 500, writing nothing, while every other writer of
the embedded instance waited too. Embedded transactions take SQLite's write lock at ``BEGIN``; the blob went
through a connection of its own, which waited on the request's transaction for the busy timeout.
"""

from __future__ import annotations

import pytest

from tests.sqlite_probe import ADMIN_PROBE, sqlite_probe

_PROBE = (
    ADMIN_PROBE
    + """
import sqlite3
from django.conf import settings
from runtime.executor import run_execute

client = Client()
post = lambda path, body, **more: client.post(
    path, json.dumps(body), content_type="application/json", headers={**headers, **more}
)
get = lambda path: client.get(path, headers=headers)

thread = post("/lg/threads", {"metadata": {"graph_id": "loan_approval"}}).json()["thread_id"]
declined = {"applicant": "A", "loan_id": "L-1", "amount": 900000, "income": 1000, "term_months": 24}
run = post(f"/lg/threads/{thread}/runs", {"assistant_id": "loan_approval", "input": declined}).json()
run_execute(run_id=run["run_id"])
ended = get(f"/lg/threads/{thread}/state").json()["checkpoint"]["checkpoint_id"]
large = settings.GATEHOUSE_BLOB_THRESHOLD_BYTES + 1000
out = {
    "update_state": post(f"/lg/threads/{thread}/state", {"values": {"status": "u" * large}}).status_code,
    "state": len(get(f"/lg/threads/{thread}/state").json()["values"]["status"]),
    "lg fork": post(
        f"/lg/threads/{thread}/state",
        {"values": {"status": "f" * large}, "checkpoint_id": ended},
        X_Gatehouse_Reason="probe",
    ).status_code,
    "api fork": post(
        f"/api/threads/{thread}/fork", {"checkpoint_id": ended, "values": {"status": "a" * large}, "reason": "probe"}
    ).status_code,
}
# Committed, for every other process: read on a connection of its own.
other = sqlite3.connect(settings.DATABASES["default"]["NAME"])
out["blobs stored"] = other.execute("SELECT count(*) FROM runtime_blob WHERE size > ?", [large]).fetchone()[0]
# A blob stored in a transaction that rolls back is gone: the saver must not remember it as stored.
from django.db import transaction
from runtime.checkpointer import checkpointer_get
saver = checkpointer_get()
value = "r" * large
try:
    with transaction.atomic():
        marker = saver._spill("rolled-back-thread", value)
        raise RuntimeError("rolled back")
except RuntimeError:
    pass
saver._spill("rolled-back-thread", value)  # stored again, now outside any transaction
out["stored again after a rollback"] = other.execute(
    "SELECT count(*) FROM runtime_blob WHERE sha256 = ?", [marker["__gatehouse_blob__"]]
).fetchone()[0]
print(json.dumps(out))
"""
)


@pytest.mark.embedded
def test_a_large_value_written_by_a_request_is_stored_in_its_transaction(tmp_path):
    found = sqlite_probe(_PROBE, tmp_path / "var")
    assert found == {
        "update_state": 200,
        "state": found["state"],
        "lg fork": 200,
        "api fork": 201,
        "blobs stored": 3,
        "stored again after a rollback": 1,
    }
    assert found["state"] > 4096
