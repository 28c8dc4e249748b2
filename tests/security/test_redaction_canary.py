"""The redaction canary: plant a unique value in every redacted path, crawl every surface, find it nowhere.

For every graph that declares sensitive paths, real threads run through the
real worker with a canary at each path in every place a value can travel:
the thread's input (state, task payloads), an admin's state edit of the
redacted field, the edited action arguments and the resume value of each
decision, a ``/lg/`` ``update_state`` — and from all of these the audit trail.
Then every surface is crawled as each role:

- every GET operation of both APIs and their read-only POSTs, enumerated from
  their OpenAPI schemas, path parameters filled with the planted objects' ids;
- every console route, enumerated from the URL resolver (a route that answers
  GET with 405 is a write and must be listed as one);
- every websocket route the console pushes fragments on;
- every export format (the API's and ``manage.py audit_export --user``).

A role without "view sensitive" must never receive a canary; a role with it
must receive it on the surfaces listed in ``MUST_REVEAL`` (so the crawl is
known to reach the values). A new endpoint or route is crawled without a
change here; one whose parameters cannot be filled fails the test until it is
given a filler or a reason in ``NOT_CRAWLED``.
"""

from __future__ import annotations

import io
import json
import re
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.apps import apps as django_apps
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from approvals.gateway import payload_digest_for, sensitive_paths
from approvals.models import ApprovalTask, AuditEvent, Comment, Decision, WebhookEndpoint
from approvals.redaction import path_parse
from approvals.tokens import token_issue
from console.api import api as native_api
from console.consumers import NoSuchSocket
from console.routing import websocket_urlpatterns
from lgplatform.api import api as platform_api
from lgplatform.models import Cron
from lgplatform.services import assistant_id_for
from runtime.models import Thread
from runtime.registry import graph_gates, graph_names
from runtime.state import thread_history_read
from tests.conftest import Persona, api_decide, wait_for
from tests.console.test_live import ORIGIN, Socket, loop  # noqa: F401 - the module's event loop fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

# Where a canary was planted; each carrier's canary is distinct so a leak names its path of travel.
CARRIERS = ("input", "edit", "args", "resume", "lg_input", "lg_edit", "lg_args", "lg_resume", "lg_update")

