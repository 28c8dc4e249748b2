"""A token narrowed to actions is refused at a route it may not use before anything it sent is judged.

A token limited to ``decide`` sending a malformed body to ``POST /api/threads`` (which needs ``start``) was
told how the body is validated (a 422) where a well-formed one was a 403: a client learnt the validation of
routes it has no right to. Every write route of both APIs, with a token of an admin (whose role may do all of
them) narrowed to each single action, and malformed requests: the token's 403, naming the action the route
needs, exactly where its action is not among them; the refusal of what it sent where it is.

``NEEDED`` is written from what each route's service checks (``permissions.require``), not read from the
routes' declarations: the walk compares the two, and a write route missing here fails the suite.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from console.api import api
from tests.conftest import ApiClient, Persona

pytestmark = pytest.mark.usefixtures("live_db")

ACTIONS = ("read", "decide", "start", "retry", "store", "admin")
COMMENT = frozenset({"decide", "start", "retry"})  # reviewers, operators and leads comment

# (method, path) → the token actions one of which the route needs.
NEEDED: dict[tuple[str, str], frozenset[str]] = {
    ("POST", "/api/threads"): frozenset({"start"}),
    ("POST", "/api/threads/{thread_id}/retry"): frozenset({"retry"}),
    ("POST", "/api/threads/{thread_id}/cancel-run"): frozenset({"retry"}),
    ("POST", "/api/threads/{thread_id}/fork"): frozenset({"admin"}),  # runtime.time_travel
    ("POST", "/api/threads/{thread_id}/replay"): frozenset({"admin"}),
    ("POST", "/api/tasks/{task_id}/decision"): frozenset({"decide"}),
    ("POST", "/api/bulk-decisions"): frozenset({"decide"}),
    ("POST", "/api/tasks/{task_id}/claim"): frozenset({"decide"}),
    ("DELETE", "/api/tasks/{task_id}/claim"): frozenset({"decide", "admin"}),  # one's own, or anyone's
    ("POST", "/api/tasks/{task_id}/reassign"): frozenset({"decide"}),
    ("POST", "/api/tasks/{task_id}/delegate"): frozenset({"decide"}),
    ("PUT", "/api/me/away"): frozenset({"decide"}),
    ("POST", "/api/tasks/{task_id}/comments"): COMMENT,
    ("POST", "/api/threads/{thread_id}/comments"): COMMENT,
    ("POST", "/api/comments/{comment_id}/versions"): COMMENT,
    ("POST", "/api/external-tasks"): frozenset({"start"}),
    ("POST", "/api/webhook-endpoints"): frozenset({"admin"}),  # approvals.manage_webhooks
    ("POST", "/api/webhook-endpoints/{name}/rotate"): frozenset({"admin"}),
    ("PATCH", "/api/webhook-endpoints/{name}"): frozenset({"admin"}),
    ("DELETE", "/api/webhook-endpoints/{name}"): frozenset({"admin"}),
    ("POST", "/api/webhook-subscriptions"): frozenset({"retry"}),
    ("DELETE", "/api/webhook-subscriptions/{subscription_id}"): frozenset({"retry"}),
    ("POST", "/api/webhook-deliveries/{delivery_id}/retry"): frozenset({"retry"}),
    ("POST", "/api/users"): frozenset({"admin"}),  # approvals.manage_users
    ("POST", "/api/users/{user_id}/roles"): frozenset({"admin"}),
    ("POST", "/api/users/{user_id}/assignments"): frozenset({"admin"}),
    ("POST", "/api/users/{user_id}/deactivate"): frozenset({"admin"}),
    ("POST", "/api/users/{user_id}/reactivate"): frozenset({"admin"}),
    ("POST", "/api/users/{user_id}/password"): frozenset({"admin"}),
    ("POST", "/api/users/{user_id}/otp-reset"): frozenset({"admin"}),
    ("POST", "/lg/threads"): frozenset({"start"}),
    ("PATCH", "/lg/threads/{thread_id}"): frozenset({"start"}),  # threads.update (metadata)
    ("POST", "/lg/threads/{thread_id}/state"): frozenset({"retry", "admin"}),  # an update, or a fork
    ("POST", "/lg/threads/{thread_id}/copy"): frozenset({"admin"}),
    ("POST", "/lg/threads/{thread_id}/runs"): frozenset({"start", "decide"}),  # a start, or a resume
    ("POST", "/lg/threads/{thread_id}/runs/wait"): frozenset({"start", "decide"}),
    ("POST", "/lg/threads/{thread_id}/runs/stream"): frozenset({"start", "decide"}),
    ("POST", "/lg/threads/{thread_id}/runs/{run_id}/cancel"): frozenset({"retry"}),
    ("POST", "/lg/runs"): frozenset({"start"}),  # stateless: a start on a new thread
    ("POST", "/lg/runs/wait"): frozenset({"start"}),
    ("POST", "/lg/runs/stream"): frozenset({"start"}),
    ("POST", "/lg/runs/batch"): frozenset({"start"}),
    ("POST", "/lg/runs/cancel"): frozenset({"retry"}),  # runs.cancel_many
    ("PUT", "/lg/store/items"): frozenset({"store"}),
    ("DELETE", "/lg/store/items"): frozenset({"store"}),
    # crons: each firing starts a run as the cron's owner
    ("POST", "/lg/runs/crons"): frozenset({"start"}),
    ("POST", "/lg/threads/{thread_id}/runs/crons"): frozenset({"start"}),
    ("PATCH", "/lg/runs/crons/{cron_id}"): frozenset({"start"}),
    ("DELETE", "/lg/runs/crons/{cron_id}"): frozenset({"start"}),
}
# The POSTs that only read (the SDK sends their filters in a body): every token is told what is wrong with them.
READS = {
    ("POST", "/lg/assistants/search"),
    ("POST", "/lg/assistants/count"),
    ("POST", "/lg/assistants/{assistant_id}/versions"),
    ("POST", "/lg/threads/search"),
    ("POST", "/lg/threads/count"),
    ("POST", "/lg/threads/{thread_id}/history"),
    ("POST", "/lg/threads/{thread_id}/state/checkpoint"),
    ("POST", "/lg/store/items/search"),
    ("POST", "/lg/store/namespaces"),
    ("POST", "/lg/runs/crons/search"),
    ("POST", "/lg/runs/crons/count"),
}
# The only write without a token: a signed webhook delivery (its signature is its credential).
UNTOKENED = {("POST", "/api/webhooks/{name}")}
# Malformed for every route (not JSON; JSON but not an object), with every id in the path malformed too.
# Not an object of wrong fields: where every field is optional and others are ignored (``/lg/threads``), it
# is a well-formed request, which a token that may use the route would carry out.
BODIES = ("{not json", "[1]")
# A route whose path and body no text malforms (a name, no body): a name that names nothing, refused as a 404
# where the token may use the route (the lookup's), a 403 where it may not (the token's, for any name).
NAME_ONLY = {("DELETE", "/api/webhook-endpoints/{name}")}


def _write_routes() -> set[tuple[str, str]]:
    from lgplatform.api import api as lg_api

    routes = set()
    for served in (api, lg_api):
        for path, operations in served.get_openapi_schema()["paths"].items():
            routes |= {(method.upper(), path) for method in operations if method in ("post", "put", "patch", "delete")}
    return routes - UNTOKENED


@pytest.fixture(scope="module")
def scoped(django_db_blocker, personas: dict[str, Persona]) -> dict[str, ApiClient]:
    """An admin's token narrowed to each single action: its role may do everything, its token one thing."""
    from approvals.tokens import token_issue

    with django_db_blocker.unblock():
        return {action: ApiClient(token_issue(user=personas["admin"].user, actions=[action])) for action in ACTIONS}


