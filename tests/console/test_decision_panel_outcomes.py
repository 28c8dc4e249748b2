"""Which inputs of the decision panel a decision uses: a rejection (or a response) carries no edits.

The domain refuses state edits and action arguments with a rejection (``approvals.services``: "state edits go
with an edit or approve decision"), so the console does not judge or send what is left in the edit inputs: a
cleared Amount refused a Reject over a field it does not use ("enter a whole number"), and hid the rejection's
own missing reason. An approval still judges and sends its edits.
"""

from __future__ import annotations

import re
import uuid
from html import unescape

import pytest

from approvals.models import Decision
from tests.console.conftest import console_client, console_decide
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def loan_task():
    return task_make(metadata={"case": f"R-{uuid.uuid4().hex[:6]}"})


def _field_error(html: str, input_id: str) -> str:
    field = html.split(f'id="{input_id}"', 1)[1].split("</div>", 1)[0]
    found = re.search(r'class="field-error"[^>]*>([^<]*)<', field)
    return found.group(1) if found else ""


def test_a_reject_with_a_cleared_edit_field_is_recorded_without_edits(personas, loan_task):
    response = console_decide(
        console_client(personas["reviewer"]),
        loan_task,
        decision="reject",
        reason="income unverified",
        **{"edits.amount": "", "edits.term_months": "abc"},
    )
    assert response.status_code == 201, unescape(response.content.decode())[:3000]
    decision = Decision.objects.get(task=loan_task)
    assert (decision.outcome, decision.state_patch) == ("reject", None)


def test_a_reject_without_a_reason_says_so_and_not_what_the_edit_field_holds(personas, loan_task):
    response = console_decide(
        console_client(personas["reviewer"]), loan_task, decision="reject", reason="", **{"edits.amount": ""}
    )
    assert response.status_code == 422
    html = unescape(response.content.decode())
    assert "a reason is required to reject" in _field_error(html, "f-reason")
    assert _field_error(html, "f-edits-amount") == ""
    assert re.search(r'id="f-edits-amount"[^>]*value=""', html)  # what was typed is kept, unjudged
    assert "(a rejection does not use them)" in html  # and the panel says so beside the edits
    assert not Decision.objects.filter(task=loan_task).exists()


def test_an_approval_still_judges_its_edits(personas, loan_task):
    response = console_decide(
        console_client(personas["reviewer"]), loan_task, decision="approve", reason="ok", **{"edits.amount": ""}
    )
    assert response.status_code == 422
    assert "whole number" in _field_error(unescape(response.content.decode()), "f-edits-amount")
    assert not Decision.objects.filter(task=loan_task).exists()
