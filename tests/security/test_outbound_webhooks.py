"""Threat: an operator points an outbound webhook at the inside of the network and reads what answers.

Subscriptions may not target loopback, private, link-local, multicast,
reserved, unspecified or cloud-metadata addresses (literal, encoded, IPv4-mapped
IPv6, or behind a host name); the address is checked again at send time and
the connection goes to the checked address (DNS rebinding), redirects are not
followed, and the delivery log keeps only a short excerpt of the answer. The
HTTP call holds no database lock and runs on its own queue, and ``task.decided``
means decided.

DNS is the outside world here: ``socket.getaddrinfo`` is replaced by a fake
resolver for the test's own names only. The suite allows 127.0.0.1/32 (its
receivers listen there, tests/settings.py); tests of the default clear it.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import OperationalError, transaction

from approvals.models import ApprovalTask, AuditEvent, GraphAssignment, OutboundDelivery, WebhookSubscription
from approvals.outbound import sending, subscriptions
from approvals.outbound.signing import secret_generate
from tests.conftest import api_decide, pending_tasks, scaled, thread_start, wait_for

PUBLIC = "93.184.216.34"  # a public address nothing here connects to (only resolved, never reached)


class Receiver:
    """An HTTP server that records every request (any method) and answers as told."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.status = 204
        self.body = b""
        self.headers: dict[str, str] = {}
        self.hold: threading.Event | None = None  # when set, requests wait for it
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver.requests.append((self.command, self.path, headers, body))
                receiver.arrived.set()
                if receiver.hold is not None:
                    receiver.hold.wait(timeout=scaled(60))
                self.send_response(receiver.status)
                for name, value in receiver.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(receiver.body)))
                self.end_headers()
                self.wfile.write(receiver.body)

            do_POST = do_GET = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.host, self.port = host, self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}/hook"

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


class FakeDns:
    """Answers for the test's own host names, in order (the last answer repeats); other names resolve for real."""

    def __init__(self) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.calls: dict[str, int] = {}
        self.real = socket.getaddrinfo

    def getaddrinfo(self, host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name not in self.answers:
            return self.real(host, port, family, type, proto, flags)
        n = self.calls.get(name, 0)
        self.calls[name] = n + 1
        answer = self.answers[name][min(n, len(self.answers[name]) - 1)]
        out = []
        for ip in answer:
            if ":" in ip:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (ip, int(port or 0), 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, int(port or 0))))
        return out


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    fake = FakeDns()
    monkeypatch.setattr(socket, "getaddrinfo", fake.getaddrinfo)
    return fake


@pytest.fixture
def no_allowlist(settings: Any) -> None:
    settings.GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS = []


def _subscribe(persona: Any, url: str, graph: str = "loan_approval", events: tuple[str, ...] = ("task.opened",)) -> Any:
    return persona.client.post("/api/webhook-subscriptions", {"url": url, "graph": graph, "event_types": list(events)})


def _refused(response: Any, field: str = "url") -> str:
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["field"] == field
    return str(error["message"])


def _delivery(url: str) -> OutboundDelivery:
    """A due delivery to ``url`` for a subscription saved without the create-time check (as before this fix)."""
    subscription = WebhookSubscription.objects.create(
        url=url, graph="breakpoint_review", event_types=["thread.failed"], secret=secret_generate()
    )
    return OutboundDelivery.objects.create(
        subscription=subscription,
        event_id=f"evt_{uuid.uuid4().hex[:12]}",
        event_type="thread.failed",
        graph="breakpoint_review",
        payload={"type": "thread.failed", "data": {"probe": True}},
    )


# --- at subscription time ---------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("no_allowlist")
@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
    ],
    ids=["aws-ipv4", "aws-ipv6", "ipv4-mapped"],
)
def test_a_subscription_cannot_target_cloud_metadata(operator, url):
    before = WebhookSubscription.objects.count()
    message = _refused(_subscribe(operator, url))
    assert "metadata" in message
    # No allowlist opens metadata: the refusal must not suggest one does.
    assert "unless" not in message and "never reach cloud metadata" in message
    assert WebhookSubscription.objects.count() == before


@pytest.mark.django_db
@pytest.mark.usefixtures("no_allowlist")
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/",
        "http://localhost:5432/",
        "http://0x7f000001/",  # 127.0.0.1, hex-encoded
        "http://2130706433/",  # 127.0.0.1, as one decimal number
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.5/",
        "http://172.16.8.1/",
        "http://192.168.1.1/admin",
        "http://100.64.0.1/",  # carrier-grade NAT
        "http://[fd12:3456::1]/",
        "http://[fe80::1]/",
        "http://224.0.0.1/",
        "http://0.0.0.0:8000/",
        "http://[::]/",
        "http://240.0.0.1/",
    ],
)
def test_a_subscription_cannot_target_internal_addresses(operator, url):
    before = WebhookSubscription.objects.count()
    _refused(_subscribe(operator, url))
    assert WebhookSubscription.objects.count() == before