# What is deliberately not crawled, and why. Everything else is crawled or fails the test.
NOT_CRAWLED: dict[str, str] = {
    # writes: their response echoes the caller's own request; what they store is read back by the crawl
    "POST /api/threads": "write (start a thread)",
    "POST /api/external-tasks": "write (an engine creates an external task)",
    # The canary is planted in graph threads only; external tasks (their own redaction paths) are
    # covered by tests/external. The same task is crawled by id through GET /api/external-tasks/{task_id}.
    "GET /api/external-tasks/by-key/{source}/{key}": "external tasks are not planted (see tests/external)",
    "POST /api/threads/{thread_id}/retry": "write (retry a failed thread)",
    "POST /api/tasks/{task_id}/decision": "write (decide); the decision is read back through GET /api/tasks/{task_id}",
    "POST /api/webhooks/{name}": "write (a signed inbound delivery)",
    "POST /api/webhook-endpoints": "write (create an inbound endpoint)",
    "POST /api/webhook-endpoints/{name}/rotate": "write (rotate an inbound endpoint's secret)",
    "PATCH /api/webhook-endpoints/{name}": "write (change an inbound endpoint's gates)",
    "DELETE /api/webhook-endpoints/{name}": "write (delete an inbound endpoint)",
    "POST /api/webhook-subscriptions": "write (create an outbound subscription)",
    "POST /api/webhook-deliveries/{delivery_id}/retry": "write (resend an outbound delivery)",
    "DELETE /api/webhook-subscriptions/{subscription_id}": "write (deactivate an outbound subscription)",
    "POST /lg/threads": "write (create a thread)",
    "PATCH /lg/threads/{thread_id}": "write (merge a thread's metadata); answered as GET /lg/threads/{thread_id}",
    "POST /lg/threads/{thread_id}/state": "write (update_state)",
    "POST /lg/threads/{thread_id}/runs": "write (start or resume a run)",
    "POST /lg/threads/{thread_id}/runs/wait": "write (start a run); its output is GET .../runs/{run_id}/join",
    "POST /lg/threads/{thread_id}/runs/stream": "write (start a run); its stream is GET .../runs/{run_id}/stream",
    "POST /lg/threads/{thread_id}/runs/{run_id}/cancel": "write (cancel a run)",
    # Stateless runs: a start on a new thread, answered by the same code as the thread's runs (crawled above)
    "POST /lg/runs": "write (start a run on a new thread)",
    "POST /lg/runs/wait": "write (start a run on a new thread); its output is GET .../runs/{run_id}/join",
    "POST /lg/runs/stream": "write (start a run on a new thread); its stream is GET .../runs/{run_id}/stream",
    "POST /lg/runs/batch": "write (start runs on new threads)",
    "POST /lg/runs/cancel": "write (cancel runs); answers 204 with no body",
    "POST /api/users": "write (user administration: accounts hold no graph state)",
    "POST /api/users/{user_id}/roles": "write (user administration)",
    "POST /api/users/{user_id}/assignments": "write (user administration)",
    "POST /api/users/{user_id}/deactivate": "write (user administration)",
    "POST /api/users/{user_id}/reactivate": "write (user administration)",
    "POST /api/users/{user_id}/password": "write (user administration)",
    "POST /api/users/{user_id}/otp-reset": "write (user administration)",
    # Conversation (comments): the planted comments are read back through the GET comment endpoints
    "POST /api/tasks/{task_id}/comments": "write (comment on a task)",
    "POST /api/threads/{thread_id}/comments": "write (comment on a thread)",
    "POST /api/comments/{comment_id}/versions": "write (edit a comment: a new version)",
    # time travel: writes; the forked state is read back through the state and history reads
    # (tests/integration/test_time_travel.py plants a canary in a fork and a subgraph)
    "POST /api/threads/{thread_id}/fork": "write (fork a thread at a past checkpoint)",
    "POST /api/threads/{thread_id}/replay": "write (replay a thread from a past checkpoint)",
    "POST /lg/threads/{thread_id}/copy": "write (copy a thread); the copy is read through GET /lg/threads/{thread_id}",
    # Long-term memory store: writes; items are read back through GET/search (tests/security/test_store_redaction.py
    # plants a canary in a masked store field — store items hold no graph state, so this crawl's canaries
    # never reach them).
    "PUT /lg/store/items": "write (put a store item)",
    "DELETE /lg/store/items": "write (delete a store item)",
    # Crons: writes; a planted thread's cron is read back through GET /lg/runs/crons/{cron_id} and the search
    "POST /lg/runs/crons": "write (make a cron)",
    "POST /lg/threads/{thread_id}/runs/crons": "write (make a thread's cron)",
    "PATCH /lg/runs/crons/{cron_id}": "write (change a cron)",
    "DELETE /lg/runs/crons/{cron_id}": "write (delete a cron)",
    # Bulk decisions (issue 14): each task's decision is read back through GET /api/tasks/{task_id};
    # a bulk's own record holds task ids, titles and skip reasons, never payload or state.
    "POST /api/bulk-decisions": "write (start a bulk decision)",
    "GET /api/bulk-decisions/{bulk_id}": "task ids, titles and skip reasons only (no payload or state)",
    # Cancelling a running run
    "POST /api/threads/{thread_id}/cancel-run": "write (cancel a run)",
    # routes outside the console's own URLs
    "static": "vendored CSS and JS files",
    # hand-offs: writes whose responses carry names and times, never state; GET .../claim and GET /api/me/away
    # are crawled
    "POST /api/tasks/{task_id}/claim": "write (claim a task)",
    "DELETE /api/tasks/{task_id}/claim": "write (release a claim)",
    "POST /api/tasks/{task_id}/reassign": "write (a lead reassigns a task)",
    "POST /api/tasks/{task_id}/delegate": "write (the claim holder delegates a task)",
    "PUT /api/me/away": "write (one's own out-of-office)",
}

# Console routes that only take POST: crawled with GET all the same, and must answer it with 405.
CONSOLE_WRITES: dict[str, str] = {
    "console task-claim": "claim a task",
    "console task-release": "release a claim",
    "console task-decide": "decide; the decision is read back on the task and decision pages",
    "console thread-retry": "retry a failed thread",
    "console webhook-retry": "resend an outbound delivery",
    "console webhook-subscription-create": "subscribe a URL to a graph's events",
    "console webhook-subscription-deactivate": "deactivate an outbound subscription",
    "console webhook-endpoint-create": "create an inbound endpoint",
    "console webhook-endpoint-rotate": "rotate an inbound endpoint's secret",
    "console webhook-endpoint-gates": "change an inbound endpoint's gates",
    "console webhook-endpoint-delete": "delete an inbound endpoint",
    "console logout": "sign out",
    "console live-relay": "the worker's signed live events (HMAC, no session)",
    "console user-roles": "set a user's roles",
    "console user-assignments": "set a user's graphs and gates",
    "console user-deactivate": "deactivate a user",
    "console user-reactivate": "reactivate a user",
    "console user-password": "issue a set-password link",
    "console user-otp": "remove a user's OTP devices",
    "console task-reassign": "reassign a task (hand-offs)",
    "console task-delegate": "delegate a claimed task (hand-offs)",
    # Conversation (comments)
    "console task-comment": "comment on a task; read back on the task page",
    "console thread-comment": "comment on a thread; read back on the thread page",
    "console comment-version": "edit a comment; read back on the task and thread pages",
    "console thread-fork": "fork a thread at a past checkpoint (time travel)",
    "console thread-replay": "replay a thread from a past checkpoint (time travel)",
    "console bulk-start": "start a bulk decision (issue 14); each decision is read back on the task pages",
    # Cancelling a running run
    "console thread-run-cancel": "cancel a thread's running run",
    "console cron-delete": "delete a cron (its schedule and owner are listed on its thread's and owner's pages)",
}

