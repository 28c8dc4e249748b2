"""The webhooks page: who may see it, what it shows (never a secret), and the manual retry of a failed delivery."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone

from approvals.inbound.webhooks import delivery_receive, webhook_endpoint_create
from approvals.models import AuditEvent, OutboundDelivery, OutboundStatus, WebhookEndpoint, WebhookSubscription
from approvals.outbound import outbox, sending, subscriptions
from approvals.outbound.signing import secret_generate, webhook_sign
from tests.console.conftest import console_client

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def hooks(monkeypatch):
    # No worker needed: record that a retry was dispatched instead of sending it.
    sent: list[int] = []
    monkeypatch.setattr(outbox, "delivery_dispatch", lambda *, delivery_id, countdown=0: sent.append(delivery_id))
    name = f"vendor-{uuid.uuid4().hex[:6]}"
    endpoint = webhook_endpoint_create(actor=None, name=name, graph="loan_approval", gates=["human_review"])
    # A delivery signed with a secret the endpoint does not hold: refused (and recorded) by the inbound service.
    raw = b'{"correlation_key": "x", "decision": "approve"}'
    refused = delivery_receive(name=name, raw=raw, headers=webhook_sign(secret_generate(), raw, msg_id=f"msg_{name}"))
    assert refused.http_status == 401
    subscription = subscriptions.subscription_create(
        actor=None, url=f"http://127.0.0.1:9/{name}", graph="loan_approval", event_types=[outbox.EVENT_TYPES[0]]
    )

    # Two finished outbound histories, written as the sender records them: reaching these states through
    # the services takes a receiver answering 500 MAX_ATTEMPTS times, which the retry tests do elsewhere.
    def delivery(status: str, **fields) -> OutboundDelivery:
        return OutboundDelivery.objects.create(
            subscription=subscription,
            event_id=f"evt_{uuid.uuid4().hex[:12]}",
            event_type=outbox.EVENT_TYPES[0],
            graph="loan_approval",
            payload={"type": "x"},
            status=status,
            **fields,
        )

    failed = delivery(OutboundStatus.FAILED, attempts=sending.MAX_ATTEMPTS, last_error="HTTP 500: receiver down")
    done = delivery(OutboundStatus.DELIVERED, attempts=1, response_code=204)
    yield {
        "endpoint": endpoint,
        "inbound": refused.delivery,
        "subscription": subscription,
        "failed": failed,
        "delivered": done,
        "sent": sent,
    }
    # The rows persist for the session (live_db): left active, the subscription would queue a delivery to a
    # closed port for every loan_approval task.opened of the rest of the suite, each retried MAX_ATTEMPTS
    # times on the worker's outbound queue (thousands of attempts ahead of other tests' own deliveries).
    WebhookSubscription.objects.filter(pk=subscription.pk).update(active=False)


@pytest.mark.parametrize(
    "role,expected",
    [
        ("operator", 200),
        ("admin", 200),
        ("auditor", 200),
        ("reviewer", 403),
        ("approver", 403),
        ("outsider", 403),
    ],
)
def test_only_operators_admins_and_auditors_see_webhooks(role, expected, personas, hooks):
    assert console_client(personas[role]).get("/webhooks/").status_code == expected


def test_the_page_lists_endpoints_deliveries_and_the_outbound_log_without_secrets(personas, hooks):
    html = console_client(personas["operator"]).get("/webhooks/").content.decode()
    endpoint, subscription = hooks["endpoint"], hooks["subscription"]
    assert endpoint.name in html and "1 secret" in html
    assert f"msg_{endpoint.name}" in html and hooks["inbound"].reason in html and "Refused" in html
    assert subscription.url in html
    assert hooks["failed"].event_id in html and "HTTP 500: receiver down" in html
    for secret in [*endpoint.secrets, subscription.secret]:
        assert secret not in html
        assert secret.removeprefix("whsec_") not in html
    # A retry button for the failed delivery only.
    assert f'hx-post="/webhooks/deliveries/{hooks["failed"].pk}/retry"' in html
    assert f"/webhooks/deliveries/{hooks['delivered'].pk}/retry" not in html


def test_auditors_read_the_log_but_get_no_retry_button_and_cannot_retry(personas, hooks):
    client = console_client(personas["auditor"])
    html = client.get("/webhooks/").content.decode()
    assert hooks["failed"].event_id in html and "Retry</button>" not in html
    response = client.post(f"/webhooks/deliveries/{hooks['failed'].pk}/retry", headers={"HX-Request": "true"})
    assert response.status_code == 403
    assert OutboundDelivery.objects.get(pk=hooks["failed"].pk).status == OutboundStatus.FAILED
    assert hooks["sent"] == []


def test_an_operator_retries_a_failed_delivery_and_the_row_is_swapped_in_place(personas, hooks):
    failed = hooks["failed"]
    response = console_client(personas["operator"]).post(
        f"/webhooks/deliveries/{failed.pk}/retry", headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.strip().startswith(f'<tr id="outbound-{failed.pk}"') and "Pending" in html
    assert OutboundDelivery.objects.get(pk=failed.pk).status == OutboundStatus.PENDING
    assert hooks["sent"] == [failed.pk]
    assert AuditEvent.objects.filter(action="webhook.delivery_retried", subject_id=str(failed.pk)).exists()


def test_retrying_a_delivered_delivery_is_refused_beside_its_row(personas, hooks):
    response = console_client(personas["operator"]).post(
        f"/webhooks/deliveries/{hooks['delivered'].pk}/retry", headers={"HX-Request": "true"}
    )
    assert response.status_code == 409 and "already succeeded" in response.content.decode()
    assert hooks["sent"] == []


def test_the_retry_needs_a_csrf_token(personas, hooks):
    client = console_client(personas["operator"], enforce_csrf=True)
    assert client.post(f"/webhooks/deliveries/{hooks['failed'].pk}/retry").status_code == 403
    assert OutboundDelivery.objects.get(pk=hooks["failed"].pk).status == OutboundStatus.FAILED


def test_an_operator_deactivates_a_subscription_and_its_queued_deliveries_are_given_up(personas, hooks):
    subscription = hooks["subscription"]
    queued = OutboundDelivery.objects.create(
        subscription=subscription,
        event_id=f"evt_{uuid.uuid4().hex[:12]}",
        event_type=outbox.EVENT_TYPES[0],
        graph="loan_approval",
        payload={"type": "x"},
        attempts=2,
        last_error="HTTP 503",
    )
    client = console_client(personas["operator"])
    page = client.get("/webhooks/").content.decode()
    action = f"/webhooks/subscriptions/{subscription.pk}/deactivate"
    assert f'action="{action}"' in page

    response = client.post(action)
    assert response.status_code == 302
    stored = WebhookSubscription.objects.get(pk=subscription.pk)
    assert stored.active is False and stored.secret == ""
    given_up = OutboundDelivery.objects.get(pk=queued.pk)
    assert (given_up.status, given_up.last_error) == (OutboundStatus.FAILED, subscriptions.DEACTIVATED)
    # Finished deliveries keep their history.
    assert OutboundDelivery.objects.get(pk=hooks["delivered"].pk).status == OutboundStatus.DELIVERED
    [event] = AuditEvent.objects.filter(action="webhook.subscription_deactivated", subject_id=str(subscription.pk))
    assert event.actor_label == personas["operator"].username and event.details["deliveries_given_up"] == 1
    after = client.get("/webhooks/").content.decode()
    assert "1 queued delivery given up" in after and f'action="{action}"' not in after
    # Its given-up deliveries are not offered for a retry: nothing is sent to it any more.
    refused = client.post(f"/webhooks/deliveries/{queued.pk}/retry", headers={"HX-Request": "true"})
    assert refused.status_code == 409 and "deactivated" in refused.content.decode()


def test_auditors_get_no_deactivate_button_and_cannot_deactivate(personas, hooks):
    client = console_client(personas["auditor"])
    action = f"/webhooks/subscriptions/{hooks['subscription'].pk}/deactivate"
    assert action not in client.get("/webhooks/").content.decode()
    assert client.post(action).status_code == 403
    assert WebhookSubscription.objects.get(pk=hooks["subscription"].pk).active


def test_the_deactivation_needs_a_csrf_token(personas, hooks):
    client = console_client(personas["operator"], enforce_csrf=True)
    assert client.post(f"/webhooks/subscriptions/{hooks['subscription'].pk}/deactivate").status_code == 403
    assert WebhookSubscription.objects.get(pk=hooks["subscription"].pk).active


def test_an_external_tasks_callback_is_labelled_as_such_not_as_inactive(personas, hooks):
    callback = WebhookSubscription.objects.create(
        url=f"http://127.0.0.1:9/callback-{uuid.uuid4().hex[:6]}",
        graph="loan_approval",
        event_types=[],
        secret=secret_generate(),
        active=False,  # as approvals.external makes it: it receives no event, only its result
    )
    try:
        html = console_client(personas["operator"]).get("/webhooks/").content.decode()
        article = html.split(f'id="subscription-{callback.pk}"', 1)[1].split("</article>", 1)[0]
        assert "an external task's callback" in article and "inactive" not in article
        assert "Deactivate</button>" in article  # it can still be stopped
    finally:
        WebhookSubscription.objects.filter(pk=callback.pk).update(deactivated_at=timezone.now())


def _subscribe(client, **form):  # type: ignore[no-untyped-def]
    return client.post("/webhooks/subscriptions", form)


def test_an_operator_subscribes_from_the_page_and_sees_the_secret_once(personas):
    operator = console_client(personas["operator"])
    url = f"http://127.0.0.1:9/ui-{uuid.uuid4().hex[:8]}"
    page = operator.get("/webhooks/").content.decode()
    assert 'id="subscription-create"' in page and 'value="task.decided"' in page

    # A graph and events no other test produces: the session's other tests queue no delivery for it.
    response = _subscribe(operator, url=url, graph="breakpoint_review", event_types=["thread.failed", "task.escalated"])
    assert response.status_code == 201, response.content[:500]
    [subscription] = WebhookSubscription.objects.filter(url=url)
    assert subscription.graph == "breakpoint_review" and subscription.event_types == ["thread.failed", "task.escalated"]
    assert subscription.created_by == personas["operator"].user
    body = response.content.decode()
    assert subscription.secret in body and "shown only once" in body
    assert "no-store" in response["Cache-Control"]  # the secret's page is not cached
    assert AuditEvent.objects.filter(action="webhook.subscription_created", subject_id=str(subscription.pk)).exists()
    # Never again: the list shows the subscription, not its secret.
    again = operator.get("/webhooks/").content.decode()
    assert url in again and subscription.secret not in again
    subscriptions.subscription_deactivate(actor=personas["operator"].user, subscription_id=subscription.pk)


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"url": "http://10.1.2.3/hook", "graph": "loan_approval", "event_types": ["task.opened"]}, "url"),
        ({"url": "http://127.0.0.1:9/" + "x" * 600, "graph": "loan_approval", "event_types": ["task.opened"]}, "url"),
        ({"url": "http://127.0.0.1:9/h", "graph": "loan_approval", "event_types": []}, "event_types"),
        ({"url": "http://127.0.0.1:9/h", "graph": "loan_approval", "event_types": ["task.exploded"]}, "event_types"),
        ({"url": "http://127.0.0.1:9/h", "graph": "no_such_graph", "event_types": ["task.opened"]}, "graph"),
    ],
)
def test_a_refused_subscription_names_the_field_and_writes_nothing(personas, form, field):
    before = WebhookSubscription.objects.count()
    response = _subscribe(console_client(personas["operator"]), **form)
    assert response.status_code == 422, response.content[:300]
    assert f"<code>{field}</code>" in response.content.decode()
    assert WebhookSubscription.objects.count() == before
    # The form keeps what was typed.
    assert form["url"][:100] in response.content.decode()


def test_only_a_reader_of_every_graph_may_subscribe_to_all_of_them(personas):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from approvals.models import GraphAssignment
    from approvals.roles import roles_ensure

    scoped = get_user_model().objects.create_user(f"loan-op-{uuid.uuid4().hex[:6]}", password="x")
    scoped.groups.add(roles_ensure()["operator"])
    GraphAssignment.objects.create(user=scoped, graph="loan_approval")
    client = Client()
    client.force_login(scoped)
    page = client.get("/webhooks/").content.decode()
    assert 'id="subscription-create"' in page and '<option value="*"' not in page  # not offered
    refused = _subscribe(client, url="http://127.0.0.1:9/all", graph="*", event_types=["task.opened"])
    assert refused.status_code == 422 and "<code>graph</code>" in refused.content.decode()  # nor taken by hand
    assert not WebhookSubscription.objects.filter(url="http://127.0.0.1:9/all", created_by=scoped).exists()
    assert '<option value="*"' in console_client(personas["admin"]).get("/webhooks/").content.decode()


# --- irreversible admin actions ask first; a new secret's page is not re-posted by a reload ------------------


def _form(html: str, action: str) -> str:
    """The opening tag of the form posting to ``action``."""
    return html.split(f'action="{action}"', 1)[1].split(">", 1)[0]


def test_deleting_rotating_and_deactivating_ask_first_saying_what_is_lost(personas, hooks):
    """They ran on one click: a deleted endpoint's secrets are destroyed, a rotation without the previous
    secret refuses the sender at once, a deactivation gives up the queued deliveries."""
    endpoint, subscription = hooks["endpoint"].pk, hooks["subscription"]
    html = console_client(personas["admin"]).get("/webhooks/").content.decode()
    delete = _form(html, f"/webhooks/endpoints/{endpoint}/delete")
    assert "data-confirm=" in delete and "secrets are destroyed" in delete
    rotate = _form(html, f"/webhooks/endpoints/{endpoint}/rotate")
    # Asked only when the previous secret is not kept (confirm.js reads the box).
    assert 'data-confirm-unless-checked="keep_previous"' in rotate and "stops verifying at once" in rotate
    deactivate = _form(html, f"/webhooks/subscriptions/{subscription.pk}/deactivate")
    assert "data-confirm=" in deactivate and "queued deliveries are given up" in deactivate
    assert '/static/console/confirm.js"' in html  # plain form posts: hx-confirm would not apply


def test_a_created_endpoints_page_becomes_the_list_so_a_reload_does_not_post_again(personas):
    admin = console_client(personas["admin"])
    name = f"vendor-{uuid.uuid4().hex[:6]}"
    created = admin.post("/webhooks/endpoints", {"name": name, "graph": "loan_approval", "gates": "human_review"})
    assert created.status_code == 201
    html = created.content.decode()
    revealed = html.split('id="revealed-secret"', 1)[1].split(">", 1)[0]
    assert 'data-replace-url="/webhooks/"' in revealed  # console.js: history.replaceState
    # Not "Secrets are never shown." right above the one secret shown.
    assert "never shown" not in html and "shown once, when it is created or rotated" in html


# --- an endpoint's name: one rule for every surface; a row from before it still lists and deletes --------


@pytest.mark.parametrize(
    "name",
    ["bad name", "x" * 101, "x" * 65, "a/b", "ca\u0301fe", ""],
    ids=["space", "101 chars", "65 chars", "slash", "non-ascii", "empty"],
)
def test_a_name_the_url_cannot_carry_is_a_form_error_naming_it_and_writes_nothing(personas, name):
    """It was written (endpoint, principal webhook:<name>), then the page failed to render (500), and every
    later GET of /webhooks/ with it; 65 to 101 characters failed on the audit trail's 64-character subject."""
    admin = console_client(personas["admin"])
    audited = AuditEvent.objects.filter(action="webhook.endpoint_created").count()
    endpoints = WebhookEndpoint.objects.count()
    refused = admin.post("/webhooks/endpoints", {"name": name, "graph": "loan_approval", "gates": "human_review"})
    assert refused.status_code == 422
    error = refused.content.decode().split('id="create-error"', 1)[1].split("</p>", 1)[0]
    assert "<code>name</code>" in error
    assert WebhookEndpoint.objects.count() == endpoints
    assert not User.objects.filter(username=f"webhook:{name}").exists()
    assert AuditEvent.objects.filter(action="webhook.endpoint_created").count() == audited
    assert admin.get("/webhooks/").status_code == 200


