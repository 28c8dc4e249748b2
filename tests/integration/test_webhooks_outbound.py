"""Outbound webhooks: events reach a local receiver signed per Standard Webhooks, retried with backoff."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks import Webhook

from approvals.models import AuditEvent, OutboundDelivery, WebhookSubscription
from tests.conftest import api_decide, loan_input, pending_tasks, thread_settled, thread_start, wait_for

# Read by the worker process when it schedules a retry (it inherits this environment at start):
# a short backoff keeps six attempts within a few seconds.
os.environ.setdefault("GATEHOUSE_WEBHOOK_BACKOFF_SECONDS", "0.2")

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


class Receiver:
    """An HTTP receiver on 127.0.0.1 that records requests and fails the first ``fail_first`` of them."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    failing = len(receiver.requests) <= receiver.fail_first
                self.send_response(503 if failing else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, event_type: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            bodies = [json.loads(body) for _, body in self.requests]
        return [b for b in bodies if event_type is None or b["type"] == event_type]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    # Rows persist for the session: later tests' events must not go to a receiver that is gone.
    WebhookSubscription.objects.filter(url=server.url).update(active=False)
    server.close()


def _subscribe(persona: Any, url: str, graph: str, *events: str) -> dict[str, Any]:
    response = persona.client.post("/api/webhook-subscriptions", {"url": url, "graph": graph, "event_types": events})
    assert response.status_code == 201, response.content
    return response.json()


def test_task_and_thread_events_arrive_signed(operator, reviewer, receiver):
    sub = _subscribe(operator, receiver.url, "loan_approval", "task.opened", "task.decided", "thread.completed")
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    [task] = pending_tasks(reviewer, thread["id"])
    api_decide(reviewer, task, reason="fine")
    thread_settled(reviewer, thread["id"])

    def mine() -> list[dict[str, Any]]:
        return [e for e in receiver.events() if e["data"].get("thread_id") == thread["id"]]

    events = wait_for(lambda: (lambda es: es if len(es) >= 3 else None)(mine()), what="three events")
    assert sorted(e["type"] for e in events) == ["task.decided", "task.opened", "thread.completed"]
    opened = next(e for e in events if e["type"] == "task.opened")
    assert opened["data"]["task_id"] == task["id"] and opened["data"]["graph"] == "loan_approval"
    decided = next(e for e in events if e["type"] == "task.decided")
    assert decided["data"]["outcome"] == "approve" and decided["data"]["actor"] == reviewer.username

    # Every request verifies on the receiver's side with the subscription's secret.
    with receiver.lock:
        requests = list(receiver.requests)
    for headers, body in requests:
        verified = Webhook(sub["secret"]).verify(body, headers)
        assert verified["type"] in ("task.opened", "task.decided", "thread.completed")
        assert headers["webhook-id"].startswith("evt_")
    tampered_headers, tampered_body = requests[0]
    with pytest.raises(Exception):  # noqa: B017 - the library's WebhookVerificationError
        Webhook(sub["secret"]).verify(tampered_body + b" ", tampered_headers)

    # The result is recorded after the HTTP call returns (no transaction is held across it),
    # so the receiver can have the event a moment before the log says "delivered".
    def log_settled() -> list[dict[str, Any]] | None:
        log = operator.client.get("/api/webhook-deliveries", subscription=sub["id"]).json()
        return log if log and all(d["status"] != "pending" for d in log) else None

    log = wait_for(log_settled, what="every delivery recorded")
    assert {d["status"] for d in log} == {"delivered"} and all(d["response_code"] == 204 for d in log)


def test_a_failing_receiver_is_retried_with_backoff_under_the_same_id(operator, reviewer, receiver):
    receiver.fail_first = 2
    sub = _subscribe(operator, receiver.url, "loan_approval", "task.opened")
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    pending_tasks(reviewer, thread["id"])

    delivery = wait_for(
        lambda: OutboundDelivery.objects.filter(subscription_id=sub["id"], status="delivered").first(),
        timeout=30,
        what="delivery after retries",
    )
    assert delivery.attempts == 3 and delivery.response_code == 204
    with receiver.lock:
        ids = {headers["webhook-id"] for headers, _ in receiver.requests}
    assert ids == {delivery.event_id}  # receivers dedupe on it
    assert len(receiver.requests) == 3


def test_a_decisions_delivery_is_on_its_threads_trail_once_with_its_outcome(operator, reviewer, auditor, receiver):
    """An auditor proves "delivered to X at T, HTTP 204" from the thread: one event per delivery's outcome
    (not per attempt), and the delivery names the decision's audit event it carried."""
    receiver.fail_first = 1  # the first attempt fails and is retried: still one outcome on the trail
    sub = _subscribe(operator, receiver.url, "loan_approval", "task.decided")
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    [task] = pending_tasks(reviewer, thread["id"])
    decided = api_decide(reviewer, task, reason="fine").json()
    delivery = wait_for(
        lambda: OutboundDelivery.objects.filter(subscription_id=sub["id"], status="delivered").first(),
        what="the decision's delivery, after one retry",
    )
    assert delivery.attempts == 2
    made = AuditEvent.objects.get(thread_id=thread["id"], action="decision.made")
    assert str(delivery.thread_id) == thread["id"] and delivery.audit_event_id == made.pk

    [listed] = operator.client.get("/api/webhook-deliveries", thread=thread["id"]).json()
    assert listed["id"] == delivery.pk and listed["audit_event_id"] == made.pk
    assert listed["decision_id"] == decided["id"] and listed["url"] == receiver.url

    trail = auditor.client.get("/api/audit", thread=thread["id"]).json()
    outcomes = [e for e in trail if e["action"].startswith("webhook.")]
    assert [e["action"] for e in outcomes] == ["webhook.delivered"]
    [outcome] = outcomes
    assert outcome["subject_id"] == str(delivery.pk)
    details = outcome["details"]
    assert details["url"] == receiver.url and details["response_code"] == 204 and details["attempts"] == 2
    assert details["audit_event"] == made.pk and details["event_type"] == "task.decided"


def test_a_delivery_gives_up_after_six_attempts_and_a_manual_retry_sends_it(operator, reviewer, receiver, personas):
    receiver.fail_first = 6
    sub = _subscribe(operator, receiver.url, "loan_approval", "task.opened")
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    pending_tasks(reviewer, thread["id"])
    failed = wait_for(
        lambda: OutboundDelivery.objects.filter(subscription_id=sub["id"], status="failed").first(),
        timeout=40,
        what="delivery to give up",
    )
    assert failed.attempts == 6 and failed.response_code == 503 and "503" in failed.last_error
    assert len(receiver.requests) == 6
    # Given up: one event on the thread's trail, none for the five attempts that were retried.
    [gave_up] = AuditEvent.objects.filter(thread_id=thread["id"], action__startswith="webhook.")
    assert gave_up.action == "webhook.delivery_failed" and gave_up.subject_id == str(failed.pk)
    assert gave_up.details["response_code"] == 503 and gave_up.details["attempts"] == 6

    assert reviewer.client.post(f"/api/webhook-deliveries/{failed.pk}/retry").status_code == 403
    response = operator.client.post(f"/api/webhook-deliveries/{failed.pk}/retry")
    assert response.status_code == 202, response.content
    wait_for(lambda: OutboundDelivery.objects.get(pk=failed.pk).status == "delivered", what="manual retry")
    again = operator.client.post(f"/api/webhook-deliveries/{failed.pk}/retry")
    assert again.status_code == 409


def test_a_failed_thread_is_announced(operator, reviewer, receiver):
    # Not "flaky": another test leaves the session worker with that graph fixed.
    _subscribe(operator, receiver.url, "always_fails", "thread.failed")
    thread = thread_start(operator, "always_fails", {"to": "ops@example.com"})
    thread_settled(reviewer, thread["id"], statuses=("failed",))
    [event] = wait_for(
        lambda: [e for e in receiver.events("thread.failed") if e["data"]["thread_id"] == thread["id"]],
        what="thread.failed event",
    )
    assert "mail relay unavailable for ops@example.com" in event["data"]["error"]


def test_events_of_other_graphs_and_types_are_not_sent(operator, reviewer, receiver):
    sub = _subscribe(operator, receiver.url, "kyc_onboarding", "task.decided")
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    [task] = pending_tasks(reviewer, thread["id"])
    api_decide(reviewer, task, "reject", reason="no")
    thread_settled(reviewer, thread["id"])
    assert not OutboundDelivery.objects.filter(subscription_id=sub["id"]).exists()
    assert receiver.requests == []


def test_a_deactivated_subscription_is_sent_nothing_more(operator, reviewer, receiver, personas):
    receiver.fail_first = 10**6  # every attempt fails: the delivery stays queued for retries
    sub = _subscribe(operator, receiver.url, "loan_approval", "task.opened")
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000))
    pending_tasks(reviewer, thread["id"])
    wait_for(lambda: receiver.requests, what="a first, failing attempt")
    assert OutboundDelivery.objects.get(subscription_id=sub["id"]).status == "pending"

    assert reviewer.client.delete(f"/api/webhook-subscriptions/{sub['id']}").status_code == 403
    assert operator.client.delete(f"/api/webhook-subscriptions/{sub['id']}").status_code == 204

    [listed] = [s for s in operator.client.get("/api/webhook-subscriptions").json() if s["id"] == sub["id"]]
    assert listed["active"] is False and listed["deactivated_at"] is not None
    stored = WebhookSubscription.objects.get(pk=sub["id"])
    assert stored.secret == ""  # destroyed: nothing can be signed for it again
    # Given up at once, unless an attempt was under way: that one is the last, its outcome logged.
    [given_up] = OutboundDelivery.objects.filter(subscription_id=sub["id"])
    assert given_up.status == "failed" and given_up.next_attempt_at is None
    assert given_up.last_error in ("subscription deactivated", "HTTP 503")
    assert operator.client.post(f"/api/webhook-deliveries/{given_up.pk}/retry").status_code == 409

    # A new event is queued for no inactive subscription: a second receiver, subscribed now, gets it first.
    other = Receiver()
    try:
        _subscribe(operator, other.url, "loan_approval", "task.opened")
        later = thread_start(operator, "loan_approval", loan_input(amount=20000))
        pending_tasks(reviewer, later["id"])
        wait_for(lambda: [e for e in other.events() if e["data"]["thread_id"] == later["id"]], what="the new event")
        assert OutboundDelivery.objects.filter(subscription_id=sub["id"]).count() == 1
    finally:
        WebhookSubscription.objects.filter(url=other.url).update(active=False)
        other.close()

    # Deactivating again changes and records nothing; the audit trail holds the one deactivation.
    assert operator.client.delete(f"/api/webhook-subscriptions/{sub['id']}").status_code == 204
    [event] = AuditEvent.objects.filter(action="webhook.subscription_deactivated", subject_id=str(sub["id"]))
    assert event.actor_label == operator.username and event.details["url"] == receiver.url
    assert event.details["deliveries_given_up"] in (0, 1)
    missing = operator.client.delete("/api/webhook-subscriptions/999999999")
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "subscription_id"


@pytest.mark.parametrize(
    "body,field",
    [
        ({"url": "ftp://x", "event_types": ["task.opened"]}, "url"),
        ({"url": "http://127.0.0.1:9/x", "event_types": ["task.exploded"]}, "event_types"),
        ({"url": "http://127.0.0.1:9/x", "event_types": []}, "event_types"),
        ({"url": "http://127.0.0.1:9/x", "event_types": ["task.opened"], "secret": "nope"}, "secret"),
    ],
)
def test_bad_subscriptions_are_refused(operator, body, field):
    before = operator.client.get("/api/webhook-subscriptions").json()
    response = operator.client.post("/api/webhook-subscriptions", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field
    assert operator.client.get("/api/webhook-subscriptions").json() == before


@pytest.mark.parametrize("persona,expected", [("reviewer", 403), ("auditor", 403), ("outsider", 403)])
def test_only_operators_and_admins_subscribe(personas, persona, expected):
    body = {"url": "http://127.0.0.1:9/x", "event_types": ["task.opened"]}
    assert personas[persona].client.post("/api/webhook-subscriptions", body).status_code == expected
