"""What the page says once a decision completes a task: a graph's thread resumes on a worker; an external task
(another engine's: no graph, no worker) has its result fixed, sent to its engine or fetched by it."""

from __future__ import annotations

import uuid
from html import unescape

import pytest

from approvals.models import ApprovalTask
from tests.console.conftest import console_client, console_decide
from tests.external.conftest import create, engine_persona, task_body
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def test_the_final_approval_of_a_four_eyes_external_task_says_where_its_result_goes(personas):
    engine = engine_persona(f"pay-{uuid.uuid4().hex[:8]}")
    source = engine.username.removeprefix("engine-")
    created = create(engine.client, task_body(source, required_approvals=2, decisions=["approve", "reject"]))
    assert created.status_code == 201, created.content
    task = ApprovalTask.objects.get(pk=created.json()["id"])
    first = console_decide(console_client(personas["reviewer"]), task, decision="approve", reason="ok")
    assert first.status_code == 201, unescape(first.content.decode())[:2000]
    assert "1 of 2 approvals so far" in unescape(first.content.decode())
    final = console_decide(console_client(personas["approver"]), task, decision="approve", reason="ok too")
    assert final.status_code == 201, unescape(final.content.decode())[:2000]
    said = unescape(final.content.decode())
    assert "resumes on a worker" not in said and "panel on the right" not in said
    words = said.split('id="external-result">', 1)[1].split("</p>", 1)[0]
    assert f"<strong>{source}</strong> is sent it at its callback URL, if it gave one" in words
    assert f"GET /api/external-tasks/{task.pk}/decision" in words


def test_the_final_decision_of_a_graph_task_says_its_thread_resumes(personas):
    task = task_make(metadata={"case": f"D-{uuid.uuid4().hex[:6]}"})
    done = console_decide(console_client(personas["reviewer"]), task, decision="approve", reason="ok")
    assert done.status_code == 201, unescape(done.content.decode())[:2000]
    said = unescape(done.content.decode())
    assert "The thread resumes on a worker" in said and 'id="external-result"' not in said