@pytest.mark.django_db
@pytest.mark.usefixtures("no_allowlist")
def test_a_host_name_with_one_internal_address_among_public_ones_is_refused(operator, dns):
    dns.answers["mixed.example.test"] = [[PUBLIC, "10.1.2.3"]]
    assert "10.1.2.3" in _refused(_subscribe(operator, "https://mixed.example.test/hook"))
    dns.answers["public.example.test"] = [[PUBLIC]]
    assert _subscribe(operator, "https://public.example.test/hook").status_code == 201


@pytest.mark.django_db
def test_the_allowlist_opens_only_what_it_names_and_never_metadata(operator, settings):
    settings.GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS = ["10.0.0.0/8", "169.254.0.0/16"]
    assert _subscribe(operator, "http://10.20.30.40:8080/hook").status_code == 201
    _refused(_subscribe(operator, "http://192.168.1.1/"))
    assert "never reach cloud metadata" in _refused(_subscribe(operator, "http://169.254.169.254/"))


@pytest.mark.django_db
def test_a_subscription_for_an_unknown_graph_is_refused(operator, admin_persona):
    for persona in (operator, admin_persona):
        before = WebhookSubscription.objects.count()
        _refused(_subscribe(persona, "http://127.0.0.1:9/x", graph="no_such_graph"), field="graph")
        assert WebhookSubscription.objects.count() == before


@pytest.fixture
def admin_persona(personas: Any) -> Any:
    return personas["admin"]


# --- at send time -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_dns_rebinding_to_loopback_is_refused_at_send_time(operator, dns, receiver, settings):
    settings.GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS = []
    # The name is public when the subscription is saved, and loopback (where the receiver plays an
    # internal service) by the time the event is sent.
    dns.answers["rebind.example.test"] = [[PUBLIC], ["127.0.0.1"]]
    created = _subscribe(operator, receiver.url("rebind.example.test"), graph="breakpoint_review")
    assert created.status_code == 201, created.content
    delivery = OutboundDelivery.objects.create(
        subscription_id=created.json()["id"],
        event_id="evt_rebind",
        event_type="task.opened",
        graph="breakpoint_review",
        payload={"type": "task.opened"},
    )
    sending.delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert receiver.requests == []
    assert delivery.status == "failed" and delivery.last_error.startswith("refused: ")
    assert "127.0.0.1 (loopback)" in delivery.last_error
    refusal = AuditEvent.objects.get(action="webhook.delivery_refused", subject_id=str(delivery.pk))
    assert refusal.details["subscription"] == delivery.subscription_id


@pytest.mark.django_db
@pytest.mark.usefixtures("no_allowlist")
def test_a_subscription_saved_before_the_policy_still_cannot_reach_metadata(receiver):
    delivery = _delivery("http://169.254.169.254/latest/meta-data/")
    sending.delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "failed" and "cloud metadata" in delivery.last_error and delivery.response_code is None


@pytest.fixture
def internal_service(receiver: Receiver) -> Iterator[Receiver]:
    """A second server on 127.0.0.2 (loopback, not allowlisted), on the receiver's port."""
    server = Receiver("127.0.0.2", receiver.port)
    yield server
    server.close()


@pytest.mark.django_db
def test_the_request_goes_to_the_address_that_was_checked(dns, receiver, internal_service, settings):
    """Resolve, check, then connect by name again would let a rebinding answer win the second lookup."""
    settings.GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    dns.answers["pinned.example.test"] = [["127.0.0.1"], ["127.0.0.2"]]
    delivery = _delivery(receiver.url("pinned.example.test"))
    sending.delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "delivered", delivery.last_error
    assert internal_service.requests == [] and len(receiver.requests) == 1
    method, _, headers, body = receiver.requests[0]
    assert method == "POST" and headers["host"] == f"pinned.example.test:{receiver.port}"
    assert json.loads(body)["data"] == {"probe": True}
    assert dns.calls["pinned.example.test"] == 1


def _self_signed(tmp_path: Any, name: str) -> tuple[str, str]:
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)


