"""Conversation in real Chromium against daphne: two signed-in users talk about a task with a redacted value.

An approver (may see sensitive fields) asks a reviewer (may not) a question
that quotes the applicant's date of birth and mentions the reviewer. Without
any reload the reviewer's task page shows the question with the value masked
and "waiting for answer", and their inbox row says "waiting for answer" and
"mentioned"; the reviewer answers and the badge goes away on every page.
Screenshots: var/screenshots/comments-*.png.
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Page, expect

from approvals.models import Comment, CommentKind
from approvals.redaction import TEXT_MASK
from tests.conftest import scaled
from tests.console.test_browser import SCREENSHOTS, _live, _sign_in, browser, server  # noqa: F401  (fixtures)
from tests.factories import task_make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

LIVE_MS = int(scaled(15) * 1000)  # a comment crosses the database, Redis and a websocket render


def _conversation(page: Page) -> object:
    return page.locator("#comments-list")


def test_two_reviewers_converse_live_and_the_one_without_permission_sees_the_value_masked(
    browser,  # noqa: F811
    server,  # noqa: F811
    personas,
):
    approver, reviewer = personas["approver"], personas["reviewer"]
    case = f"C-{uuid.uuid4().hex[:6]}"
    dob = f"1984-03-{uuid.uuid4().int % 28 + 1:02d}x{uuid.uuid4().hex[:4]}"  # unique: any hit is this test's
    task = task_make(
        graph="kyc_onboarding",
        node="compliance_review",
        metadata={"case": case},
        payload={
            "title": f"KYC {case}",
            "summary": "Check identity",
            "applicant": {"name": "Ada", "date_of_birth": dob},
        },
    )
    asker = _sign_in(browser, server, approver, f"/tasks/{task.pk}/")
    _live(asker)
    answerer = _sign_in(browser, server, reviewer, f"/tasks/{task.pk}/")
    _live(answerer)
    inbox = answerer.context.new_page()
    inbox.goto(f"{server}/?q={case}")
    _live(inbox)
    row = inbox.locator(f'#inbox-results tr[data-task-id="{task.pk}"]')
    expect(row).to_have_count(1)
    expect(row).not_to_contain_text("waiting for answer")

    # The approver asks; the payload shows them the value, so they quote it.
    expect(asker.locator("body")).to_contain_text(dob)
    asker.get_by_label("Comment").fill(f"@{reviewer.username} is the date of birth {dob} on the passport?")
    asker.get_by_label("Kind").select_option("question")
    asker.get_by_role("button", name="Post").click()
    mine = asker.locator("#comments-list .comment-question")
    expect(mine).to_contain_text(dob, timeout=LIVE_MS)
    expect(mine).to_contain_text(f"@{reviewer.username}")
    expect(asker.get_by_label("Comment")).to_have_value("")  # a fresh form after posting
    asker.screenshot(path=str(SCREENSHOTS / "comments-asked.png"), full_page=True)

    # The reviewer's page updates without a reload: the question arrives masked, waiting for an answer.
    theirs = answerer.locator("#comments-list .comment-question")
    expect(theirs).to_contain_text(f"is the date of birth {TEXT_MASK} on the passport?", timeout=LIVE_MS)
    expect(answerer.locator("#task-waiting")).to_have_text("waiting for answer", timeout=LIVE_MS)
    expect(answerer.locator("#comments-waiting")).to_be_visible()
    assert dob not in answerer.content()
    answerer.screenshot(path=str(SCREENSHOTS / "comments-masked.png"), full_page=True)
    # ... and so does their inbox: the row waits for an answer and says they were mentioned.
    expect(row).to_contain_text("waiting for answer", timeout=LIVE_MS)
    expect(row).to_contain_text("mentioned")
    inbox.screenshot(path=str(SCREENSHOTS / "comments-inbox.png"), full_page=True)

    # The reviewer answers the question.
    question = Comment.objects.get(task=task, kind=CommentKind.QUESTION)
    answerer.get_by_label("Comment").fill("Yes, it matches the passport.")
    answerer.get_by_label("Answers").select_option(str(question.pk))
    answerer.get_by_role("button", name="Post").click()
    expect(answerer.locator("#comments-list .comment-answer")).to_contain_text("matches the passport", timeout=LIVE_MS)
    expect(answerer.locator("#task-waiting")).to_have_count(0, timeout=LIVE_MS)

    # Live on the asker's page too: the answer arrives and the question is answered.
    expect(asker.locator("#comments-list .comment-answer")).to_contain_text("matches the passport", timeout=LIVE_MS)
    expect(asker.locator("#comments-list .comment-question")).to_contain_text("answered")
    expect(asker.locator("#task-waiting")).to_have_count(0)
    expect(row).not_to_contain_text("waiting for answer", timeout=LIVE_MS)
    asker.screenshot(path=str(SCREENSHOTS / "comments-answered.png"), full_page=True)
    assert dob not in answerer.content() and dob not in inbox.content()
    assert Comment.objects.filter(task=task, kind=CommentKind.ANSWER, reply_to=question).count() == 1
    asker.context.close()
    answerer.context.close()