def test_the_api_and_the_command_line_refuse_the_same_names(personas):
    name = "bad name"
    api = personas["admin"].client.post(
        "/api/webhook-endpoints", {"name": name, "graph": "loan_approval", "gates": ["human_review"]}
    )
    assert api.status_code == 422 and api.json()["error"]["field"] == "name"
    with pytest.raises(CommandError, match="name"):
        call_command("webhook_endpoint_create", name, "--graph", "loan_approval", "--gate", "human_review")
    assert not User.objects.filter(username=f"webhook:{name}").exists()


@pytest.mark.parametrize("legacy", ["legacy name", "legacy/a/b", "", "legacy\nbreak"])
def test_an_endpoint_named_before_names_were_checked_lists_and_can_be_re_scoped_and_deleted(personas, legacy):
    """A row left by the old console path: the page reversed each endpoint's URLs from its name and failed
    (NoReverseMatch, 500) for every admin, with no way to delete it. Its forms name it by id now."""
    WebhookEndpoint.objects.filter(name=legacy).delete()  # one per name (unique), whatever an earlier run left
    endpoint = webhook_endpoint_create(
        actor=None, name=f"legacy-{uuid.uuid4().hex[:6]}", graph="loan_approval", gates=["human_review"]
    )
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(name=legacy)
    admin = console_client(personas["admin"])

    page = admin.get("/webhooks/")
    assert page.status_code == 200
    assert f'action="/webhooks/endpoints/{endpoint.pk}/delete"' in page.content.decode()
    assert console_client(personas["operator"]).get("/webhooks/").status_code == 200

    regated = admin.post(f"/webhooks/endpoints/{endpoint.pk}/gates", {"gates": "human_review"})
    assert regated.status_code == 302
    deleted = admin.post(f"/webhooks/endpoints/{endpoint.pk}/delete")
    assert deleted.status_code == 302
    endpoint.refresh_from_db()
    assert not endpoint.active and endpoint.secrets == [] and not endpoint.principal.is_active
    assert admin.get("/webhooks/").status_code == 200


def test_an_endpoint_id_nobody_may_see_or_that_overflows_is_a_404(personas):
    admin = console_client(personas["admin"])
    assert admin.post(f"/webhooks/endpoints/{2**63}/delete").status_code == 404
    assert admin.post("/webhooks/endpoints/999999999/rotate").status_code == 404
