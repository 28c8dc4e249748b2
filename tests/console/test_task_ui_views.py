"""The task page's claim box and decision panel: who holds or released a claim, and where a superseded task
leads (an outside review's findings; the client-side halves are in test_task_ui_browser.py)."""

from __future__ import annotations

import uuid
from html import unescape

import pytest

from approvals import selectors
from approvals.models import ApprovalTask, TaskStatus
from tests.console.conftest import console_client
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def loan_task():
    return task_make(metadata={"case": f"U-{uuid.uuid4().hex[:6]}"})


def _live(persona, task) -> str:
    return unescape(console_client(persona).get(f"/tasks/{task.pk}/live").content.decode())


def _release_button(html: str) -> str:
    return html.split('id="release-button"', 1)[1].split(">", 1)[0]


def test_the_c_key_releases_only_ones_own_claim(personas, loan_task):
    """An admin's "c" released someone else's claim: one key press, nothing asked."""
    console_client(personas["reviewer"]).post(f"/tasks/{loan_task.pk}/claim")
    theirs = _release_button(_live(personas["admin"], loan_task))
    assert 'data-shortcut="c"' not in theirs
    assert f"hx-confirm=\"Release {personas['reviewer'].username}'s claim?" in theirs
    mine = _release_button(_live(personas["reviewer"], loan_task))
    assert 'data-shortcut="c"' in mine and "hx-confirm" not in mine


def test_the_holder_is_told_who_released_their_claim(personas, loan_task):
    console_client(personas["reviewer"]).post(f"/tasks/{loan_task.pk}/claim")
    console_client(personas["admin"]).post(f"/tasks/{loan_task.pk}/release")
    admin = personas["admin"].username
    holder = _live(personas["reviewer"], loan_task)
    assert "Nobody is working on this task." in holder
    assert f"{admin} released your claim." in holder
    other = _live(personas["reviewer2"], loan_task)
    assert f"Released by {admin} (it was {personas['reviewer'].username}'s)." in other


def test_releasing_ones_own_claim_or_claiming_again_says_nothing_of_it(personas, loan_task):
    reviewer = console_client(personas["reviewer"])
    reviewer.post(f"/tasks/{loan_task.pk}/claim")
    reviewer.post(f"/tasks/{loan_task.pk}/release")
    assert 'id="claim-released-note"' not in _live(personas["reviewer"], loan_task)
    reviewer.post(f"/tasks/{loan_task.pk}/claim")
    console_client(personas["admin"]).post(f"/tasks/{loan_task.pk}/release")
    console_client(personas["reviewer2"]).post(f"/tasks/{loan_task.pk}/claim")
    assert 'id="claim-released-note"' not in _live(personas["reviewer"], loan_task)


def _superseded(task):
    ApprovalTask.objects.filter(pk=task.pk).update(status=TaskStatus.SUPERSEDED)


def test_a_superseded_task_leads_to_the_threads_current_task(personas, loan_task):
    """ "No longer pending… Reload the task", and the reload said the same: a dead end."""
    _superseded(loan_task)
    newer = task_make(title="Review again")
    ApprovalTask.objects.filter(pk=newer.pk).update(thread=loan_task.thread)
    page = unescape(console_client(personas["reviewer"]).get(f"/tasks/{loan_task.pk}/").content.decode())
    link = f'The thread now waits on <a href="/tasks/{newer.pk}/">Review again</a>.'
    assert link in page.split('id="task-next"', 1)[1].split("</p>", 1)[0]
    assert link in _live(personas["reviewer"], loan_task).split('id="task-next-live"', 1)[1]


def test_a_superseded_task_leads_to_its_thread_when_nothing_waits(personas, loan_task):
    _superseded(loan_task)
    gone = task_make(title="Not for you")
    ApprovalTask.objects.filter(pk=gone.pk).update(thread=loan_task.thread, status=TaskStatus.SUPERSEDED)
    page = unescape(console_client(personas["reviewer"]).get(f"/tasks/{loan_task.pk}/").content.decode())
    note = page.split('id="task-next"', 1)[1].split("</p>", 1)[0]
    assert f'<a href="/threads/{loan_task.thread_id}/">Open the thread</a>' in note and "Not for you" not in note


def test_the_current_task_is_one_the_viewer_may_see(personas, loan_task):
    newer = task_make()
    ApprovalTask.objects.filter(pk=newer.pk).update(thread=loan_task.thread)
    assert selectors.task_current_for(user=personas["reviewer"].user, task=loan_task) == newer
    assert selectors.task_current_for(user=personas["outsider"].user, task=loan_task) is None


def _decision_panel(persona, task) -> str:
    page = unescape(console_client(persona).get(f"/tasks/{task.pk}/").content.decode())
    return page.split('id="decision-panel"', 1)[1]


def test_the_decision_form_waits_while_someone_else_holds_the_claim(personas, loan_task):
    """The form stayed enabled and refused the filled-in decision with a 409."""
    console_client(personas["reviewer2"]).post(f"/tasks/{loan_task.pk}/claim")
    panel = _decision_panel(personas["reviewer"], loan_task)
    assert 'id="decision-fields" disabled' in panel
    note = panel.split('id="claim-held-note"', 1)[1].split("</p>", 1)[0]
    assert f"{personas['reviewer2'].username} has claimed this task until" in note and "hidden" not in note
    assert (
        f"{personas['reviewer2'].username} has claimed"
        in _live(personas["reviewer"], loan_task).split('data-held-note="', 1)[1].split('"', 1)[0]
    )
    own = _decision_panel(personas["reviewer2"], loan_task)
    assert 'id="decision-fields" disabled' not in own and 'id="decision-fields"' in own


def test_the_decision_form_is_open_on_an_unclaimed_task(personas, loan_task):
    panel = _decision_panel(personas["reviewer"], loan_task)
    assert 'id="decision-fields" disabled' not in panel and 'id="claim-held-note" hidden' in panel