def _url(path: str) -> str:
    """The path with every id malformed (refused as sent) and every name naming nothing."""
    return re.sub(r"\{(\w+)\}", lambda m: "no-such-endpoint" if m.group(1) == "name" else "not-an-id", path)


def _send(client: ApiClient, method: str, url: str, body: str) -> Any:
    send = getattr(client.client, method.lower())
    return send(url, body, content_type="application/json", headers=client.headers)


def test_the_table_names_every_write_route():
    """A new write route must say here what a token needs there: the walk below covers every one."""
    assert _write_routes() == set(NEEDED) | READS


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("method,path", sorted(NEEDED))
def test_a_token_is_refused_for_its_actions_before_what_it_sent(scoped, method, path, action):
    needed = NEEDED[(method, path)]
    url = _url(path)
    for body in BODIES:
        response = _send(scoped[action], method, url, body)
        if action in needed:  # a route it may use refuses what it sent, as for any token
            refused = (404,) if (method, path) in NAME_ONLY else (400, 422)
            assert response.status_code in refused, (body, response.content)
            continue
        assert response.status_code == 403, (body, response.content)
        wanted = " or ".join(repr(n) for n in sorted(needed))
        expected = f"this API token is limited to {action}: {method} {url} needs the {wanted} action"
        assert response.json()["error"] == {"code": "forbidden", "message": expected, "field": None}


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("method,path", sorted(READS))
def test_a_post_that_reads_tells_every_token_what_is_wrong_with_it(scoped, method, path, action):
    for body in BODIES:
        response = _send(scoped[action], method, _url(path), body)
        assert response.status_code in (400, 422), (body, response.content)