# Surfaces a role with "view sensitive" must receive a canary on: proof that the crawl reaches the values.
MUST_REVEAL = {
    "GET /api/threads/{thread_id}",
    "GET /api/threads/{thread_id}/history",
    "GET /api/tasks/{task_id}",
    "GET /api/audit",
    "GET /api/audit/export",
    "GET /lg/threads/{thread_id}",
    "GET /lg/threads/{thread_id}/state",
    "GET /lg/threads/{thread_id}/state/{checkpoint_id}",
    "POST /lg/threads/search",
    "POST /lg/threads/{thread_id}/history",
    "POST /lg/threads/{thread_id}/state/checkpoint",
    "GET /lg/threads/{thread_id}/runs/{run_id}/join",
    "GET /lg/threads/{thread_id}/runs/{run_id}/stream",
    "GET /lg/threads/{thread_id}/stream",
    "GET /lg/runs/crons/{cron_id}",
    "POST /lg/runs/crons/search",
    "console task",
    "console thread",
    "console audit",
    "console decision",
    "ws /ws/tasks/<uuid:task_id>/",
    "ws /ws/threads/<uuid:thread_id>/",
    "export audit_export --user",
    # Conversation (comments): the planted comments quote the input canary verbatim
    "GET /api/tasks/{task_id}/comments",
    "GET /api/threads/{thread_id}/comments",
}

# Roles without "view sensitive" (the canary must appear nowhere) and with it (it must appear).
BLIND = ("reviewer", "operator", "audit_reader")
SEEING = ("auditor",)


# --- planting ----------------------------------------------------------------------------------


def _nested(segments: tuple[str, ...], value: Any) -> Any:
    if not segments:
        return value
    head, rest = segments[0], segments[1:]
    return [_nested(rest, value)] if head == "*" else {head: _nested(rest, value)}


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **{k: _merge(a[k], v) if k in a else v for k, v in b.items()}}
    if isinstance(a, list) and isinstance(b, list) and a and b:
        return [_merge(a[0], b[0]), *a[1:]]
    return b


def planted(graph: str, canary: str) -> dict[str, Any]:
    """A value with ``canary`` at every sensitive path of ``graph`` (``[*]`` becomes a one-item list)."""
    out: dict[str, Any] = {}
    for path in sensitive_paths(graph):
        out = _merge(out, _nested(path_parse(path), canary))
    return out


@dataclass
class Subject:
    """A planted thread and the ids of everything it produced."""

    graph: str
    thread: str
    tasks: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)  # inbound webhook endpoints of the graph
    actions: list[str] = field(default_factory=list)  # audit actions of the thread (reads are not planted)
    comments: list[str] = field(default_factory=list)  # Conversation (comments) on the thread and its tasks
    crons: list[str] = field(default_factory=list)  # the thread's crons (their payloads carry a canary)


class Planter:
    def __init__(self, graph: str, admin: Persona) -> None:
        self.graph = graph
        self.admin = admin
        self.prefix = f"cnry{uuid.uuid4().hex[:10]}"

    def canary(self, carrier: str) -> str:
        return f"{self.prefix}{carrier.replace('_', '')}"

    def value(self, carrier: str) -> dict[str, Any]:
        return planted(self.graph, self.canary(carrier))

    def decision(self, payload: Any, via: str) -> tuple[str, dict[str, Any] | None, Any]:
        """(outcome, state edits, exact resume value) planting canaries in every carrier the gate takes."""
        if not isinstance(payload, dict) or payload.get("type") != "gatehouse.gate/v1":
            return "approve", None, {"decision": "approve"}
        editable = set(payload.get("editable") or [])
        edits = {k: v for k, v in self.value(f"{via}edit").items() if k in editable} or None
        proposed = payload.get("proposed_action") or {}
        outcome = "edit" if edits else "approve"
        resume: dict[str, Any] = {"decision": outcome, "reason": "canary", "data": self.value(f"{via}resume")}
        args = proposed.get("args") or {}
        # Only arguments the action takes: a gate refuses any other (chatty_review's takes the applicant).
        planted_args = {k: v for k, v in self.value(f"{via}args").items() if k in args}
        if planted_args:
            resume["action_args"] = {**args, **planted_args}
        return outcome, edits, resume


def _status(admin: Persona, thread_id: str) -> str:
    return str(admin.client.get(f"/api/threads/{thread_id}").json()["status"])


def _next_pause(admin: Persona, thread_id: str, decided: set[str]) -> list[dict[str, Any]] | None:
    """Wait until the thread completes (None) or pauses at tasks not decided yet."""

    def ready() -> Any:
        status = _status(admin, thread_id)
        if status == "completed":
            return "done"
        assert status not in ("failed", "cancelled"), f"planting thread {thread_id} ended {status}"
        if status != "interrupted":
            return None
        items = admin.client.get("/api/tasks", status="pending", thread=thread_id).json()["items"]
        fresh = [t for t in items if t["id"] not in decided]
        return fresh or None

    found = wait_for(ready, timeout=30, what=f"thread {thread_id} to pause or complete")
    return None if found == "done" else found


