"""Confirmations, claims and focus on the task and thread pages, in Chromium (an outside review's findings)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from playwright.sync_api import expect

from runtime.models import Branch, Run
from tests.conftest import loan_input, pending_tasks, thread_start, wait_for
from tests.console.test_browser import WAIT_MS, _live, _sign_in, browser, server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _answer(page: Any, accept: bool, asked: list[str]) -> None:
    def on_dialog(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", on_dialog)


def test_replay_asks_first_and_a_dismissed_question_starts_no_run(browser, server, personas):  # noqa: F811
    """ "Replay from here" re-ran the payment at once: a second real payment, nothing asked."""
    operator = personas["operator"]
    thread = thread_start(operator, "loan_approval", loan_input(amount=20000), case=f"R-{uuid.uuid4().hex[:6]}")
    pending_tasks(operator, thread["id"])
    runs_before = Run.objects.filter(thread_id=thread["id"]).count()
    page = _sign_in(browser, server, operator, f"/threads/{thread['id']}/")
    _live(page)
    page.locator("#replay-reason").fill("try again")
    asked: list[str] = []
    _answer(page, False, asked)
    page.get_by_role("button", name="Replay from here").click()
    wait_for(lambda: asked, timeout=10, what="the confirmation")
    assert asked[0].startswith("Replay from this checkpoint?")
    page.wait_for_timeout(500)
    assert not Branch.objects.filter(thread_id=thread["id"]).exists()
    assert Run.objects.filter(thread_id=thread["id"]).count() == runs_before
    expect(page.locator("#replay-reason")).to_have_value("try again")
    page.context.close()