def test_https_goes_to_the_checked_address_and_still_verifies_the_name(dns, settings, tmp_path, monkeypatch):
    import ssl

    cert, key = _self_signed(tmp_path, "hooks.example.test")
    monkeypatch.setenv("SSL_CERT_FILE", cert)  # the system store, as a deployment with an internal CA sets it
    settings.GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    server = Receiver()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.server.socket = context.wrap_socket(server.server.socket, server_side=True)
    try:
        dns.answers["hooks.example.test"] = [["127.0.0.1"], ["127.0.0.2"]]
        dns.answers["impostor.example.test"] = [["127.0.0.1"]]
        url = f"https://hooks.example.test:{server.port}/hook"
        assert sending.delivery_send(url, b"{}", {}).code == 204
        assert server.requests[0][2]["host"] == f"hooks.example.test:{server.port}"
        # SNI and the certificate check use the name, not the pinned IP: another name is refused.
        wrong = sending.delivery_send(f"https://impostor.example.test:{server.port}/hook", b"{}", {})
        assert wrong.code is None and "CERTIFICATE_VERIFY_FAILED" in wrong.error
    finally:
        server.close()


@pytest.mark.django_db
def test_a_redirect_to_an_internal_address_is_not_followed(receiver, internal_service, settings):
    settings.GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    receiver.status = 302  # urllib, for one, follows it (as a GET)
    receiver.headers = {"Location": internal_service.url()}
    delivery = _delivery(receiver.url())
    sending.delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert internal_service.requests == []
    assert delivery.status == "pending" and delivery.response_code == 302
    assert "redirects are not followed" in delivery.last_error


@pytest.mark.django_db
def test_the_delivery_log_keeps_only_a_short_excerpt_of_the_response(operator, receiver, settings):
    settings.GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    receiver.status = 500
    receiver.headers = {"X-Internal-Token": "hdr-secret-7f3a"}
    receiver.body = ("x" * 300 + "body-secret-91c2" + "y" * 20000).encode()
    delivery = _delivery(receiver.url())
    sending.delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.response_code == 500
    assert delivery.last_error.startswith("HTTP 500: xxx")
    assert len(delivery.last_error) <= len("HTTP 500: ") + 256
    logged = json.dumps(operator.client.get("/api/webhook-deliveries").json())
    for secret in ("body-secret-91c2", "hdr-secret-7f3a"):
        assert secret not in delivery.last_error and secret not in logged


def test_deliveries_run_on_their_own_queue():
    from console.celery import app

    outbound_queue = app.amqp.router.route({}, "approvals.deliver_webhook")["queue"]
    run_queue = app.amqp.router.route({}, "runtime.execute_run")["queue"]
    assert outbound_queue.name == f"{django_settings.CELERY_TASK_DEFAULT_QUEUE}.outbound"
    assert run_queue.name == django_settings.CELERY_TASK_DEFAULT_QUEUE
    # Bound apart: a message for one queue must not also land in the other.
    bindings = {(q.exchange.name, q.routing_key) for q in app.amqp.queues.values()}
    assert len(bindings) == len(app.amqp.queues) == 2


# --- with the worker: locks and events --------------------------------------------------------


def _backlog_give_up() -> None:
    """Earlier tests' deliveries to receivers long gone retry on the queue this test's delivery takes:
    give them up, so their queued attempts find nothing to send instead of holding the worker's threads."""
    OutboundDelivery.objects.filter(status="pending").update(status="failed", next_attempt_at=None)


@pytest.mark.integration
@pytest.mark.usefixtures("live_db", "live_worker")
def test_a_slow_receiver_holds_no_database_lock(receiver):
    _backlog_give_up()
    receiver.hold = threading.Event()
    delivery = _delivery(receiver.url())
    try:
        from approvals.outbound.tasks import deliver_webhook

        deliver_webhook.delay(delivery.pk)
        assert receiver.arrived.wait(timeout=scaled(30)), "the worker never sent the delivery"
        # While the worker waits on the receiver, the row is not locked and no transaction is open.
        with transaction.atomic():
            OutboundDelivery.objects.select_for_update(nowait=True).get(pk=delivery.pk)
    except OperationalError as exc:
        pytest.fail(f"the delivery row is locked while the HTTP call is in flight: {exc}")
    finally:
        receiver.hold.set()
        WebhookSubscription.objects.filter(pk=delivery.subscription_id).update(active=False)
    wait_for(lambda: OutboundDelivery.objects.get(pk=delivery.pk).status == "delivered", what="delivery")


def _outbox(subscription_id: int, task_id: str) -> Callable[[str], list[OutboundDelivery]]:
    def rows(event_type: str) -> list[OutboundDelivery]:
        return [
            d
            for d in OutboundDelivery.objects.filter(subscription_id=subscription_id, event_type=event_type)
            if d.payload["data"].get("task_id") == task_id
        ]

    return rows


