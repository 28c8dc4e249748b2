"""A thread outlives its graph's registration: readable everywhere, never half-decided.

Restarting an instance with a ``GATEHOUSE_GRAPHS`` that no longer names a graph (the docs invite
pointing it at your own graphs) left every page, API read and /lg/ state of that graph's threads
answering 500 (``UnknownGraph``), while the inbox still listed their tasks. The state and history are
now read from the checkpoints alone, every value masked for a reader without "view sensitive" (the
graph's redaction rules are unknown here). A decision is still recorded; its resume fails naming the graph, and nothing
else can run the thread (retry, fork, replay, continue: a 409) until the graph is registered again.
"""

from __future__ import annotations

import pytest
from django.test import Client

from approvals.models import ApprovalTask
from approvals.redaction import MASK
from runtime.models import Thread
from tests.conftest import ApiClient, api_decide, loan_input, pending_tasks, thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_a_thread_of_a_graph_no_longer_registered_reads_and_refuses_decisions(operator, reviewer, personas):
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000, income=40000))
    [task] = pending_tasks(reviewer, thread["id"])
    # The instance restarted without the graph: its rows still name it.
    Thread.objects.filter(pk=thread["id"]).update(graph="retired_loans")
    ApprovalTask.objects.filter(thread_id=thread["id"]).update(graph="retired_loans")

    api = ApiClient(personas["auditor"].token)
    detail = api.get(f"/api/threads/{thread['id']}")
    assert detail.status_code == 200 and detail.json()["values"]["amount"] == 20000
    history = api.get(f"/api/threads/{thread['id']}/history")
    assert history.status_code == 200 and len(history.json()) >= 2
    assert all("__start__" not in c["values"] and not any(":" in k for k in c["values"]) for c in history.json())
    assert api.get(f"/api/tasks/{task['id']}").status_code == 200
    assert api.get(f"/lg/threads/{thread['id']}/state").json()["values"]["amount"] == 20000

    # Its redaction rules are unknown here: a reader without "view sensitive" sees every value masked.
    masked = ApiClient(personas["reviewer"].token).get(f"/api/threads/{thread['id']}").json()["values"]
    assert masked["amount"] == MASK and masked["applicant"] == MASK

    console = Client()
    console.force_login(personas["reviewer"].user)
    for page in (f"/threads/{thread['id']}/", f"/tasks/{task['id']}/"):
        response = console.get(page)
        assert response.status_code == 200, page
        assert 'id="graph-retired"' in response.content.decode()

    # A decision is still recorded (it is the reviewer's signature); its resume fails, naming the graph,
    # and a retry is refused until the graph is registered again (then the retry re-applies it).
    assert api_decide(reviewer, task, "approve", reason="late").status_code == 201
    failed = thread_settled(operator, thread["id"], statuses=("failed",))
    assert "retired_loans" in failed["error"]
    refused = operator.client.post(f"/api/threads/{thread['id']}/retry", {})
    assert refused.status_code == 409 and refused.json()["error"]["field"] == "thread_id"
    assert "not registered" in refused.json()["error"]["message"]
