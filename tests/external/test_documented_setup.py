"""docs/external-tasks.md's setup of an engine principal works as written: its commands, run in order,
give a token that creates its source's tasks. It issued a token for a user no step had created
("no user named 'engine-payments'")."""

from __future__ import annotations

import io
import re
import shlex
import uuid

import pytest
from django.core.management import call_command

from tests.conftest import ROOT, ApiClient
from tests.external.conftest import task_body

pytestmark = pytest.mark.usefixtures("live_db")

DOC = ROOT / "docs" / "external-tasks.md"


def documented_commands() -> list[list[str]]:
    section = DOC.read_text(encoding="utf-8").split("## Principals and permissions", 1)[1].split("\n## ", 1)[0]
    return [shlex.split(line) for line in re.findall(r"`manage\.py ([^`]+)`", section)]


def test_the_documented_commands_give_an_engine_a_token_that_creates_its_tasks():
    commands = documented_commands()
    assert commands and commands[-1][0] == "issue_token"
    source = f"pay-{uuid.uuid4().hex[:8]}"  # the doc's "payments", once per run
    outputs = []
    for name, *args in commands:
        out = io.StringIO()
        call_command(name, *[a.replace("payments", source) for a in args], stdout=out, stderr=io.StringIO())
        outputs.append(out.getvalue().strip())
    engine = ApiClient(outputs[-1])  # issue_token prints the token, its only line
    assert engine.post("/api/external-tasks", task_body(source)).status_code == 201
    assert engine.post("/api/external-tasks", task_body(f"{source}-other")).status_code == 403