@pytest.mark.integration
@pytest.mark.usefixtures("live_db", "live_worker")
def test_task_decided_is_not_emitted_on_a_first_of_two_signatures(personas, receiver):
    operator, reviewer, approver = personas["operator"], personas["reviewer"], personas["approver"]
    created = _subscribe(operator, receiver.url(), graph="four_eyes", events=("task.decided",))
    assert created.status_code == 201, created.content
    try:
        thread = thread_start(operator, "four_eyes", {"subject": "wire", "amount": 5000})
        [task] = pending_tasks(reviewer, thread["id"])
        outbox = _outbox(created.json()["id"], task["id"])
        first = api_decide(reviewer, task, reason="ok")
        assert first.status_code == 201, first.content
        assert ApprovalTask.objects.get(pk=task["id"]).status == "pending"
        assert outbox("task.decided") == []

        final = api_decide(approver, task, reason="ok")
        assert final.status_code == 201, final.content
        [decided] = outbox("task.decided")
        assert decided.payload["data"]["actor"] == approver.username
    finally:
        WebhookSubscription.objects.filter(pk=created.json()["id"]).update(active=False)


@pytest.mark.integration
@pytest.mark.usefixtures("live_db", "live_worker")
def test_each_signature_is_announced_as_task_signed(personas, receiver):
    _backlog_give_up()
    operator, reviewer, approver = personas["operator"], personas["reviewer"], personas["approver"]
    created = _subscribe(operator, receiver.url(), graph="four_eyes", events=("task.signed",))
    assert created.status_code == 201, created.content
    try:
        thread = thread_start(operator, "four_eyes", {"subject": "wire", "amount": 5000})
        [task] = pending_tasks(reviewer, thread["id"])
        outbox = _outbox(created.json()["id"], task["id"])
        for persona in (reviewer, approver):
            response = api_decide(persona, task, reason="ok")
            assert response.status_code == 201, response.content
        signed = sorted(outbox("task.signed"), key=lambda d: d.pk)
        assert [(d.payload["data"]["actor"], d.payload["data"]["approvals"]) for d in signed] == [
            (reviewer.username, 1),
            (approver.username, 2),
        ]
        wait_for(
            lambda: len([r for r in receiver.requests if json.loads(r[3])["data"].get("task_id") == task["id"]]) == 2,
            what="both task.signed deliveries",
        )
    finally:
        WebhookSubscription.objects.filter(pk=created.json()["id"]).update(active=False)


# --- deactivation: a receiver that was let go gets nothing more --------------------------------


@pytest.mark.usefixtures("live_db")
def test_a_delivery_queued_as_the_subscription_was_deactivated_is_given_up_unsent(receiver):
    """The outbox's transaction read the subscription while it was active and committed after the
    deactivation (which could not give up a delivery it could not see yet): the attempt gives it up."""
    delivery = _delivery(receiver.url())
    subscription = WebhookSubscription.objects.get(pk=delivery.subscription_id)
    subscriptions.subscription_deactivate(actor=None, subscription_id=subscription.pk)
    # What that late commit leaves behind: a pending delivery of a subscription that is no longer active.
    OutboundDelivery.objects.filter(pk=delivery.pk).update(status="pending", last_error="", next_attempt_at=None)
    before = OutboundDelivery.objects.get(pk=delivery.pk).attempts

    attempted = sending.delivery_attempt(delivery_id=delivery.pk)

    assert attempted is not None and attempted.status == "failed"
    assert attempted.last_error == subscriptions.DEACTIVATED and attempted.next_attempt_at is None
    assert receiver.requests == []
    assert attempted.attempts == before  # nothing was sent: the log counts no attempt


@pytest.mark.usefixtures("live_db")
def test_an_external_tasks_callback_is_delivered_until_its_subscription_is_deactivated(receiver):
    """An external task's callback is a subscription that receives no event (``active`` false from the
    start, approvals.external): only a deactivation stops its result delivery."""
    delivery = _delivery(receiver.url())
    WebhookSubscription.objects.filter(pk=delivery.subscription_id).update(active=False, event_types=[])
    sent = sending.delivery_attempt(delivery_id=delivery.pk)
    assert sent is not None and sent.status == "delivered" and len(receiver.requests) == 1

    stopped = _delivery(receiver.url())
    WebhookSubscription.objects.filter(pk=stopped.subscription_id).update(active=False, event_types=[])
    _, given_up = subscriptions.subscription_deactivate(actor=None, subscription_id=stopped.subscription_id)
    assert given_up == 1
    assert sending.delivery_attempt(delivery_id=stopped.pk) is None  # given up: nothing to claim
    assert OutboundDelivery.objects.get(pk=stopped.pk).last_error == subscriptions.DEACTIVATED
    assert len(receiver.requests) == 1


