"""User administration in real Chromium against daphne: an admin creates a reviewer, grants a graph
and a gate through the pages; the new reviewer sets a password from the one-time link and signs in.
Screenshots: var/screenshots/users.png, user-create.png, user-created.png, user-detail.png."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from approvals import users
from tests.console.test_browser import SCREENSHOTS, _sign_in, browser, server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def test_an_admin_creates_a_reviewer_and_grants_a_graph_and_a_gate(browser, server, personas):  # noqa: F811
    name = f"grace-{uuid.uuid4().hex[:6]}"
    page = _sign_in(browser, server, personas["admin"])
    page.get_by_role("link", name="Users").click()
    expect(page.locator("h1")).to_have_text("Users")
    expect(page.locator(f'tr[data-user="{personas["reviewer"].username}"]')).to_contain_text("reviewer")
    page.screenshot(path=str(SCREENSHOTS / "users.png"), full_page=True)

    page.get_by_role("link", name="New user").click()
    page.get_by_label("Username").fill(name)
    page.get_by_label("E-mail").fill(f"{name}@example.org")
    page.locator('input[name="roles"][value="reviewer"]').check()
    page.locator('input[name="assign"][value="loan_approval"]').check()
    page.screenshot(path=str(SCREENSHOTS / "user-create.png"), full_page=True)
    page.get_by_role("button", name="Create user").click()
    expect(page.locator("h1")).to_contain_text(name)
    link = page.locator("#set-password-url").input_value()
    assert "/accounts/set-password/" in link
    page.screenshot(path=str(SCREENSHOTS / "user-created.png"), full_page=True)
    # A refresh reads the new user's page: it does not post the form again ("username taken"), and
    # the one-time link is gone from the screen.
    page.reload()
    expect(page.locator("h1")).to_contain_text(name)
    expect(page.locator("#set-password-url")).to_have_count(0)
    assert page.url.rstrip("/").endswith(f"/users/{User.objects.get(username=name).pk}")

    gate = page.locator('#assignments input[name="assign"][value="kyc_onboarding:compliance_review"]')
    gate.check()
    page.get_by_role("button", name="Save graphs and gates").click()
    expect(page.locator("#user-panel")).to_contain_text("Graphs and gates saved")  # swapped in by htmx
    kyc = page.locator('#effective tr[data-graph="kyc_onboarding"]')
    expect(kyc).to_contain_text("compliance_review")
    expect(kyc).not_to_contain_text("identity_check")
    page.screenshot(path=str(SCREENSHOTS / "user-detail.png"), full_page=True)
    page.context.close()

    user = User.objects.get(username=name)
    assert users.user_roles(user) == ["reviewer"]
    assert [str(a) for a in users.user_assignments(user)] == ["kyc_onboarding:compliance_review", "loan_approval"]

    # The new reviewer chooses a password from the link and lands in their inbox.
    context = browser.new_context()
    newcomer = context.new_page()
    newcomer.goto(link)
    newcomer.get_by_label("New password").fill("correct-horse-battery-9")
    newcomer.get_by_label("Repeat it").fill("correct-horse-battery-9")
    newcomer.get_by_role("button", name="Set password").click()
    expect(newcomer.locator("body")).to_contain_text("Your password is set")
    newcomer.get_by_label("Username").fill(name)
    newcomer.get_by_label("Password").fill("correct-horse-battery-9")
    newcomer.get_by_role("button", name="Sign in").click()
    expect(newcomer.locator("header .who")).to_contain_text(name)
    expect(newcomer.locator("header nav")).not_to_contain_text("Users")
    context.close()