def plant_native(planter: Planter) -> str:
    """A thread started and decided through the native API."""
    admin = planter.admin
    started = admin.client.post(
        "/api/threads", {"graph": planter.graph, "input": planter.value("input"), "metadata": {"case": "canary"}}
    )
    assert started.status_code == 201, started.content
    thread_id = started.json()["id"]
    decided: set[str] = set()
    while (tasks := _next_pause(admin, thread_id, decided)) is not None:
        for task in tasks:
            payload = admin.client.get(f"/api/tasks/{task['id']}").json()["payload"]
            outcome, edits, resume = planter.decision(payload, "")
            body = {"decision": outcome, "reason": "canary", "edits": edits, "resume": resume}
            response = api_decide(admin, task, None, **body)
            assert response.status_code == 201, response.content
            decided.add(task["id"])
    comment_plant(planter, thread_id)
    return thread_id


def comment_plant(planter: Planter, thread_id: str) -> None:
    """Conversation (comments): comments quoting the input canary verbatim, on the first task and the thread,
    one of them edited so that both its versions quote it."""
    admin, canary = planter.admin, planter.canary("input")
    task_id = admin.client.get("/api/tasks", thread=thread_id, status="decided").json()["items"][0]["id"]
    posted = admin.client.post(f"/api/tasks/{task_id}/comments", {"body": f"quoting {canary} verbatim"})
    assert posted.status_code == 201, posted.content
    edited = admin.client.post(f"/api/comments/{posted.json()['id']}/versions", {"body": f"{canary.upper()}!"})
    assert edited.status_code == 201, edited.content
    question = {"body": f"thread: {canary}", "kind": "question"}
    on_thread = admin.client.post(f"/api/threads/{thread_id}/comments", question)
    assert on_thread.status_code == 201, on_thread.content


# The /lg/ runs publish every stream mode, so GET .../runs/{run_id}/stream crawls the worker's chunks.
STREAMED = {
    "stream_mode": [
        "values",
        "updates",
        "messages",
        "messages-tuple",
        "events",
        "debug",
        "custom",
        "tasks",
        "checkpoints",
    ],
    "stream_subgraphs": True,
}


def plant_platform(planter: Planter) -> str:
    """A thread created, started and resumed through ``/lg/``, then given an ``update_state``."""
    admin, assistant = planter.admin, assistant_id_for(planter.graph)
    created = admin.client.post("/lg/threads", {"metadata": {"graph_id": planter.graph}})
    assert created.status_code == 200, created.content
    thread_id = created.json()["thread_id"]
    run = admin.client.post(
        f"/lg/threads/{thread_id}/runs",
        {"assistant_id": assistant, "input": planter.value("lg_input"), **STREAMED},
    )
    assert run.status_code == 200, run.content
    decided: set[str] = set()
    while (tasks := _next_pause(admin, thread_id, decided)) is not None:
        interrupts = admin.client.get(f"/lg/threads/{thread_id}").json()["interrupts"]
        [task] = tasks  # the demo graphs pause at one interrupt at a time
        [interrupt] = interrupts[task["id"]]
        _, edits, resume = planter.decision(interrupt["value"], "lg_")
        command: dict[str, Any] = {"resume": resume}
        if edits:
            command["update"] = edits
        run = admin.client.post(
            f"/lg/threads/{thread_id}/runs", {"assistant_id": assistant, "command": command, **STREAMED}
        )
        assert run.status_code == 200, run.content
        decided.add(task["id"])
    updated = admin.client.post(f"/lg/threads/{thread_id}/state", {"values": planter.value("lg_update")})
    assert updated.status_code == 200, updated.content
    # A cron on the thread, never due (New Year's midnight, ending before the next): its payload is the carrier.
    cron = admin.client.post(
        f"/lg/threads/{thread_id}/runs/crons",
        {"assistant_id": assistant, "schedule": "0 0 1 1 *", "input": planter.value("lg_cron"), "enabled": False},
    )
    assert cron.status_code == 200, cron.content
    return thread_id


def subject_of(graph: str, thread_id: str) -> Subject:
    thread = Thread.objects.get(pk=thread_id)
    subject = Subject(graph=graph, thread=thread_id)
    subject.tasks = [str(t) for t in ApprovalTask.objects.filter(thread=thread).values_list("pk", flat=True)]
    subject.decisions = [str(d) for d in Decision.objects.filter(task__thread=thread).values_list("pk", flat=True)]
    subject.runs = [str(r) for r in thread.runs.values_list("pk", flat=True)]
    subject.comments = [str(c) for c in Comment.objects.filter(thread=thread).values_list("pk", flat=True)]
    subject.crons = [str(c) for c in Cron.objects.filter(thread=thread).values_list("pk", flat=True)]
    events = AuditEvent.objects.filter(thread_id=thread.pk).exclude(action="sensitive.revealed")
    subject.actions = sorted(set(events.values_list("action", flat=True)))
    # The checkpoints where the set of canaries in the state changes, and the head: where a leak would show.
    views = list(reversed(thread_history_read(thread, limit=200)))
    seen: frozenset[str] = frozenset()
    for view in views:
        here = frozenset(re.findall(r"cnry[0-9a-f]{10}[a-z]+", json.dumps(view.values)))
        if here != seen:
            subject.checkpoints.append(view.checkpoint_id)
            seen = here
    if views and views[-1].checkpoint_id not in subject.checkpoints:
        subject.checkpoints.append(views[-1].checkpoint_id)
    return subject


