"""Columns added by this release's migrations have defaults in the database, not only in Python.

``make bench`` found it: bench/console_scale.py inserts tasks with SQL, and a NOT NULL column added with a
Python default only (``ApprovalTask.escalated_to``) refused them. A process still running the code before
the migration (a rolling deploy: migrate, then restart) inserts rows the same way, without the column.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from approvals.models import ApprovalTask, CommentVersion
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def test_a_task_inserted_without_the_new_column_gets_its_default():
    thread = task_make().thread
    task_id = uuid.uuid4()
    with connection.cursor() as cursor:  # the columns the code before migration 0036 wrote
        cursor.execute(
            "INSERT INTO approvals_approvaltask (id, thread_id, graph, node, kind, interrupt_id, checkpoint_id, "
            "checkpoint_ns, payload, payload_digest, title, status, required_approvals, created_at, "
            "correlation_key, escalation_reason) VALUES (%s, %s, 'loan_approval', 'human_review', 'interrupt', "
            "%s, 'cp', '', '{}'::jsonb, 'd', 'old code', 'cancelled', 1, now(), '', '')",
            [task_id, thread.pk, f"old-{task_id}"],
        )
    assert ApprovalTask.objects.get(pk=task_id).escalated_to == ""


def test_a_comment_version_inserted_without_the_new_column_gets_its_default():
    from approvals import comments
    from tests.approvals.guards import user_make

    author = user_make("approver", "*")
    comment = comments.comment_post(actor=author, task=task_make(), body="first")
    with connection.cursor() as cursor:  # the columns the code before migration 0037 wrote
        cursor.execute(
            "INSERT INTO approvals_commentversion (comment_id, version, body, mentions, author_saw_sensitive, "
            "created_at) VALUES (%s, 2, 'old code', '[]'::jsonb, true, now())",
            [comment.pk],
        )
    assert CommentVersion.objects.get(comment=comment, version=2).quoted_threads == []