@pytest.mark.parametrize("graph", ["kyc_onboarding", "*"])
@pytest.mark.usefixtures("live_db")
def test_an_operator_of_one_graph_cannot_stop_another_graphs_subscription(graph):
    """Threat: an operator silences the notifications of a graph they do not run (or of every graph)."""
    from approvals import users
    from approvals.tokens import token_issue
    from tests.conftest import ApiClient

    scoped = users.user_create(actor=users.CLI, username=f"op-{uuid.uuid4().hex[:8]}", roles=["operator"])
    GraphAssignment.objects.create(user=scoped, graph="loan_approval")
    client = ApiClient(token_issue(user=scoped))
    target = subscriptions.subscription_create(
        actor=None, url="http://127.0.0.1:9/other", graph=graph, event_types=["thread.failed"]
    )
    made = [target.pk]
    try:
        response = client.delete(f"/api/webhook-subscriptions/{target.pk}")
        assert response.status_code == 404, response.content
        assert response.json()["error"]["field"] == "subscription_id"
        stored = WebhookSubscription.objects.get(pk=target.pk)
        assert stored.active and stored.deactivated_at is None and stored.secret == target.secret
        assert not AuditEvent.objects.filter(action="webhook.subscription_deactivated", subject_id=str(target.pk))
        # Their own graph's subscription they may stop.
        own = subscriptions.subscription_create(
            actor=None, url="http://127.0.0.1:9/own", graph="loan_approval", event_types=["thread.failed"]
        )
        made.append(own.pk)
        assert client.delete(f"/api/webhook-subscriptions/{own.pk}").status_code == 204
    finally:  # no later event of this session goes to a closed port
        WebhookSubscription.objects.filter(pk__in=made).update(active=False)


@pytest.mark.parametrize("answer,status,error", [(204, "delivered", ""), (503, "failed", "HTTP 503")])
@pytest.mark.usefixtures("live_db")
def test_an_attempt_under_way_when_the_subscription_is_deactivated_is_the_last_and_its_outcome_is_logged(
    receiver, answer, status, error
):
    delivery = _delivery(receiver.url())
    receiver.status, receiver.hold = answer, threading.Event()
    attempts: list[Any] = []
    sender = threading.Thread(target=lambda: attempts.append(sending.delivery_attempt(delivery_id=delivery.pk)))
    sender.start()
    try:
        assert receiver.arrived.wait(timeout=scaled(30)), "the delivery was never sent"
        # The receiver holds the request: the deactivation commits while the attempt is under way.
        _, stopped = subscriptions.subscription_deactivate(actor=None, subscription_id=delivery.subscription_id)
        assert stopped == 1
    finally:
        receiver.hold.set()
        sender.join(timeout=scaled(30))
    assert not sender.is_alive() and attempts and attempts[0] is not None
    after = OutboundDelivery.objects.get(pk=delivery.pk)
    # What the receiver answered is what the log says; a failure is not retried.
    assert (after.status, after.response_code, after.last_error) == (status, answer, error)
    assert after.attempts == 1 and after.next_attempt_at is None
    assert len(receiver.requests) == 1


# --- the sweeper -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_sweeper_resends_an_overdue_delivery_once_per_grace(settings):
    """A backed-up queue keeps deliveries overdue: each sweep must not send them all again (a storm)."""
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    delivery = _delivery("http://127.0.0.1:9/hook")
    OutboundDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=now - timedelta(minutes=5))
    # Only this delivery is pending here (other tests' rows are set aside; the test's transaction rolls back).
    OutboundDelivery.objects.exclude(pk=delivery.pk).filter(status="pending").update(status="failed")
    try:
        assert delivery.pk in sending.deliveries_due(now=now)
        # Re-sent, not yet attempted (the queue is slow): the next sweeps leave it alone for the grace.
        assert delivery.pk not in sending.deliveries_due(now=now + timedelta(seconds=5))
        assert delivery.pk not in sending.deliveries_due(now=now + timedelta(seconds=59))
        # Still not attempted a grace later: that re-send was lost too, send it again.
        assert delivery.pk in sending.deliveries_due(now=now + timedelta(seconds=61))
        # And the re-sent message's attempt finds it due.
        assert OutboundDelivery.objects.get(pk=delivery.pk).next_attempt_at <= now + timedelta(seconds=61)
    finally:
        WebhookSubscription.objects.filter(pk=delivery.subscription_id).update(active=False)
