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


@pytest.mark.parametrize(
    "method,path,body,needed",
    [
        ("put", "/api/me/away", {"delegate": "nobody"}, "'decide'"),
        ("post", "/api/threads", {"graph": "loan_approval", "input": {}}, "'start'"),
        ("post", "/lg/threads", {}, "'start'"),
        ("put", "/lg/store/items", {"namespace": ["x"], "key": "k", "value": {}}, "'store'"),
    ],
)
def test_a_token_limited_to_read_is_refused_for_its_scope_before_anything_else(personas, method, path, body, needed):
    """An admin may do all of these; the token's scope is the reason, and the refusal says so first."""
    import json

    read_only = ApiClient(token_issue(user=personas["admin"].user, actions=["read"]))
    response = getattr(read_only.client, method)(
        path, json.dumps(body), content_type="application/json", headers=read_only.headers
    )
    assert response.status_code == 403, response.content
    message = response.json()["error"]["message"]
    assert message.startswith("this API token is limited to read") and needed in message, message


def test_a_read_only_token_deciding_is_told_its_scope_is_the_reason(personas):
    reviewer = personas["reviewer"]
    thread = thread_start(personas["operator"], "loan_approval", loan_input())
    [task] = pending_tasks(reviewer, thread["id"])
    read_only = ApiClient(token_issue(user=reviewer.user, actions=["read"]))
    refused = api_decide(read_only, task, reason="ok")
    assert refused.status_code == 403
    assert "this API token is limited to read" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("persona", "actions", "expected"),
    [
        # The token is the reason: refused as it authenticates, naming the route (before its body is read).
        ("reviewer", ["read"], "this API token is limited to read: PUT /api/me/away needs the 'decide' action"),
        (
            "admin",
            ["start", "retry"],
            "this API token is limited to retry, start: PUT /api/me/away needs the 'decide' action",
        ),
        ("operator", ["read"], "you may not set yourself away: you review nothing"),  # the role is the reason
    ],
)
def test_a_refused_out_of_office_says_why_in_one_sentence(personas, persona, actions, expected):
    """The role's reason ("you review nothing") was spliced into the token's sentence: "... limited to read: to be
    away from reviewing: you review nothing it needs the 'decide' action"."""
    import json

    from approvals.models import Away

    scoped = ApiClient(token_issue(user=personas[persona].user, actions=actions))
    body = json.dumps({"delegate": personas["reviewer2"].username})
    response = scoped.client.put("/api/me/away", body, content_type="application/json", headers=scoped.headers)
    assert response.status_code == 403, response.content
    assert response.json()["error"]["message"] == expected
    assert not Away.objects.filter(user=personas[persona].user).exists()
