"""A task on a fork or replay branch says so before anyone decides: on its page and as a badge in the inbox.

A reviewer approved a forked loan that looked like any other task, and it paid a second time (20000, then
15000): a branch's effects are new effects (``runtime.branches.scoped_effect_key``).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.http import QueryDict
from django.template.loader import render_to_string

from console import page_context
from runtime.models import Branch, BranchKind, Effect, EffectStatus
from tests.console.conftest import console_client
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _forked_task(personas, case: str):
    """A task opened on a fork of a loan whose original line already paid 20000."""
    task = task_make(metadata={"case": case})
    branch = Branch.objects.create(
        thread=task.thread,
        kind=BranchKind.FORK,
        from_checkpoint_id=uuid.uuid4().hex,
        update_keys=["amount"],
        reason="applicant asked for 15000 instead",
        created_by=personas["operator"].user,
    )
    Branch.objects.filter(pk=branch.pk).update(created_at=task.created_at - timedelta(seconds=1))
    Effect.objects.create(
        key=f"gh:{task.thread_id}:disburse",
        name="disburse",
        thread=task.thread,
        status=EffectStatus.DONE,
        result={"amount": 20000, "transfer": "T-ORIGINAL"},
    )
    Effect.objects.create(
        key=f"gh:{task.thread_id}:notify@{branch.pk}",  # the branch's own: not something done elsewhere
        name="notify",
        thread=task.thread,
        status=EffectStatus.DONE,
        result={"sent": "T-BRANCH"},
    )
    return task, branch


def test_a_task_on_a_fork_says_who_forked_why_and_what_the_original_line_did(personas):
    task, branch = _forked_task(personas, f"W-{uuid.uuid4().hex[:6]}")
    html = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    card = html.split('id="what-if"')[1].split("</section>")[0]
    assert "what-if: fork" in card
    assert personas["operator"].username in card and "applicant asked for 15000 instead" in card
    assert branch.created_at.strftime("%Y-%m-%d") in card and "<code>amount</code>" in card
    assert "disburse" in card and "20000" in card and "T-ORIGINAL" in card and "the original line" in card
    assert "T-BRANCH" not in card
    # Said where the decision is taken, too.
    assert 'id="what-if-decide"' in html.split('id="decision-panel"')[1]


def test_a_task_on_the_original_line_has_no_what_if_warning(personas):
    task = task_make()
    html = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    assert 'id="what-if"' not in html and "what-if" not in html


def test_a_task_opened_before_the_fork_is_on_the_original_line(personas):
    task = task_make()
    Branch.objects.create(
        thread=task.thread, kind=BranchKind.REPLAY, from_checkpoint_id=task.checkpoint_id, reason="re-check"
    )
    html = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    assert 'id="what-if"' not in html


def test_the_inbox_badges_a_task_on_a_branch_in_the_list_and_in_a_pushed_row(personas):
    case = f"W-{uuid.uuid4().hex[:6]}"
    forked, _ = _forked_task(personas, case)
    plain = task_make(metadata={"case": case})
    html = console_client(personas["reviewer"]).get("/", {"q": case}).content.decode()
    rows = {t.pk: html.split(f'data-task-id="{t.pk}"')[1].split("</tr>")[0] for t in (forked, plain)}
    assert 'data-branch="fork"' in rows[forked.pk] and "what-if: fork" in rows[forked.pk]
    assert "what-if" not in rows[plain.pk]

    ctx = page_context.inbox_row_context(personas["reviewer"].user, QueryDict(f"q={case}"), forked.pk)
    assert ctx is not None
    assert "what-if: fork" in render_to_string("console/partials/inbox_row_push.html", ctx)