def test_an_api_whose_write_route_declares_nothing_does_not_load():
    """A write route without ``token_needs`` would validate a body before refusing a token: refused at load."""
    from django.core.exceptions import ImproperlyConfigured
    from ninja import Router

    from approvals.api_common import BearerAuth, GatehouseAPI
    from approvals.permissions import token_needs

    router = Router()

    @router.post("/declared")
    @token_needs("runtime.start_thread")
    def declared(request: Any) -> None: ...

    @router.post("/signed", auth=None)  # no token reaches it: nothing to declare
    def signed(request: Any) -> None: ...

    @router.delete("/undeclared")
    def undeclared(request: Any) -> None: ...

    undeclared_api = GatehouseAPI(auth=[BearerAuth()], urls_namespace=f"undeclared-{id(router)}")
    undeclared_api.add_router("/", router)
    with pytest.raises(ImproperlyConfigured, match=r"DELETE /undeclared \(.*undeclared\) declares no permission"):
        undeclared_api.urls  # noqa: B018 - building the URLs is what refuses


def test_a_token_that_may_not_decide_cannot_release_even_its_own_claim(personas, scoped):
    """Releasing one's own claim is a write no service checks a permission for: the token's refusal is raised
    as it authenticates, so a read-only token got a 200 and the claim was gone (found from the outside)."""
    import uuid

    from approvals.models import TaskClaim
    from approvals.tokens import token_issue

    created = scoped["start"].post("/api/external-tasks", {"source": "tokens", "key": uuid.uuid4().hex, "title": "t"})
    assert created.status_code == 201, created.content
    task = created.json()["id"]
    decider = ApiClient(token_issue(user=personas["admin"].user, actions=["read", "decide"]))
    claimed = decider.post(f"/api/tasks/{task}/claim", {})
    assert claimed.status_code == 201, claimed.content
    for action in ("read", "start", "store"):
        response = scoped[action].delete(f"/api/tasks/{task}/claim")
        assert response.status_code == 403, response.content
        needs = "needs the 'admin' or 'decide' action"
        assert response.json()["error"]["message"] == (
            f"this API token is limited to {action}: DELETE /api/tasks/{task}/claim {needs}"
        )
        assert TaskClaim.objects.filter(task_id=task).exists()
    assert decider.delete(f"/api/tasks/{task}/claim").status_code == 200
    assert not TaskClaim.objects.filter(task_id=task).exists()


# --- a role, whatever its credential, is refused before what it sent -------------------------------------

ROLE_PERSONAS = ("reviewer", "approver", "auditor", "operator", "outsider")


def _route_perms(method: str, path: str) -> tuple[str, ...]:
    """The permissions the route declares it acts under (``permissions.token_needs`` on its view)."""
    from django.urls import resolve

    match = resolve(_url(path))
    return tuple(getattr(match.func, "gatehouse_token_perms", {}).get(method, ()))


@pytest.mark.parametrize("persona", ROLE_PERSONAS)
@pytest.mark.parametrize("method,path", sorted(NEEDED))
def test_a_role_that_may_not_use_a_route_is_refused_before_what_it_sent(personas, persona, method, path):
    """Where a role holds none of the permissions a route acts under, a malformed request hears the same 403 as
    a well-formed one would (the auditor's decision with no body was a 422 ``body: Field required``). A name
    naming nothing stays a 404 for everyone: whether an object exists never depends on who asks."""
    user = personas[persona].user
    perms = _route_perms(method, path)
    assert perms, f"{method} {path} declares nothing"
    client = ApiClient(personas[persona].token)
    url = _url(path)
    for body in BODIES:
        response = _send(client, method, url, body)
        if (method, path) in NAME_ONLY:
            assert response.status_code == 404, (body, response.content)
            continue
        if any(user.has_perm(perm) for perm in perms):
            assert response.status_code in (400, 422), (body, response.content)
            continue
        assert response.status_code == 403, (body, response.content)
        expected = f"you may not {method} {url}: your role holds none of {', '.join(sorted(perms))}"
        assert response.json()["error"] == {"code": "forbidden", "message": expected, "field": None}


def test_an_auditor_deciding_with_no_body_hears_its_role_refused_and_a_reviewer_the_missing_body(personas):
    """Found from the outside: the auditor's empty decision was a 422 ``body: Field required``; the well-formed
    one a 403. A reviewer, who may decide, is told what is missing."""
    task = "00000000-0000-0000-0000-000000000000"
    auditor = ApiClient(personas["auditor"].token)
    for raw in ("", "{}", '{"decision": 7}', "[1]"):
        response = auditor.client.post(
            f"/api/tasks/{task}/decision", raw, content_type="application/json", headers=auditor.headers
        )
        assert response.status_code == 403, (raw, response.content)
        assert "your role holds none of approvals.decide_task" in response.json()["error"]["message"]
    # A well-formed decision on a task nobody may see is the 404 anyone gets: existence does not depend on who asks.
    named_nothing = auditor.client.post(
        f"/api/tasks/{task}/decision",
        '{"decision": "approve"}',
        content_type="application/json",
        headers=auditor.headers,
    )
    assert named_nothing.status_code == 404, named_nothing.content
    reviewer = ApiClient(personas["reviewer"].token)
    response = reviewer.client.post(
        f"/api/tasks/{task}/decision", "", content_type="application/json", headers=reviewer.headers
    )
    assert response.status_code in (400, 422), response.content
