"""Every API endpoint × every persona → the status it must get.

A principal gets 404 for an object it may not see (existence does not leak),
403 for an action it may not take, 401 without a valid token. The table must
cover every endpoint in the OpenAPI schema: a new endpoint without a rule here
fails the suite.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from console.api import api
from tests.conftest import ApiClient, Persona, api_decide, loan_input, pending_tasks, thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

PERSONAS = ("anonymous", "outsider", "reviewer", "reviewer2", "loan_reviewer", "auditor", "operator", "admin")

# Subjects: "-" no object; "loan"/"kyc" a thread paused at a gate of that graph (and its
# task); "failed" a thread of the `flaky` graph that failed. Allowed state-changing calls
# get a fresh subject each, so one persona's decision never hides another's.
#
#      method  path                                 subject     anon outs  rev rev2 loanr aud  oper admin
MATRIX: list[tuple[str, str, str, tuple[int, ...]]] = [
    ("GET", "/api/graphs", "-", (401, 200, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/threads", "-", (401, 200, 200, 200, 200, 200, 200, 200)),
    ("POST", "/api/threads", "loan", (401, 403, 403, 403, 403, 403, 201, 201)),
    ("POST", "/api/threads", "kyc", (401, 403, 403, 403, 403, 403, 201, 201)),
    ("GET", "/api/threads/{thread_id}", "loan", (401, 404, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}", "kyc", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}/history", "loan", (401, 404, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}/history", "kyc", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}/runs", "loan", (401, 404, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}/runs", "kyc", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}/effects", "loan", (401, 404, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}/effects", "kyc", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("POST", "/api/threads/{thread_id}/retry", "failed", (401, 404, 403, 403, 404, 403, 202, 202)),
    ("POST", "/api/threads/{thread_id}/retry", "loan", (401, 404, 403, 403, 403, 403, 409, 409)),
    ("GET", "/api/tasks", "-", (401, 200, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/tasks/{task_id}", "loan", (401, 404, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/tasks/{task_id}", "kyc", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("POST", "/api/tasks/{task_id}/decision", "loan", (401, 404, 201, 201, 201, 403, 403, 201)),
    ("POST", "/api/tasks/{task_id}/decision", "kyc", (401, 404, 201, 201, 404, 403, 403, 201)),
    ("GET", "/api/audit", "-", (401, 403, 403, 403, 403, 200, 403, 200)),
    ("GET", "/api/audit/export", "-", (401, 403, 403, 403, 403, 200, 403, 200)),
    # Webhooks: the delivery endpoint's only credential is its signature; managing
    # endpoints and subscriptions is for operators and admins; auditors read the logs.
    ("POST", "/api/webhooks/{name}", "hook", (401, 401, 401, 401, 401, 401, 401, 401)),
    ("GET", "/api/webhooks/{name}/deliveries", "hook", (401, 404, 404, 404, 404, 200, 200, 200)),
    ("GET", "/api/webhook-endpoints", "-", (401, 200, 200, 200, 200, 200, 200, 200)),
    # Inbound endpoints are admin-only: an endpoint's secret is a right to decide its gates.
    ("POST", "/api/webhook-endpoints", "-", (401, 403, 403, 403, 403, 403, 403, 201)),
    ("POST", "/api/webhook-endpoints/{name}/rotate", "hook", (401, 404, 404, 404, 404, 403, 403, 200)),
    ("PATCH", "/api/webhook-endpoints/{name}", "hook", (401, 404, 404, 404, 404, 403, 403, 200)),
    ("DELETE", "/api/webhook-endpoints/{name}", "hook", (401, 404, 404, 404, 404, 403, 403, 204)),
    ("GET", "/api/webhook-subscriptions", "-", (401, 200, 200, 200, 200, 200, 200, 200)),
    ("POST", "/api/webhook-subscriptions", "-", (401, 403, 403, 403, 403, 403, 201, 201)),
    ("DELETE", "/api/webhook-subscriptions/{subscription_id}", "sub", (401, 403, 403, 403, 403, 403, 204, 204)),
    ("GET", "/api/webhook-deliveries", "-", (401, 200, 200, 200, 200, 200, 200, 200)),
    ("POST", "/api/webhook-deliveries/{delivery_id}/retry", "-", (401, 403, 403, 403, 403, 403, 404, 404)),
    # User administration: admins only ("user" is a reviewer account; a fresh one per allowed change).
    ("GET", "/api/users", "-", (401, 403, 403, 403, 403, 403, 403, 200)),
    ("POST", "/api/users", "-", (401, 403, 403, 403, 403, 403, 403, 201)),
    ("GET", "/api/users/{user_id}", "user", (401, 403, 403, 403, 403, 403, 403, 200)),
    ("POST", "/api/users/{user_id}/roles", "user", (401, 403, 403, 403, 403, 403, 403, 200)),
    ("POST", "/api/users/{user_id}/assignments", "user", (401, 403, 403, 403, 403, 403, 403, 200)),
    ("POST", "/api/users/{user_id}/deactivate", "user", (401, 403, 403, 403, 403, 403, 403, 200)),
    ("POST", "/api/users/{user_id}/reactivate", "user", (401, 403, 403, 403, 403, 403, 403, 200)),
    ("POST", "/api/users/{user_id}/password", "user", (401, 403, 403, 403, 403, 403, 403, 200)),
    ("POST", "/api/users/{user_id}/otp-reset", "user", (401, 403, 403, 403, 403, 403, 403, 200)),
    # External tasks ("ext": a pending task of source "matrix"): engines (start) create, assignees read.
    ("POST", "/api/external-tasks", "-", (401, 403, 403, 403, 403, 403, 201, 201)),
    ("GET", "/api/external-tasks/{task_id}", "ext", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("GET", "/api/external-tasks/by-key/{source}/{key}", "ext", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("GET", "/api/external-tasks/{task_id}/decision", "ext", (401, 404, 202, 202, 404, 202, 202, 202)),
    # Hand-offs: claims for whoever decides; reassign for leads and admins; delegate only by the claim
    # holder (nobody holds the shared task's claim: 409); one's own out-of-office (PUT here clears it).
    ("GET", "/api/tasks/{task_id}/claim", "loan", (401, 404, 200, 200, 200, 200, 200, 200)),
    ("POST", "/api/tasks/{task_id}/claim", "loan", (401, 404, 201, 201, 201, 403, 403, 201)),
    ("DELETE", "/api/tasks/{task_id}/claim", "loan", (401, 404, 200, 200, 200, 200, 200, 200)),  # none held
    ("POST", "/api/tasks/{task_id}/reassign", "loan", (401, 404, 403, 403, 403, 403, 403, 200)),
    ("POST", "/api/tasks/{task_id}/delegate", "loan", (401, 404, 409, 409, 409, 403, 403, 409)),
    ("GET", "/api/me/away", "-", (401, 200, 200, 200, 200, 200, 200, 200)),
    ("PUT", "/api/me/away", "-", (401, 200, 200, 200, 200, 200, 200, 200)),
    # Conversation (comments; "talk"/"talk-kyc": a task made without the worker, with a comment by admin).
    # Read = who sees the task; post = reviewers, operators, admins (never auditors); edit = the author only.
    ("GET", "/api/tasks/{task_id}/comments", "talk", (401, 404, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/tasks/{task_id}/comments", "talk-kyc", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("POST", "/api/tasks/{task_id}/comments", "talk", (401, 404, 201, 201, 201, 403, 201, 201)),
    ("POST", "/api/tasks/{task_id}/comments", "talk-kyc", (401, 404, 201, 201, 404, 403, 201, 201)),
    ("GET", "/api/threads/{thread_id}/comments", "talk-kyc", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("POST", "/api/threads/{thread_id}/comments", "talk-kyc", (401, 404, 201, 201, 404, 403, 201, 201)),
    ("POST", "/api/comments/{comment_id}/versions", "talk", (401, 404, 403, 403, 403, 403, 403, 201)),
    ("POST", "/api/comments/{comment_id}/versions", "talk-kyc", (401, 404, 403, 403, 404, 403, 403, 201)),
    # Team dashboard: leads (tests/approvals/test_dashboard.py), auditors and admins.
    ("GET", "/api/dashboard", "-", (401, 403, 403, 403, 403, 200, 403, 200)),
    # time travel: fork/replay for operators and admins (a fresh paused thread each); branches and
    # subgraph states for whoever may read the thread
    ("POST", "/api/threads/{thread_id}/fork", "loan", (401, 404, 403, 403, 403, 403, 201, 201)),
    ("POST", "/api/threads/{thread_id}/replay", "loan", (401, 404, 403, 403, 403, 403, 202, 202)),
    ("GET", "/api/threads/{thread_id}/branches", "loan", (401, 404, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}/branches", "kyc", (401, 404, 200, 200, 404, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}/subgraphs", "loan", (401, 404, 200, 200, 200, 200, 200, 200)),
    ("GET", "/api/threads/{thread_id}/subgraphs", "kyc", (401, 404, 200, 200, 404, 200, 200, 200)),
    # Bulk decisions (issue 14): deciders start one (each task then passes its own checks); a bulk is
    # seen by its starter ("bulk": the admin's) and by auditors and admins who see every graph.
    ("POST", "/api/bulk-decisions", "-", (401, 403, 202, 202, 202, 403, 403, 202)),
    ("GET", "/api/bulk-decisions/{bulk_id}", "bulk", (401, 404, 404, 404, 404, 200, 404, 200)),
    # Cancelling a running run: operators and admins (the thread has no active run: 409 for them).
    ("POST", "/api/threads/{thread_id}/cancel-run", "loan", (401, 404, 403, 403, 403, 403, 409, 409)),
    ("POST", "/api/threads/{thread_id}/cancel-run", "kyc", (401, 404, 403, 403, 404, 403, 409, 409)),
]

CASES = [
    pytest.param(method, path, subject, persona, statuses[i], id=f"{method} {path} [{subject}] {persona}")
    for method, path, subject, statuses in MATRIX
    for i, persona in enumerate(PERSONAS)
]


def test_every_endpoint_in_the_openapi_schema_has_a_row():
    endpoints = {
        (method.upper(), path)
        for path, operations in api.get_openapi_schema()["paths"].items()
        for method in operations
        if method in {"get", "post", "put", "patch", "delete"}
    }
    covered = {(method, path) for method, path, _, _ in MATRIX}
    assert endpoints - covered == set(), "endpoints without a permission rule in MATRIX"
    assert covered - endpoints == set(), "rules for endpoints that no longer exist"


def test_every_row_covers_every_persona():
    assert all(len(statuses) == len(PERSONAS) for *_, statuses in MATRIX)


# --- subjects ---------------------------------------------------------------------------------------


@dataclass
class Subject:
    graph: str
    thread_id: str
    task_id: str = ""
    name: str = ""
    user_id: int = 0
    comment_id: str = ""  # Conversation (comments)


def kyc_input() -> dict[str, Any]:
    return {"applicant": {"name": f"Matrix {uuid.uuid4().hex[:6]}", "country": "GB"}}


def subject_make(kind: str, personas: dict[str, Persona]) -> Subject:
    admin = personas["admin"]
    if kind in ("talk", "talk-kyc"):  # Conversation (comments): no worker needed to talk about a task
        from approvals.comments import comment_post
        from tests.factories import task_make

        graph, node = ("loan_approval", "human_review") if kind == "talk" else ("kyc_onboarding", "compliance_review")
        task = task_make(graph=graph, node=node)
        comment = comment_post(actor=admin.user, task=task, body="matrix")
        return Subject(graph, str(task.thread_id), str(task.pk), comment_id=str(comment.pk))
    if kind == "user":
        from approvals import users

        user = users.user_create(actor=users.CLI, username=f"matrix-{uuid.uuid4().hex[:8]}", roles=["reviewer"])
        return Subject("", "", user_id=user.pk)
    if kind == "ext":
        from approvals.external import ExternalTaskSpec, external_task_create

        key = f"matrix-{uuid.uuid4().hex[:8]}"
        spec = ExternalTaskSpec(source="matrix", key=key, title="m", payload={})
        item, _ = external_task_create(actor=admin.user, spec=spec)
        return Subject("external:matrix", str(item.task.thread_id), str(item.task_id), name=key)
    if kind == "hook":
        from approvals.inbound.webhooks import webhook_endpoint_create

        name = f"matrix-{uuid.uuid4().hex[:8]}"
        gates = ["identity_check"]
        endpoint = webhook_endpoint_create(actor=admin.user, name=name, graph="kyc_onboarding", gates=gates)
        return Subject("kyc_onboarding", "", name=endpoint.name)
    if kind == "sub":  # an outbound subscription no event reaches (a graph and event no test produces)
        from approvals.outbound.subscriptions import subscription_create

        created = subscription_create(
            actor=admin.user, url="http://127.0.0.1:9/matrix", graph="breakpoint_review", event_types=["thread.failed"]
        )
        return Subject("breakpoint_review", "", name=str(created.pk))
    if kind == "bulk":  # bulk decisions (issue 14): the admin's, of a task that does not exist (skipped)
        from django.utils import timezone

        from approvals.bulk import bulk_decide
        from approvals.services import Signer

        started = bulk_decide(
            actor=admin.user,
            outcome="approve",
            reason="matrix",
            task_ids=[str(uuid.uuid4())],
            signer=Signer(authenticated_at=timezone.now()),
        )
        return Subject("", "", name=str(started.pk))
    if kind == "failed":
        thread = thread_start(admin, "flaky", {"subject": "matrix"})
        thread_settled(admin, thread["id"], statuses=("failed",))
        return Subject("flaky", thread["id"])
    graph, graph_input = ("loan_approval", loan_input()) if kind == "loan" else ("kyc_onboarding", kyc_input())
    thread = thread_start(admin, graph, graph_input)
    [task] = pending_tasks(admin, thread["id"])
    return Subject(graph, thread["id"], task["id"])


@pytest.fixture(scope="module")
def shared(worker, personas, django_db_blocker) -> dict[str, Subject]:
    if not worker.alive:
        worker.start()
    with django_db_blocker.unblock():
        kinds = ("loan", "kyc", "failed", "hook", "user", "ext", "talk", "talk-kyc", "bulk", "sub")
        return {kind: subject_make(kind, personas) for kind in kinds}


def client_for(persona: str, personas: dict[str, Persona]) -> ApiClient:
    return ApiClient(None) if persona == "anonymous" else personas[persona].client


def call(client: ApiClient, method: str, path: str, subject: str, target: Subject | None) -> Any:
    url = path.format(
        thread_id=target.thread_id if target else "",
        task_id=target.task_id if target else "",
        name=target.name if target else "",
        delivery_id=999_999_999,  # none: the permission check comes before the lookup
        user_id=target.user_id if target else 0,
        source="matrix",
        key=target.name if target else "",
        comment_id=target.comment_id if target else "",
        bulk_id=target.name if target else "",
        subscription_id=target.name if target else "",
    )
    if method == "GET":
        return client.get(url)
    if path == "/api/webhook-endpoints":
        body = {"name": f"matrix-{uuid.uuid4().hex[:8]}", "graph": "kyc_onboarding", "gates": ["identity_check"]}
        return client.post(url, body)
    if method in ("PATCH", "DELETE"):
        send = getattr(client.client, method.lower())
        body = json.dumps({"gates": ["identity_check"]})
        return send(url, body, content_type="application/json", headers=client.headers)
    if path == "/api/webhook-subscriptions":
        # A graph and event no other test produces, so the subscription never sends anything.
        body = {"url": "http://127.0.0.1:9/matrix", "graph": "breakpoint_review", "event_types": ["thread.failed"]}
        return client.post(url, body)
    if path == "/api/external-tasks":
        return client.post(url, {"source": "matrix", "key": f"matrix-{uuid.uuid4().hex[:8]}", "title": "m"})
    if path == "/api/bulk-decisions":  # bulk decisions (issue 14): a task that does not exist is skipped
        return client.post(url, {"outcome": "approve", "reason": "matrix", "task_ids": [str(uuid.uuid4())]})
    if path == "/api/users":
        return client.post(url, {"username": f"matrix-{uuid.uuid4().hex[:8]}", "roles": ["reviewer"]})
    if path.endswith("/roles"):
        return client.post(url, {"roles": ["reviewer", "operator"]})
    if path.endswith("/assignments"):
        return client.post(url, {"assignments": [{"graph": "loan_approval"}]})
    if path == "/api/threads":
        graph, graph_input = ("loan_approval", loan_input()) if subject == "loan" else ("kyc_onboarding", kyc_input())
        return client.post(url, {"graph": graph, "input": graph_input})
    if path.endswith("/comments") or path.endswith("/versions"):  # Conversation (comments)
        return client.post(url, {"body": f"permission matrix {uuid.uuid4().hex[:6]}"})
    if path.endswith("/decision"):
        return client.post(url, {"decision": "approve", "reason": "permission matrix"})
    # hand-offs
    if path.endswith("/reassign"):
        return client.post(url, {"to_group": "reviewer", "note": "permission matrix"})
    if path.endswith("/delegate"):
        from django.contrib.auth import get_user_model

        someone = get_user_model().objects.order_by("pk").values_list("username", flat=True).first()
        return client.post(url, {"to_user": someone, "note": "permission matrix"})
    if method == "PUT":
        body = json.dumps({"delegate": None})
        return client.client.put(url, body, content_type="application/json", headers=client.headers)
    if path.endswith(("/fork", "/replay")):  # time travel: from the checkpoint the thread paused at
        from runtime.models import Thread

        checkpoint = Thread.objects.get(pk=target.thread_id).checkpoint_id if target else ""
        return client.post(url, {"checkpoint_id": checkpoint, "reason": "permission matrix"})
    return client.post(url, {})


@pytest.mark.parametrize("method,path,subject,persona,expected", CASES)
def test_each_persona_gets_the_status_the_matrix_gives(personas, shared, method, path, subject, persona, expected):
    target: Subject | None = None
    if subject != "-" and path != "/api/threads":
        # A deleted endpoint is gone for every later row: deletion gets a fresh one.
        # (Releasing a claim nobody holds changes nothing: the shared task serves.)
        fresh = 200 <= expected < 300 and (
            (method == "POST" and subject != "hook") or (method == "DELETE" and not path.endswith("/claim"))
        )
        target = subject_make(subject, personas) if fresh else shared[subject]
    response = call(client_for(persona, personas), method, path, subject, target)
    assert response.status_code == expected, response.content
    if expected >= 400:
        body = response.json()
        assert set(body["error"]) == {"code", "message", "field"}, body


# --- what each persona sees in lists -----------------------------------------------------------------


@pytest.mark.parametrize(
    "persona,sees_loan,sees_kyc",
    [
        ("outsider", False, False),
        ("reviewer", True, True),
        ("reviewer2", True, True),
        ("loan_reviewer", True, False),
        ("auditor", True, True),
        ("operator", True, True),
        ("admin", True, True),
    ],
)
def test_the_task_list_shows_only_the_graphs_a_persona_may_see(personas, shared, persona, sees_loan, sees_kyc):
    client = personas[persona].client
    for kind, sees in (("loan", sees_loan), ("kyc", sees_kyc)):
        items = client.get("/api/tasks", thread=shared[kind].thread_id).json()["items"]
        assert (shared[kind].task_id in [t["id"] for t in items]) is sees, (kind, items)


@pytest.mark.parametrize("persona", ["outsider", "loan_reviewer"])
def test_a_graph_filter_does_not_widen_what_a_persona_sees(personas, shared, persona):
    items = personas[persona].client.get("/api/tasks", graph="kyc_onboarding").json()["items"]
    assert items == []


def test_an_outsider_sees_empty_lists(personas):
    client = personas["outsider"].client
    assert client.get("/api/tasks").json() == {"items": [], "next_cursor": None}
    assert client.get("/api/graphs").json() == []


@pytest.mark.parametrize(
    "persona,graphs",
    [
        ("loan_reviewer", {"loan_approval"}),
        ("reviewer", {"loan_approval", "kyc_onboarding"}),
        ("auditor", {"loan_approval", "kyc_onboarding"}),
    ],
)
def test_the_graph_list_shows_only_the_graphs_a_persona_may_see(personas, persona, graphs):
    names = {g["name"] for g in personas[persona].client.get("/api/graphs").json()}
    if persona == "loan_reviewer":
        assert names == graphs
    else:
        assert graphs <= names


@pytest.mark.parametrize("persona", ["auditor", "admin"])
def test_auditors_and_admins_read_a_threads_audit_trail(personas, shared, persona):
    events = personas[persona].client.get("/api/audit", thread=shared["kyc"].thread_id).json()
    actions = {e["action"] for e in events}
    assert {"thread.started", "task.opened"} <= actions


@pytest.mark.parametrize(
    "persona,can_decide",
    [("reviewer", True), ("loan_reviewer", True), ("auditor", False), ("operator", False), ("admin", True)],
)
def test_task_detail_says_whether_the_persona_may_decide(personas, shared, persona, can_decide):
    detail = personas[persona].client.get(f"/api/tasks/{shared['loan'].task_id}").json()
    assert detail["can_decide"] is can_decide


@pytest.mark.parametrize("persona", ["auditor", "operator"])
def test_a_refused_decision_writes_nothing(personas, shared, persona):
    from approvals.models import ApprovalTask, Decision

    task_id = shared["loan"].task_id
    response = api_decide(personas[persona], task_id)
    assert response.status_code == 403
    assert not Decision.objects.filter(task_id=task_id).exists()
    assert ApprovalTask.objects.get(pk=task_id).status == "pending"


def test_a_thread_lists_its_pending_tasks_to_a_persona_who_may_see_them(personas, shared):
    body = personas["operator"].client.get(f"/api/threads/{shared['kyc'].thread_id}").json()
    assert [t["id"] for t in body["pending_tasks"]] == [shared["kyc"].task_id]


# --- a token limited to reading, at every write route, with a malformed request: 403 first -------------------

# The only write without a token: a signed webhook delivery (its signature is its credential).
UNTOKENED_WRITES = {("POST", "/api/webhooks/{name}")}


def _write_routes() -> list[tuple[str, str]]:
    from lgplatform.api import api as lg_api

    routes = []
    for served in (api, lg_api):
        for path, operations in served.get_openapi_schema()["paths"].items():
            for method in operations:
                if method in ("post", "put", "patch", "delete") and (method.upper(), path) not in UNTOKENED_WRITES:
                    routes.append((method.upper(), path))
    return routes


def _malformed_url(path: str, hook: str) -> str:
    """The path with every id malformed (refused as sent); a name, which no text malforms, names a webhook
    endpoint that exists (an unknown one is a 404 the token may be told: it may read the endpoints)."""
    return re.sub(r"\{(\w+)\}", lambda m: hook if m.group(1) == "name" else "not-an-id", path)


def _read_post(path: str) -> bool:
    from tests.api.test_token_action_refusal_order import READS

    return ("POST", path) in READS


@pytest.fixture(scope="module")
def read_only_admin(django_db_blocker, personas) -> ApiClient:
    from approvals.tokens import token_issue

    with django_db_blocker.unblock():
        return ApiClient(token_issue(user=personas["admin"].user, actions=["read"]))


@pytest.mark.parametrize("body", ["{not json", "[1]", '{"decision": 5, "graph": [], "values": 1}'])
@pytest.mark.parametrize("method,path", [r for r in _write_routes() if not _read_post(r[1])])
def test_a_read_only_token_at_a_write_route_is_a_403_whatever_it_sent(read_only_admin, shared, method, path, body):
    """An admin's token limited to read: its scope is the refusal, before what it sent is looked at. A malformed
    decision was a 422 to it, a well-formed one a 403: a client that may not write could probe validation."""
    client = read_only_admin
    send = getattr(client.client, method.lower())
    url = _malformed_url(path, shared["hook"].name)
    response = send(url, body, content_type="application/json", headers=client.headers)
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "forbidden" and error["message"].startswith("this API token is limited to read"), error


@pytest.mark.parametrize("method,path", [r for r in _write_routes() if _read_post(r[1])])
def test_a_read_only_token_at_a_post_that_reads_is_told_what_is_wrong_with_it(read_only_admin, shared, method, path):
    client = read_only_admin
    url = _malformed_url(path, shared["hook"].name)
    response = client.client.post(url, "{not json", content_type="application/json", headers=client.headers)
    assert response.status_code in (400, 422), response.content


def test_the_posts_that_read_are_the_redaction_canarys(read_only_admin):
    """The routes a read-only token may POST to are those the redaction canary crawls as reads."""
    from tests.security.test_redaction_canary import READ_BODIES

    assert {path for method, path in _write_routes() if _read_post(path)} == set(READ_BODIES)
