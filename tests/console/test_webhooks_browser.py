"""Webhook and user administration in real Chromium: a live swap raises no Content-Security-Policy error.

Reuses test_browser's daphne server and browser; screenshots land in var/screenshots/.
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

from approvals import users
from tests.console.test_browser import _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.console.test_layout_browser import _problems

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


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