# --- the crawl ---------------------------------------------------------------------------------


@dataclass
class Request:
    surface: str  # the endpoint, route or socket template: what the counts are about
    kind: str  # api | console | ws | export
    method: str = "GET"
    url: str = ""
    query: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    command: dict[str, Any] = field(default_factory=dict)


def _ids(subjects: list[Subject]) -> dict[str, list[dict[str, str]]]:
    """Fillers per path parameter: each a list of bindings (ids of one subject belong together)."""
    return {
        "thread_id": [{"thread_id": s.thread} for s in subjects],
        "task_id": [{"thread_id": s.thread, "task_id": t} for s in subjects for t in s.tasks],
        "decision_id": [{"decision_id": d} for s in subjects for d in s.decisions],
        "run_id": [{"thread_id": s.thread, "run_id": r} for s in subjects for r in s.runs],
        "checkpoint_id": [{"thread_id": s.thread, "checkpoint_id": c} for s in subjects for c in s.checkpoints],
        "assistant_id": [{"assistant_id": assistant_id_for(s.graph)} for s in subjects],
        "namespace": [{"namespace": "child"}],  # a subgraph's schemas: no state, crawled all the same
        "name": [{"name": h} for s in subjects for h in s.hooks],
        # the console's endpoint forms name an endpoint by its id
        "endpoint_id": [
            {"endpoint_id": str(pk)}
            for pk in WebhookEndpoint.objects.filter(name__in=[h for s in subjects for h in s.hooks]).values_list(
                "pk", flat=True
            )
        ],
        # user administration pages hold no graph state; one account (and a set-password link that
        # is not valid) is enough to crawl them
        "user_id": [{"user_id": str(pk)} for pk in User.objects.order_by("pk").values_list("pk", flat=True)[:1]],
        "uidb64": [{"uidb64": "MQ"}],
        "token": [{"token": "not-a-valid-token"}],
        "comment_id": [{"comment_id": c} for s in subjects for c in s.comments],  # Conversation (comments)
        "cron_id": [{"cron_id": c} for s in subjects for c in s.crons],
        # bulk decisions (issue 14): a bulk's page and socket show task titles and skip reasons (no payload or
        # state) to its starter only, whom no crawled reader is; their access rules: test_route_matrix, test_bulk_api
        "bulk_id": [],
    }


def _bindings(params: list[str], subjects: list[Subject]) -> list[dict[str, str]]:
    """Every consistent filling of ``params`` (a run and a checkpoint go with their own thread)."""
    fillers = _ids(subjects)
    missing = [p for p in params if p not in fillers]
    if missing:
        raise LookupError(f"no filler for path parameter(s) {missing}")
    if not params:
        return [{}]
    out = []
    for combo in product(*(fillers[p] for p in params)):
        merged: dict[str, str] = {}
        if all(all(merged.setdefault(k, v) == v for k, v in part.items()) for part in combo):
            out.append(merged)
    return out


# Bodies of the read-only POST operations (a new one fails until it has a body here).
READ_BODIES: dict[str, Callable[[dict[str, str], list[Subject]], list[Any]]] = {
    "/lg/assistants/search": lambda ids, subjects: [{}],
    "/lg/assistants/count": lambda ids, subjects: [{}],  # a number: it can carry no canary, only be crawled
    "/lg/assistants/{assistant_id}/versions": lambda ids, subjects: [{}],
    "/lg/threads/search": lambda ids, subjects: [{"ids": [s.thread for s in subjects]}],
    "/lg/threads/count": lambda ids, subjects: [{}],  # a number: it can carry no canary, only be crawled
    "/lg/threads/{thread_id}/history": lambda ids, subjects: [{"limit": 1000}],
    "/lg/threads/{thread_id}/state/checkpoint": lambda ids, subjects: [
        {"checkpoint": {"checkpoint_id": c}} for s in subjects if s.thread == ids["thread_id"] for c in s.checkpoints
    ],
    # Long-term memory store reads (their own canary test: tests/security/test_store_redaction.py)
    "/lg/store/items/search": lambda ids, subjects: [{"namespace_prefix": [], "limit": 1000}],
    "/lg/store/namespaces": lambda ids, subjects: [{}],
    "/lg/runs/crons/search": lambda ids, subjects: [{"thread_id": s.thread, "limit": 1000} for s in subjects],
    "/lg/runs/crons/count": lambda ids, subjects: [{}],  # a number: it can carry no canary, only be crawled
}


