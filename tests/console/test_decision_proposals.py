"""The task page's decision form is bound to the proposal it showed, and its quorum counts as the service does.

Tasks are opened without a worker (``tests.factories``); proposals are made through the API.
"""

from __future__ import annotations

import re

import pytest

from approvals.models import Decision
from tests.conftest import api_decide
from tests.console.conftest import console_client, console_decide
from tests.factories import loan_gate, task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _rendered_digest(html: str) -> str:
    found = re.search(r'name="evidence_digest" value="([0-9a-f]*)"', html)
    assert found, "the decision form carries no evidence digest"
    return found.group(1)


def test_the_form_posts_the_digest_it_rendered_and_a_new_proposal_refuses_it(personas):
    appr = personas["approver"]
    task = task_make(payload=loan_gate(20000, required_approvals=2))
    assert api_decide(personas["reviewer"], task, "edit", reason="cap", edits={"amount": 15000}).status_code == 201
    browser = console_client(appr)
    rendered = _rendered_digest(browser.get(f"/tasks/{task.pk}/").content.decode())
    assert rendered == appr.client.get(f"/api/tasks/{task.pk}").json()["evidence_digest"]

    raised = api_decide(personas["reviewer2"], task, "edit", reason="raise", edits={"amount": 90000})
    assert raised.status_code == 201, raised.content
    refused = console_decide(browser, task, decision="approve", reason="ok with 15k", evidence_digest=rendered)
    assert refused.status_code == 409, refused.content
    html = refused.content.decode()
    assert "A new proposal was made on this task since you opened it" in html
    assert not Decision.objects.filter(task=task, actor=appr.user).exists()
    # The panel it re-renders still carries what the page showed: submitting it again is refused again.
    assert _rendered_digest(html) == rendered
    again = console_decide(browser, task, decision="approve", reason="ok", evidence_digest=_rendered_digest(html))
    assert again.status_code == 409

    # Without JavaScript: back to the task page, which now shows the task as it is.
    plain = console_decide(browser, task, htmx=False, decision="approve", reason="ok", evidence_digest=rendered)
    assert plain.status_code == 303
    page = browser.get(plain["Location"]).content.decode()
    assert "A new proposal was made on this task since you opened it" in page
    fresh = _rendered_digest(page)
    assert fresh != rendered
    signed = console_decide(browser, task, decision="approve", reason="90k read", evidence_digest=fresh)
    assert signed.status_code == 201, signed.content
    assert Decision.objects.get(task=task, actor=appr.user).meaning == "approved"


def test_the_page_counts_only_approvals_of_the_current_proposal(personas):
    appr = personas["approver"]
    task = task_make(payload=loan_gate(20000, required_approvals=2))
    assert api_decide(appr, task, reason="fine").status_code == 201
    html = console_client(appr).get(f"/tasks/{task.pk}/").content.decode()
    assert "1 of 2 approvals" in html and 'id="signed-note"' in html

    assert api_decide(personas["reviewer2"], task, "edit", reason="raise", edits={"amount": 90000}).status_code == 201
    html = console_client(appr).get(f"/tasks/{task.pk}/").content.decode()
    assert "0 of 2 approvals" in html
    assert "superseded" in html.split('id="quorum-status"')[1]
    # The summary line names it as superseded too: it read "… (approved)" beside a count that left it out.
    summary = html.split('id="quorum-status"')[1].split("</p>")[0]
    assert f"{appr.user.get_username()} (approved, superseded)" in summary
    # Their approval was of 20,000: they are offered the form to sign the new proposal.
    assert 'id="signed-note"' not in html and 'id="decide-button"' in html


def test_a_proposal_reads_as_one_not_as_an_approval(personas):
    """Under separation of duties an edit approves nothing (signed "reviewed"), yet every page called it
    "Edit and approve": an auditor read that the proposer had approved (outside re-test)."""
    task = task_make(payload=loan_gate(20000, required_approvals=2))
    made = api_decide(personas["reviewer"], task, "edit", reason="cap", edits={"amount": 15000})
    assert made.status_code == 201, made.content
    assert made.json()["meaning"] == "reviewed"
    auditor = console_client(personas["auditor"])
    detail = auditor.get(f"/decisions/{made.json()['id']}/").content.decode()
    assert "<h1>Proposed an edit at" in detail and "Edit and approve" not in detail
    listed = auditor.get("/decisions/", {"graph": "loan_approval"}).content.decode()
    assert "Proposed an edit" in listed
    task_page = console_client(personas["approver"]).get(f"/tasks/{task.pk}/").content.decode()
    assert "Proposed an edit" in task_page.split('id="quorum-status"')[1]
