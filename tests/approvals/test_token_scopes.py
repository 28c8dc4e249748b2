"""Scoped API tokens narrow what their user may do; revoked tokens stop working."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from approvals.tokens import token_authenticate, token_issue
from tests.conftest import ApiClient, api_decide, loan_input, pending_tasks, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_a_read_only_token_cannot_decide_even_for_a_reviewer(personas):
    reviewer = personas["reviewer"]
    thread = thread_start(personas["operator"], "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"])
    read_only = ApiClient(token_issue(user=reviewer.user, actions=["read"]))
    assert read_only.get(f"/api/tasks/{task['id']}").status_code == 200
    refused = api_decide(read_only, task)
    assert refused.status_code == 403


def test_a_graph_scoped_token_sees_only_its_graphs(personas):
    admin = personas["admin"]
    kyc = thread_start(admin, "kyc_onboarding", {"applicant": {"name": "Scoped", "country": "GB"}})
    [task] = pending_tasks(admin, kyc["id"])
    loans_only = ApiClient(token_issue(user=admin.user, graphs=["loan_approval"]))
    assert loans_only.get(f"/api/tasks/{task['id']}").status_code == 404
    assert loans_only.post("/api/threads", {"graph": "kyc_onboarding", "input": {}}).status_code == 403
    assert loans_only.post("/api/threads", {"graph": "loan_approval", "input": loan_input()}).status_code == 201


def test_a_revoked_token_no_longer_authenticates(personas):
    secret = token_issue(user=personas["reviewer"].user)
    assert token_authenticate(secret) is not None
    out = StringIO()
    call_command("revoke_token", secret[:10], stdout=out)
    assert "revoked 1" in out.getvalue()
    assert token_authenticate(secret) is None
    assert ApiClient(secret).get("/api/tasks").status_code == 401


def test_issue_token_refuses_an_unknown_action(personas):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="unknown token actions"):
        call_command("issue_token", personas["reviewer"].username, "--actions", "read,launch", stdout=StringIO())