def api_requests(prefix: str, schema: dict[str, Any], subjects: list[Subject], unfilled: list[str]) -> list[Request]:
    out = []
    for template, operations in schema["paths"].items():
        for method, operation in operations.items():
            surface = f"{method.upper()} {template}"
            if surface in NOT_CRAWLED:
                continue
            if method == "post" and template not in READ_BODIES:
                unfilled.append(f"{surface}: a POST that is neither a known read nor listed in NOT_CRAWLED")
                continue
            if method not in ("get", "post"):
                unfilled.append(f"{surface}: method not crawled and not listed in NOT_CRAWLED")
                continue
            params = [p for p in operation.get("parameters", []) if p["in"] == "path"]
            try:
                bindings = _bindings([p["name"] for p in params], subjects)
            except LookupError as exc:
                unfilled.append(f"{surface}: {exc}")
                continue
            queries = _query_variants(operation, subjects)
            headers = READ_HEADERS.get(surface, {})
            queries = [{**q, **READ_QUERIES.get(surface, {})} for q in queries]
            for ids in bindings:
                url = template.format(**ids) if ids else template
                if method == "get":
                    out += [Request(surface, "api", "GET", url, query=q, headers=headers) for q in queries]
                else:
                    out += [Request(surface, "api", "POST", url, body=b) for b in READ_BODIES[template](ids, subjects)]
    return out


# A thread's stream replays its runs' logs from the start (Last-Event-ID 0) and ends once they have settled
# (follow=false), in every mode: without them it would only wait for runs to come.
READ_QUERIES: dict[str, dict[str, Any]] = {
    "GET /lg/threads/{thread_id}/stream": {"stream_mode": ["run_modes", "lifecycle", "state_update"], "follow": "false"}
}
READ_HEADERS: dict[str, dict[str, str]] = {"GET /lg/threads/{thread_id}/stream": {"Last-Event-ID": "0"}}


def _query_variants(operation: dict[str, Any], subjects: list[Subject]) -> list[dict[str, Any]]:
    """Each enum value of a query parameter (export formats), filtered to each planted thread when the
    operation takes a thread filter (the unfiltered trail grows with the whole suite), at the largest
    page it allows (reads by permitted roles are audited too, and must not page the planted events out)."""
    params = {p["name"]: p.get("schema", {}) for p in operation.get("parameters", []) if p["in"] == "query"}
    variants: list[dict[str, Any]] = [{}]
    for name, schema in params.items():
        enum = schema.get("enum") or next((s.get("enum") for s in schema.get("anyOf", []) if s.get("enum")), None)
        if enum:
            variants = [{**v, name: e} for v in variants for e in enum]
    if "thread" in params:
        variants = [{**v, "thread": s.thread} for v in variants for s in subjects]
    if "maximum" in params.get("limit", {}):
        variants = [{**v, "limit": params["limit"]["maximum"]} for v in variants]
    return variants


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, Any, str]]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry, entry.name or ""


# Query strings a console page takes, per route name, to show more of a subject (all generated from ids).
CONSOLE_QUERIES: dict[str, Callable[[dict[str, str], list[Subject]], list[dict[str, Any]]]] = {
    "inbox": lambda ids, subjects: [{"status": "decided"}, {"status": ""}, {"q": "canary"}],
    "threads": lambda ids, subjects: [{"graph": s.graph} for s in subjects],
    "thread": lambda ids, subjects: [
        {"checkpoint": c} for s in subjects if s.thread == ids["thread_id"] for c in s.checkpoints
    ],
    "audit": lambda ids, subjects: [{"thread": s.thread, "action": a} for s in subjects for a in ["", *s.actions]],
    "decisions": lambda ids, subjects: [{"graph": s.graph} for s in subjects],
}


def console_requests(subjects: list[Subject], unfilled: list[str]) -> list[Request]:
    out = []
    for pattern, _entry, name in _walk(get_resolver().url_patterns):
        top = pattern.split("/", 1)[0] + "/"
        if top in ("api/", "lg/"):
            continue  # crawled from their OpenAPI schemas
        if top in NOT_CRAWLED or pattern.startswith("^static"):
            continue
        params = re.findall(r"<(?:\w+:)?(\w+)>", pattern)
        numbered = ("delivery_id", "subscription_id")  # rows that hold no thread's state: any number does
        fillable = [p for p in params if p not in numbered]
        try:
            bindings = _bindings(fillable, subjects)
        except LookupError as exc:
            unfilled.append(f"console {name or pattern}: {exc}")
            continue
        for ids in bindings:
            ids = {**ids, **{p: "0" for p in numbered if p in params}}
            url = "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: ids[m.group(1)], pattern)  # noqa: B023
            surface = f"console {name}"
            out.append(Request(surface, "console", "GET", url))
            for query in CONSOLE_QUERIES.get(name, lambda i, s: [])(ids, subjects):
                out.append(Request(surface, "console", "GET", url, query=query))
    return out


def socket_requests(subjects: list[Subject], unfilled: list[str]) -> list[Request]:
    out = []
    for entry in websocket_urlpatterns:
        if getattr(entry.callback, "consumer_class", None) is NoSuchSocket:
            continue  # the catch-all that refuses every other path: it shows nothing
        pattern = str(entry.pattern)
        params = re.findall(r"<(?:\w+:)?(\w+)>", pattern)
        try:
            bindings = _bindings(params, subjects)
        except LookupError as exc:
            unfilled.append(f"ws {pattern}: {exc}")
            continue
        for ids in bindings:
            url = "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: ids[m.group(1)], pattern)  # noqa: B023
            out.append(Request(f"ws /{pattern}", "ws", url=url))
            if not params:
                out.append(Request(f"ws /{pattern}", "ws", url=url + "?status=decided"))
    return out


