"""The outside verifier printed in docs/security-audit.md ("The hash rule, exactly") is run as written
against a real export: the documented rule cannot drift from the one the trail hashes with."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from approvals.audit import audit_record
from tests.conftest import Persona

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "security-audit.md"


def documented_verifier() -> str:
    found = re.search(r"<!-- outside-verifier -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert found, "docs/security-audit.md lost its outside verifier"
    return found.group(1)


def test_the_documented_verifier_checks_a_real_export(auditor: Persona, tmp_path):
    action = f"test.rule{uuid.uuid4().hex[:6]}"
    thread = uuid.uuid4()
    for details in ({"note": 'a | "pipe", ünïcødé ✓', "n": 1.5, "big": 1e20}, {"list": [3, {"b": 1, "a": None}]}):
        audit_record(
            actor=auditor.user, action=action, subject_type="test", subject_id="x", thread_id=thread,
            graph="loan_approval", details=details,
        )  # fmt: skip
    response = auditor.client.get("/api/audit/export", action=action)
    export = tmp_path / "export.jsonl"
    export.write_bytes(b"".join(response.streaming_content))
    script = tmp_path / "verify.py"
    script.write_text(documented_verifier())

    def run() -> list[str]:
        done = subprocess.run([sys.executable, str(script), str(export)], capture_output=True, text=True, check=True)
        return [line.split()[1] for line in done.stdout.splitlines()]

    assert run() == ["ok", "ok"]
    export.write_text(export.read_text().replace("ünïcødé", "unicode", 1))
    assert run() == ["ALTERED", "ok"]
