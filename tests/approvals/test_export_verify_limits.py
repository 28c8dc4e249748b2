"""What ``audit_export --verify`` proves of a file alone, and what ``--against-db`` adds.

A masked row of a filtered export used to be reported "checked by link only" although nothing checked it
(an edited amount passed, exit 0); a trailer rewritten after the newest rows were removed passes offline
(nothing signs it) and is caught against the trail.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError

from approvals.audit import audit_record
from approvals.models import AuditEvent
from approvals.tokens import token_issue
from tests.conftest import ApiClient, Persona

pytestmark = pytest.mark.django_db


def event(action: str, graph: str = "loan_approval", **details: Any) -> AuditEvent:
    return audit_record(
        actor=None, actor_label="verifier", action=action, subject_type="test", subject_id="x", graph=graph,
        details=details,
    )  # fmt: skip


def export_to(client: ApiClient, path: Path, **params: Any) -> list[str]:
    response = client.get("/api/audit/export", **params)
    assert response.status_code == 200, response.content
    path.write_bytes(b"".join(response.streaming_content))
    return path.read_text().splitlines()


def masked_reader() -> ApiClient:
    reader = User.objects.create_user(f"masked-reader-{uuid.uuid4().hex[:6]}")
    reader.user_permissions.add(
        Permission.objects.get(codename="view_audit"), Permission.objects.get(codename="view_all_graphs")
    )
    return ApiClient(token_issue(user=reader))


def verify(path: Path, *extra: str, capsys: Any) -> tuple[int, str]:
    try:
        call_command("audit_export", "--verify", str(path), *extra)
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, capsys.readouterr().out


def test_a_masked_row_of_a_filtered_export_is_reported_unverified_and_checked_against_the_trail(tmp_path, capsys):
    action = f"test.masked{uuid.uuid4().hex[:6]}"
    event(action, graph="kyc_onboarding", applicant={"name": "Ada", "date_of_birth": "1920-07-25"}, amount=18000)
    path = tmp_path / "masked.jsonl"
    lines = export_to(masked_reader(), path, action=action)
    assert json.loads(lines[0])["masked"] is True
    status, said = verify(path, capsys=capsys)
    assert status == 3, said
    assert "1 masked rows could not be verified: masked values and no neighbours to link" in said
    assert verify(path, "--against-db", capsys=capsys)[0] == 0

    path.write_text(path.read_text().replace('"amount":18000', '"amount":99999'))
    status, said = verify(path, capsys=capsys)
    assert status == 3 and "OK" not in said  # never "OK" for a row nothing could check
    status, said = verify(path, "--against-db", capsys=capsys)
    assert status == 1 and "details differ from the trail" in said


def test_a_trailer_rewritten_after_removing_the_newest_rows_is_caught_against_the_trail(
    auditor: Persona, tmp_path, capsys
):
    action = f"test.trailer{uuid.uuid4().hex[:6]}"
    for n in range(8):
        event(action, n=n)
    path = tmp_path / "cut.jsonl"
    lines = export_to(auditor.client, path, action=action)
    rows, trailer = [json.loads(line) for line in lines[:-1]], json.loads(lines[-1])
    assert verify(path, "--against-db", capsys=capsys)[0] == 0
    kept = rows[:-5]
    trailer["export"].update(count=len(kept), last_id=kept[-1]["id"], head_hash=kept[-1]["hash"])
    path.write_text("".join(json.dumps(row) + "\n" for row in [*kept, trailer]))
    assert verify(path, capsys=capsys)[0] == 0  # offline nothing signs the trailer: the documented limit
    status, said = verify(path, "--against-db", capsys=capsys)
    assert status == 1 and "records no export" in said

    # A row removed from the middle, the trailer untouched: offline a filtered export needs no links.
    whole = [*rows[:3], *rows[4:], json.loads(lines[-1])]
    whole[-1]["export"]["count"] -= 1
    path.write_text("".join(json.dumps(row) + "\n" for row in whole))
    status, said = verify(path, "--against-db", capsys=capsys)
    assert status == 1 and "records no export" in said