def export_requests(subjects: list[Subject]) -> list[Request]:
    from approvals.exports.stream import FORMATS

    return [
        Request("export audit_export --user", "export", command={"format": f, "thread": s.thread})
        for f in FORMATS
        for s in subjects
    ]


# --- roles ---------------------------------------------------------------------------------------


@dataclass
class Reader:
    name: str
    user: User
    token: str

    def api(self) -> Client:
        return Client(headers={"Authorization": f"Bearer {self.token}"})

    def console(self) -> Client:
        client = Client()
        client.force_login(self.user)
        return client


def _audit_reader() -> Reader:
    """An auditor without "view sensitive": reads the trail, exports and decision history, masked."""
    user = User.objects.create_user(f"canary-audit-reader-{uuid.uuid4().hex[:6]}")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_audit", "view_all_graphs", "view_approvaltask", "view_thread"])
    )
    return Reader("audit_reader", user, token_issue(user=user))


def readers(personas: dict[str, Persona]) -> dict[str, Reader]:
    out = {name: Reader(name, personas[name].user, personas[name].token) for name in BLIND + SEEING if name in personas}
    out["audit_reader"] = _audit_reader()
    return out


def _body(response: Any) -> str:
    if getattr(response, "is_async", False):  # an event stream (/lg/ .../runs/{run_id}/stream), read as daphne reads it

        async def read() -> bytes:
            return b"".join([chunk async for chunk in response.streaming_content])

        return async_to_sync(read)().decode(errors="replace")
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode(errors="replace")


def fetch(reader: Reader, request: Request, api: Client, console: Client, cookie: Any, events: Any) -> tuple[int, str]:
    if request.kind == "api":
        if request.method == "GET":
            response = api.get(request.url, request.query, headers=request.headers)
        else:
            response = api.post(request.url, json.dumps(request.body), content_type="application/json")
        return response.status_code, _body(response)
    if request.kind == "console":
        response = console.get(request.url, request.query, headers=request.headers)
        return response.status_code, _body(response)
    if request.kind == "ws":
        socket = Socket(events, request.url, [ORIGIN, cookie])
        connected, code = socket.connect()
        if not connected:
            # A refused socket's close code is the page's status plus 4000 (4403: 403), not a server error.
            code = int(code or 0)
            return code - 4000 if code >= 4000 else code, ""
        try:
            # What a reconnecting page asks for: the dashboard renders only then, the others on connect too.
            socket._run(socket.comm.send_to(text_data="refresh"))
            return 101, socket.receive()
        finally:
            socket.close()
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "export"
        try:
            call_command(
                "audit_export",
                user=reader.user.username,
                output=str(output),
                no_progress=True,
                stderr=io.StringIO(),
                **request.command,
            )
        except CommandError:
            return 403, ""  # the role may not read the trail: the command refuses it
        return 200, output.read_text(encoding="utf-8")


def oracles_of(subjects: list[Subject], reader: User) -> dict[str, str]:
    """The digests and hashes computed over a canary that ``reader`` sees masked, by their first 16 hex digits
    (the console shows a hash cut there): any of them lets a reader test guesses of a low-entropy value (a
    date of birth) by hashing candidates with the content they do see. An outside tester's find: a reviewer
    recovered a date of birth from an admin's evidence digest on the task, a lead from the audit trail's
    ``payload_digest``."""
    threads = [s.thread for s in subjects]
    found: dict[str, str] = {}
    for decision in Decision.objects.filter(task__thread_id__in=threads):
        if not decision.redacted_paths:  # signed seeing every value: both digests cover them
            for name in ("evidence_digest", "signed_digest"):
                if getattr(decision, name):
                    found[getattr(decision, name)[:16]] = f"a decision's {name}"
    harmless = set()  # the digest of a payload that holds no masked value: the reader sees all it covers
    for task in ApprovalTask.objects.filter(thread_id__in=threads):
        if payload_digest_for(reader, task) != task.payload_digest:  # the payload holds a masked value
            found[task.payload_digest[:16]] = "a task's unmasked payload_digest"
        else:
            harmless.add(task.payload_digest)
    for event in AuditEvent.objects.filter(thread_id__in=threads):
        found[event.hash[:16]] = f"the hash of a {event.action} event"
        for key, value in event.details.items():
            if key.endswith("_digest") and isinstance(value, str) and len(value) >= 16 and value not in harmless:
                found[value[:16]] = f"{key} in a {event.action} event"
    return found


_HEX_RUN = re.compile(r"[0-9a-f]{16,}")


