"""Every console route × every role → the status it must get (generated; a new route without a rule fails).

Pages use GET; actions use POST as a plain form would (CSRF has its own tests, in test_views).
State-changing calls that are allowed get a fresh task so one role's action never hides another's.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from approvals import users
from approvals.bulk import bulk_decide
from approvals.comments import comment_post
from approvals.inbound.webhooks import webhook_endpoint_create
from approvals.outbound.subscriptions import subscription_create
from approvals.services import Signer
from console.urls import console_patterns
from lgplatform.crons import cron_create
from lgplatform.schemas import CronCreateIn
from tests.conftest import loan_input
from tests.console.conftest import console_client
from tests.factories import decision_make, task_make

pytestmark = pytest.mark.usefixtures("live_db")

ROLES = ("anonymous", "outsider", "reviewer", "loan_reviewer", "auditor", "operator", "admin")

# Routes whose rules live elsewhere: sign-in/out (tests/test_security_baseline.py, test_views)
# and the worker → web relay, authenticated by an HMAC, not a session (tests/console/test_live.py).
# The set-password page is reached by its one-time token, not a session (test_users_views.py).
ELSEWHERE = {"login", "logout", "live-relay", "password-set"}

# (route, method, subject, status per role in ROLES order:
#  anonymous, outsider, reviewer, loan_reviewer, auditor, operator, admin)
MATRIX: list[tuple[str, str, str, tuple[int, ...]]] = [
    ("inbox", "GET", "-", (302, 403, 200, 200, 200, 200, 200)),
    ("task", "GET", "kyc", (302, 404, 200, 404, 200, 200, 200)),
    ("task-live", "GET", "kyc", (302, 404, 200, 404, 200, 200, 200)),
    # A successful form POST (no htmx) redirects back to the task page (post/redirect/get).
    ("task-claim", "POST", "loan", (302, 404, 302, 302, 403, 403, 302)),
    ("task-release", "POST", "loan", (302, 404, 302, 302, 302, 302, 302)),  # no claim held: nothing to do
    # A refused form POST (no htmx) goes back to the task page (303) saying why, what was typed kept.
    ("task-decide", "POST", "loan", (302, 404, 303, 303, 403, 403, 303)),
    ("threads", "GET", "-", (302, 403, 200, 200, 200, 200, 200)),
    ("thread-start", "GET", "-", (302, 403, 403, 403, 403, 200, 200)),
    ("thread", "GET", "kyc", (302, 404, 200, 404, 200, 200, 200)),
    ("thread-live", "GET", "kyc", (302, 404, 200, 404, 200, 200, 200)),
    ("thread-retry", "POST", "loan", (302, 404, 403, 403, 403, 409, 409)),
    ("audit", "GET", "-", (302, 403, 403, 403, 200, 403, 200)),
    ("decisions", "GET", "-", (302, 403, 403, 403, 200, 403, 200)),
    ("decision", "GET", "decision", (302, 403, 403, 403, 200, 403, 200)),
    ("webhooks", "GET", "-", (302, 403, 403, 403, 200, 200, 200)),
    ("webhook-retry", "POST", "-", (302, 403, 403, 403, 403, 404, 404)),
    # Inbound endpoints are managed by admins only (an empty form is a 422 for them; nothing is created).
    ("webhook-endpoint-create", "POST", "-", (302, 403, 403, 403, 403, 403, 422)),
    ("webhook-endpoint-rotate", "POST", "hook", (302, 404, 404, 404, 403, 403, 200)),
    ("webhook-endpoint-gates", "POST", "hook", (302, 404, 404, 404, 403, 403, 422)),
    ("webhook-endpoint-delete", "POST", "hook", (302, 404, 404, 404, 403, 403, 302)),
    # Deactivating an outbound subscription: operators and admins, as subscribing is ("sub": a fresh one per case).
    ("webhook-subscription-create", "POST", "-", (302, 403, 403, 403, 403, 422, 422)),
    ("webhook-subscription-deactivate", "POST", "sub", (302, 403, 403, 403, 403, 302, 302)),
    # User administration: admins only. "user" is a fresh account per case.
    ("users", "GET", "-", (302, 403, 403, 403, 403, 403, 200)),
    ("user-create", "GET", "-", (302, 403, 403, 403, 403, 403, 200)),
    ("user", "GET", "user", (302, 403, 403, 403, 403, 403, 200)),
    ("user-roles", "POST", "user", (302, 403, 403, 403, 403, 403, 302)),
    ("user-assignments", "POST", "user", (302, 403, 403, 403, 403, 403, 302)),
    ("user-deactivate", "POST", "user", (302, 403, 403, 403, 403, 403, 302)),
    ("user-reactivate", "POST", "user", (302, 403, 403, 403, 403, 403, 302)),
    ("user-password", "POST", "user", (302, 403, 403, 403, 403, 403, 200)),  # the link, shown once
    ("user-otp", "POST", "user", (302, 403, 403, 403, 403, 403, 302)),
    # Hand-offs: an empty form is refused next to the form (a redirect back, nothing written) for whoever
    # may act; the others get 403. Reassign is for leads and admins; away is for whoever decides.
    ("task-reassign", "POST", "loan", (302, 404, 403, 403, 403, 403, 302)),
    ("task-delegate", "POST", "loan", (302, 404, 302, 302, 403, 403, 302)),
    ("away", "GET", "-", (302, 403, 200, 200, 403, 403, 200)),
    # Conversation (comments): an empty form is a 422 for who may post (nothing is written); auditors
    # read only. A comment ("comment", by admin) is edited by its author only.
    ("task-comment", "POST", "loan", (302, 404, 422, 422, 403, 422, 422)),
    ("thread-comment", "POST", "loan", (302, 404, 422, 422, 403, 422, 422)),
    ("comment-version", "POST", "comment", (302, 404, 403, 403, 403, 403, 422)),
    # Team dashboard: leads (tests/console/test_dashboard_views.py), auditors and admins.
    ("dashboard", "GET", "-", (302, 403, 403, 403, 200, 403, 200)),
    # time travel: operators and admins only (the matrix's task has no real checkpoint: a 422 naming it)
    ("thread-fork", "POST", "loan", (302, 404, 403, 403, 403, 422, 422)),
    ("thread-replay", "POST", "loan", (302, 404, 403, 403, 403, 422, 422)),
    # Long-term memory store browser: every role that may read the store (namespaces are scoped per graph).
    ("store", "GET", "-", (302, 403, 200, 200, 200, 200, 200)),
    # Bulk decisions (issue 14): deciders start one (a form without tasks is a 422, nothing written);
    # "bulk" is an admin's bulk: seen by its starter and by auditors and admins who see every graph.
    ("bulk-start", "POST", "-", (302, 403, 422, 422, 403, 403, 422)),
    ("bulk", "GET", "bulk", (302, 404, 404, 404, 200, 404, 200)),
    # Cancelling a running run: operators and admins (the thread has no active run: 409 for them).
    ("thread-run-cancel", "POST", "loan", (302, 404, 403, 403, 403, 409, 409)),
    # Crons: deleted by their owner or a user administrator ("cron": a fresh one of admin's per case); a reader
    # of its graph who is neither gets 403, one who cannot see it 404.
    ("cron-delete", "POST", "cron", (302, 404, 403, 403, 403, 403, 302)),
]


def test_every_console_route_has_a_rule():
    routes = {p.name for p in console_patterns} - ELSEWHERE
    covered = {name for name, *_ in MATRIX}
    assert routes - covered == set(), "console routes without a permission rule in MATRIX"
    assert covered - routes == set(), "rules for routes that no longer exist"


def _path(
    route: str, subject: str, task: Any, decision: Any = None, hook: str = "", user: Any = None, comment: Any = None
) -> str:
    ids = {
        "task_id": task.pk if task else None,
        "thread_id": task.thread_id if task else None,
        "decision_id": decision.pk if decision else None,
    }
    pattern = str(next(p.pattern for p in console_patterns if p.name == route)).replace("<uuid:decision_id>", "{d}")
    pattern = pattern.replace("{d}", str(ids.pop("decision_id")))
    for key, value in ids.items():
        pattern = pattern.replace(f"<uuid:{key}>", str(value))
    pattern = pattern.replace("<int:user_id>", str(user.pk) if user else "")
    pattern = pattern.replace("<uuid:comment_id>", str(comment.pk) if comment else "")  # Conversation (comments)
    return "/" + pattern.replace("<int:delivery_id>", "999999999").replace("<int:endpoint_id>", hook)


CASES = [
    pytest.param(route, method, subject, role, statuses[i], id=f"{route} {role}")
    for route, method, subject, statuses in MATRIX
    for i, role in enumerate(ROLES)
]


@pytest.mark.parametrize("route,method,subject,role,expected", CASES)
def test_each_role_gets_the_status_the_matrix_gives(personas, route, method, subject, role, expected):
    client = Client() if role == "anonymous" else console_client(personas[role])
    path, body = route_case(personas, route, subject)
    response = client.get(path) if method == "GET" else client.post(path, body)
    assert response.status_code == expected, (path, response.content[:300])


def route_case(personas: dict[str, Any], route: str, subject: str) -> tuple[str, dict[str, Any]]:
    """The path of ``route`` on a fresh ``subject`` (MATRIX), and the form a POST to it sends."""
    task = decision = None
    if subject == "kyc":
        task = task_make(graph="kyc_onboarding", node="compliance_review")
    elif subject in ("loan", "decision", "comment"):
        task = task_make()
    comment = None
    if subject == "comment":  # Conversation (comments)
        comment = comment_post(actor=personas["admin"].user, task=task, body="route matrix")
    if subject == "decision":
        decision = decision_make(task, personas["admin"].user)
    user = None
    if subject == "user":
        user = users.user_create(actor=users.CLI, username=f"matrix-{uuid.uuid4().hex[:8]}", roles=["reviewer"])
    hook = ""
    if subject == "hook":
        hook = f"matrix-{uuid.uuid4().hex[:8]}"
        hook = str(webhook_endpoint_create(actor=None, name=hook, graph="loan_approval", gates=["human_review"]).pk)
    path = _path(route, subject, task, decision, hook, user, comment)
    if subject == "sub":  # a subscription no event reaches (a graph and event no test produces)
        created = subscription_create(
            actor=None, url="http://127.0.0.1:9/matrix", graph="breakpoint_review", event_types=["thread.failed"]
        )
        path = path.replace("<int:subscription_id>", str(created.pk))
    if subject == "bulk":  # bulk decisions (issue 14): an admin's bulk of a task that does not exist
        started = bulk_decide(
            actor=personas["admin"].user,
            outcome="approve",
            reason="route matrix",
            task_ids=[str(uuid.uuid4())],
            signer=Signer(authenticated_at=timezone.now()),
        )
        path = path.replace("<uuid:bulk_id>", str(started.pk))
    if subject == "cron":  # crons: an admin's, never due
        body = CronCreateIn(assistant_id="loan_approval", schedule="0 0 1 1 *", input=loan_input())
        path = path.replace("<uuid:cron_id>", str(cron_create(actor=personas["admin"].user, body=body).pk))
    body = {"decision": "approve", "reason": "route matrix", "checkpoint_id": task.checkpoint_id} if task else {}
    return path, body
