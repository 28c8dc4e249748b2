"""Webhook and user administration in real Chromium: what cannot be undone asks first (and a dismissed
question posts nothing), a new secret's page does not post again on reload, endpoint names are shown as
typed, and a live swap raises no Content-Security-Policy error.

Reuses test_browser's daphne server and browser; screenshots land in var/screenshots/.
"""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Dialog, Page, expect

from approvals import users
from approvals.inbound.webhooks import webhook_endpoint_create
from approvals.models import WebhookEndpoint, WebhookSubscription
from approvals.outbound import outbox, subscriptions
from tests.console.test_browser import SCREENSHOTS, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.console.test_layout_browser import _problems

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def _answering(page: Page, accept: bool) -> list[str]:
    """Answer every confirmation from now on with ``accept``; the questions asked, in order."""
    asked: list[str] = []

    def answer(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.on("dialog", answer)
    return asked


def test_deleting_and_rotating_without_the_previous_secret_ask_first(browser, server, personas):  # noqa: F811
    name = f"Vendor-KYC-{uuid.uuid4().hex[:6]}"  # a case-sensitive URL slug
    endpoint = webhook_endpoint_create(actor=None, name=name, graph="kyc_onboarding", gates=["identity_check"])
    page = _sign_in(browser, server, personas["admin"], "/webhooks/")
    article = page.locator(f'article[id="endpoint-{name}"]')
    heading = article.locator("h3")
    expect(heading).to_contain_text(name)
    assert heading.evaluate("h => getComputedStyle(h).textTransform") == "none"  # shown as typed
    assert name in heading.inner_text()

    # Keeping the previous secret loses nothing: no question.
    asked = _answering(page, accept=False)
    article.get_by_role("button", name="Rotate secret").click()
    expect(page.locator("#revealed-secret")).to_contain_text("New secret for")
    assert asked == []
    assert len(WebhookEndpoint.objects.get(pk=endpoint.pk).secrets) == 2
    expect(page).to_have_url(re.compile(r"/webhooks/$"))  # a reload reads the list, not the rotation again

    # Not keeping it: asked, and a dismissed question rotates nothing.
    article.get_by_label("keep the previous secret").uncheck()
    article.get_by_role("button", name="Rotate secret").click()
    article.get_by_role("button", name="Delete endpoint").click()
    expect(page.locator("#revealed-secret")).to_be_visible()  # still the page it was
    assert len(asked) == 2 and "stops verifying at once" in asked[0] and "secrets are destroyed" in asked[1]
    stored = WebhookEndpoint.objects.get(pk=endpoint.pk)
    assert len(stored.secrets) == 2 and stored.active

    page.context.close()

    page = _sign_in(browser, server, personas["admin"], "/webhooks/")
    accepted = _answering(page, accept=True)
    page.locator(f'article[id="endpoint-{name}"]').get_by_role("button", name="Delete endpoint").click()
    expect(page.locator(".messages")).to_contain_text(f"Endpoint {name} deleted")
    assert len(accepted) == 1 and not WebhookEndpoint.objects.get(pk=endpoint.pk).active
    page.context.close()


def test_deactivating_a_subscription_asks_first(browser, server, personas):  # noqa: F811
    url = f"http://127.0.0.1:9/{uuid.uuid4().hex[:8]}"
    subscription = subscriptions.subscription_create(
        actor=None, url=url, graph="kyc_onboarding", event_types=[outbox.EVENT_TYPES[0]]
    )
    try:
        page = _sign_in(browser, server, personas["operator"], "/webhooks/")
        asked = _answering(page, accept=False)
        button = page.get_by_role("button", name=f"Deactivate the subscription to {url}")
        button.click()
        expect(button).to_be_visible()
        assert len(asked) == 1 and "queued deliveries are given up" in asked[0]
        assert WebhookSubscription.objects.get(pk=subscription.pk).active
        page.context.close()
    finally:
        WebhookSubscription.objects.filter(pk=subscription.pk).update(active=False)


def test_a_created_endpoints_secret_page_reloads_as_the_list(browser, server, personas):  # noqa: F811
    name = f"vendor-{uuid.uuid4().hex[:6]}"
    page = _sign_in(browser, server, personas["admin"], "/webhooks/")
    page.locator("#e-name").fill(name)
    page.locator("#e-graph").select_option("kyc_onboarding")
    page.locator("#e-gates").fill("identity_check")
    page.get_by_role("button", name="Create endpoint").click()
    secret = page.locator("#revealed-secret code.secret")
    expect(secret).to_have_text(re.compile(r"^whsec_"))
    expect(page).to_have_url(re.compile(r"/webhooks/$"))
    page.screenshot(path=str(SCREENSHOTS / "webhook-endpoint-created.png"), full_page=True)
    response = page.reload()
    assert response is not None and response.status == 200  # not a second POST: "… named … exists" (422)
    expect(page.locator("#revealed-secret")).to_have_count(0)
    expect(page.locator("#create-error")).to_have_count(0)
    expect(page.locator(f'article[id="endpoint-{name}"]')).to_be_visible()
    page.context.close()


def test_a_user_resetting_otp_devices_is_asked_first(browser, server, personas):  # noqa: F811
    subject = users.user_create(actor=users.CLI, username=f"otp-{uuid.uuid4().hex[:6]}", roles=["reviewer"])
    page = _sign_in(browser, server, personas["admin"], f"/users/{subject.pk}/")
    asked = _answering(page, accept=True)
    page.get_by_role("button", name="Reset OTP devices").click()
    expect(page.locator("#user-panel")).to_contain_text("OTP reset")
    assert len(asked) == 1 and "stop working at once" in asked[0]
    page.context.close()


def test_a_swap_keeps_no_inline_style_so_the_csp_refuses_nothing(browser, server, personas):  # noqa: F811
    """htmx settles "style" by default: it copied a resized field's inline style onto the swapped-in element,
    and the CSP (style-src 'self') refused it, an error in the console after every swap."""
    subject = users.user_create(actor=users.CLI, username=f"csp-{uuid.uuid4().hex[:6]}", roles=["reviewer"])
    page = _sign_in(browser, server, personas["admin"], f"/users/{subject.pk}/")
    problems = _problems(page)
    # As the user's resize handle does: through the CSSOM, which the CSP allows.
    page.locator("#deact-reason").evaluate("el => { el.style.height = '90px'; }")
    assert page.locator("#deact-reason").get_attribute("style")
    page.get_by_role("button", name="Save roles").click()
    expect(page.locator("#user-panel")).to_contain_text("Roles saved")
    page.wait_for_timeout(300)  # past htmx's settle delay, when it restores the settled attributes
    assert problems == []
    page.context.close()