@dataclass
class CrawlResult:
    requests: int = 0
    found: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    oracles: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # surface -> what was found
    server_errors: list[str] = field(default_factory=list)
    get_refused: set[str] = field(default_factory=set)  # console surfaces that answered GET with 405
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def crawl(
    reader: Reader, requests: list[Request], planters: list[Planter], events: Any, oracles: dict[str, str] | None = None
) -> CrawlResult:
    result = CrawlResult()
    api, console = reader.api(), reader.console()
    cookie = (b"cookie", f"sessionid={console.cookies['sessionid'].value}".encode())
    canaries = {p.canary(c): c for p in planters for c in CARRIERS}
    pattern = re.compile("|".join(re.escape(p.prefix) + "[a-z]+" for p in planters))
    for request in requests:
        started = time.monotonic()
        status, body = fetch(reader, request, api, console, cookie, events)
        result.seconds[request.surface] += time.monotonic() - started
        result.requests += 1
        if status >= 500:
            result.server_errors.append(f"{status} {request.surface} {request.url} {request.query}")
        if status == 405 and request.kind == "console":
            result.get_refused.add(request.surface)
        for hit in set(pattern.findall(body)):
            result.found[request.surface][canaries.get(hit, hit)].add(f"{request.url} {request.query or ''}")
        for run in set(_HEX_RUN.findall(body)) if oracles else ():
            if run[:16] in oracles:
                result.oracles[request.surface].add(oracles[run[:16]])
    return result


# --- the test ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def planted_world(personas: dict[str, Persona], worker: Any, django_db_blocker: Any) -> Iterator[Any]:
    with django_db_blocker.unblock():
        graphs = [g for g in graph_names() if sensitive_paths(g)]
        assert graphs, "no graph declares sensitive paths: the canary has nothing to guard"
        planters, subjects = [], []
        for graph in graphs:
            planter = Planter(graph, personas["admin"])
            planters.append(planter)
            subjects.append(subject_of(graph, plant_native(planter)))
            subjects.append(subject_of(graph, plant_platform(planter)))
            hook = personas["admin"].client.post(
                "/api/webhook-endpoints",
                {"name": f"canary-{uuid.uuid4().hex[:8]}", "graph": graph, "gates": graph_gates(graph)},
            )
            assert hook.status_code == 201, hook.content
            subjects[-1].hooks.append(hook.json()["name"])
        yield planters, subjects


def test_there_is_no_django_admin_to_bypass_the_gateway():
    # Not crawled because not there: Django's admin is neither installed nor mounted (docs/users.md).
    assert not django_apps.is_installed("django.contrib.admin")
    assert not any(pattern.startswith("admin/") for pattern, _, _ in _walk(get_resolver().url_patterns))


def test_the_canary_appears_nowhere_for_a_role_without_reveal_rights(personas, planted_world, loop):  # noqa: F811
    planters, subjects = planted_world
    unfilled: list[str] = []
    requests = [
        *api_requests("/api", native_api.get_openapi_schema(), subjects, unfilled),
        *api_requests("/lg", platform_api.get_openapi_schema(), subjects, unfilled),
        *console_requests(subjects, unfilled),
        *socket_requests(subjects, unfilled),
        *export_requests(subjects),
    ]
    assert unfilled == [], "surfaces the crawl cannot fill: give them a filler, or a reason in NOT_CRAWLED"
    surfaces = sorted({r.surface for r in requests})
    roles = readers(personas)
    results = {
        name: crawl(reader, requests, planters, loop, oracles_of(subjects, reader.user) if name in BLIND else None)
        for name, reader in roles.items()
    }

    print(
        f"\nredaction canary: {len(surfaces)} surfaces × {len(roles)} roles "
        f"({len(requests)} requests per role, {sum(r.requests for r in results.values())} in all); "
        f"{len(planters)} graph(s), {len(subjects)} threads, carriers {', '.join(CARRIERS)}"
    )
    for name, result in results.items():
        slowest = sorted(result.seconds.items(), key=lambda kv: -kv[1])[:3]
        print(
            f"  {name:13} canary found on {len(result.found)} surface(s) in {sum(result.seconds.values()):.1f}s; "
            f"slowest: {', '.join(f'{k} {v:.1f}s' for k, v in slowest)}"
        )

    errors = {name: r.server_errors for name, r in results.items() if r.server_errors}
    assert errors == {}, "server errors while crawling"
    writes = {s for r in results.values() for s in r.get_refused}
    assert writes - set(CONSOLE_WRITES) == set(), "console routes that refuse GET: list them in CONSOLE_WRITES"
    for name in BLIND:
        leaks = {
            surface: {c: sorted(urls)[:3] for c, urls in hits.items()} for surface, hits in results[name].found.items()
        }
        assert leaks == {}, f"{name} (no reveal rights) received a canary"
        oracles = {surface: sorted(what) for surface, what in results[name].oracles.items()}
        assert oracles == {}, f"{name} (no reveal rights) received a digest or hash over a canary"
    for name in SEEING:
        found = results[name].found
        assert MUST_REVEAL - set(found) == set(), f"{name} (reveal rights) did not receive the canary there"
        carriers = {c for hits in found.values() for c in hits if c in CARRIERS}  # not cut-off ones
        assert carriers == set(CARRIERS), f"{name} never received the canaries of {set(CARRIERS) - carriers}"
        assert len(found) >= len(MUST_REVEAL)
