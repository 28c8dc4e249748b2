"""Conversation on tasks and threads: posting, versions, mentions, questions, permissions, append-only."""

from __future__ import annotations

import uuid

import pytest
from django.db import DatabaseError, connection, transaction

from approvals import comments
from approvals.errors import Forbidden, InvalidInput, NotFound
from approvals.models import AuditEvent, Comment, CommentKind, CommentVersion
from tests.conftest import scaled
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _kyc_task():  # type: ignore[no-untyped-def]
    return task_make(graph="kyc_onboarding", node="compliance_review", payload={"title": "KYC", "applicant": {}})


def test_a_reviewer_comments_on_a_task_and_it_is_audited(personas):
    task = task_make()
    reviewer = personas["reviewer"].user
    comment = comments.comment_post(actor=reviewer, task=task, body="  Income looks thin.\r\nCheck payslips.  ")
    [version] = CommentVersion.objects.filter(comment=comment)
    assert (version.version, version.body) == (1, "Income looks thin.\nCheck payslips.")
    assert (comment.thread_id, comment.graph, comment.kind) == (task.thread_id, task.graph, CommentKind.COMMENT)
    event = AuditEvent.objects.get(action="comment.posted", subject_id=str(comment.pk))
    assert event.actor_id == reviewer.pk and event.thread_id == task.thread_id and event.graph == task.graph
    assert event.details["body"] == version.body and event.details["task"] == str(task.pk)
    [shown] = comments.comments_for(user=personas["auditor"].user, task=task)
    assert (shown.author, shown.body, shown.version, shown.edited_at) == (reviewer.username, version.body, 1, None)


def test_an_edit_is_a_new_version_and_the_old_one_stays(personas):
    task = task_make()
    author = personas["reviewer"].user
    comment = comments.comment_post(actor=author, task=task, body="first words")
    comments.comment_edit(actor=author, comment=comment, body="second words")
    assert list(CommentVersion.objects.filter(comment=comment).order_by("version").values_list("body", flat=True)) == [
        "first words",
        "second words",
    ]
    [shown] = comments.comments_for(user=author, task=task)
    assert shown.body == "second words" and shown.version == 2 and shown.edited_at is not None
    assert [v.body for v in shown.history] == ["first words", "second words"]
    event = AuditEvent.objects.get(action="comment.edited", subject_id=str(comment.pk))
    assert (event.details["version"], event.details["body"]) == (2, "second words")


def test_only_the_author_edits_and_an_unchanged_text_is_refused(personas):
    task = task_make()
    comment = comments.comment_post(actor=personas["reviewer"].user, task=task, body="mine")
    with pytest.raises(Forbidden):
        comments.comment_edit(actor=personas["reviewer2"].user, comment=comment, body="hijacked")
    with pytest.raises(InvalidInput) as refused:
        comments.comment_edit(actor=personas["reviewer"].user, comment=comment, body=" mine ")
    assert refused.value.field == "body"
    assert CommentVersion.objects.filter(comment=comment).count() == 1


@pytest.mark.parametrize(
    "persona,error",
    [("auditor", Forbidden), ("outsider", NotFound), ("loan_reviewer", NotFound)],
)
def test_who_may_not_post_is_refused_and_nothing_is_written(personas, persona, error):
    task = _kyc_task()
    with pytest.raises(error):
        comments.comment_post(actor=personas[persona].user, task=task, body="let me in")
    assert not Comment.objects.filter(task=task).exists()
    assert not AuditEvent.objects.filter(action="comment.posted", thread_id=task.thread_id).exists()


@pytest.mark.parametrize("persona", ["reviewer", "approver", "operator", "admin"])
def test_reviewers_operators_and_admins_post(personas, persona):
    task = _kyc_task()
    comments.comment_post(actor=personas[persona].user, task=task, body=f"{persona} here")
    assert Comment.objects.filter(task=task, author=personas[persona].user).count() == 1


@pytest.mark.parametrize(
    "body,message",
    [
        ("", "write something"),
        ("   \n  ", "write something"),
        ("x" * (comments.BODY_MAX_CHARS + 1), "at most"),
        ("bell \x07 rings", "control characters"),
        ("nul \x00 byte", "control characters"),
    ],
    ids=["empty", "blank", "too-long", "control", "nul"],
)
def test_bad_text_is_refused_naming_the_field(personas, body, message):
    task = task_make()
    with pytest.raises(InvalidInput, match=message) as refused:
        comments.comment_post(actor=personas["reviewer"].user, task=task, body=body)
    assert refused.value.field == "body"
    assert not Comment.objects.filter(task=task).exists()


def test_mentions_resolve_to_users_who_may_see_the_task_others_stay_text(personas):
    task = _kyc_task()
    approver, loan_only = personas["approver"], personas["loan_reviewer"]
    body = f"@{approver.username}, please look. cc @{loan_only.username} and @nobody-{uuid.uuid4().hex[:6]}."
    comment = comments.comment_post(actor=personas["reviewer"].user, task=task, body=body)
    [shown] = comments.comments_for(user=personas["reviewer"].user, task=task)
    assert shown.mentions == [approver.username]  # loan_reviewer may not see a kyc task
    assert shown.body == body  # unresolved names are left as they were written
    event = AuditEvent.objects.get(action="comment.posted", subject_id=str(comment.pk))
    assert event.details["mentions"] == [approver.username]
    assert comments.tasks_mentioning(user=approver.user, task_ids=[task.pk]) == {task.pk}
    assert comments.tasks_mentioning(user=personas["reviewer2"].user, task_ids=[task.pk]) == set()


def test_an_edit_that_drops_a_mention_drops_the_notification(personas):
    task = task_make()
    mentioned = personas["reviewer2"]
    comment = comments.comment_post(actor=personas["reviewer"].user, task=task, body=f"@{mentioned.username} ?")
    assert comments.tasks_mentioning(user=mentioned.user, task_ids=[task.pk]) == {task.pk}
    comments.comment_edit(actor=personas["reviewer"].user, comment=comment, body="never mind")
    assert comments.tasks_mentioning(user=mentioned.user, task_ids=[task.pk]) == set()


def test_a_question_waits_until_it_is_answered(personas):
    task = task_make()
    other = task_make()
    question = comments.comment_post(
        actor=personas["reviewer"].user, task=task, body="Is the payslip genuine?", kind="question"
    )
    assert comments.task_waiting_for_answer(task=task)
    assert comments.tasks_waiting_for_answer(task_ids=[task.pk, other.pk]) == {task.pk}
    reader = personas["reviewer2"].user
    assert comments.inbox_conversation(user=reader, tasks=[task, other]).waiting == {task.pk}  # the inbox's view
    comments.comment_post(actor=personas["reviewer2"].user, task=task, body="A remark, not an answer")
    assert comments.task_waiting_for_answer(task=task)
    comments.comment_post(
        actor=personas["reviewer2"].user, task=task, body="Yes, verified.", kind="answer", reply_to=question
    )
    assert not comments.task_waiting_for_answer(task=task)
    assert comments.inbox_conversation(user=reader, tasks=[task, other]).waiting == set()
    shown = comments.comments_for(user=personas["reviewer"].user, task=task)
    assert [(c.kind, c.waiting) for c in shown] == [("question", False), ("comment", False), ("answer", False)]


def test_an_answer_must_reply_to_a_question_of_the_same_task(personas):
    task, elsewhere = task_make(), task_make()
    actor = personas["reviewer"].user
    remark = comments.comment_post(actor=actor, task=task, body="a remark")
    foreign = comments.comment_post(actor=actor, task=elsewhere, body="elsewhere?", kind="question")
    with pytest.raises(InvalidInput) as no_reply:
        comments.comment_post(actor=actor, task=task, body="answer to nothing", kind="answer")
    with pytest.raises(InvalidInput) as to_remark:
        comments.comment_post(actor=actor, task=task, body="answer to a remark", kind="answer", reply_to=remark)
    with pytest.raises(InvalidInput) as cross:
        comments.comment_post(actor=actor, task=task, body="answer across", kind="answer", reply_to=foreign)
    with pytest.raises(InvalidInput) as bad_kind:
        comments.comment_post(actor=actor, task=task, body="?", kind="shout")
    assert [e.value.field for e in (no_reply, to_remark, cross, bad_kind)] == [
        "reply_to",
        "reply_to",
        "reply_to",
        "kind",
    ]
    assert Comment.objects.filter(task=task).count() == 1


def test_a_thread_conversation_includes_its_tasks_comments(personas):
    task = task_make()
    actor = personas["operator"].user
    comments.comment_post(actor=actor, thread=task.thread, body="on the thread")
    comments.comment_post(actor=actor, task=task, body="on the task")
    on_thread = comments.comments_for(user=personas["reviewer"].user, thread=task.thread)
    assert [(c.body, c.task_id) for c in on_thread] == [("on the thread", None), ("on the task", task.pk)]
    assert [c.body for c in comments.comments_for(user=actor, task=task)] == ["on the task"]
    with pytest.raises(NotFound):
        comments.comments_for(user=personas["outsider"].user, thread=task.thread)


def test_a_comment_is_not_found_by_who_may_not_see_it(personas):
    task = _kyc_task()
    comment = comments.comment_post(actor=personas["reviewer"].user, task=task, body="kyc only")
    with pytest.raises(NotFound) as hidden:
        comments.comment_get_for(personas["loan_reviewer"].user, comment.pk)
    assert hidden.value.field == "comment_id"
    assert comments.comment_get_for(personas["auditor"].user, comment.pk) == comment


# --- append-only: the database itself refuses to change or remove a comment ----------------------


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE approvals_commentversion SET body = 'rewritten' WHERE comment_id = %s",
        "DELETE FROM approvals_commentversion WHERE comment_id = %s",
        "UPDATE approvals_comment SET author_id = author_id WHERE id = %s",
        "DELETE FROM approvals_comment WHERE id = %s",
        "TRUNCATE approvals_commentversion",
    ],
    ids=["update-version", "delete-version", "update-comment", "delete-comment", "truncate"],
)
def test_the_database_refuses_to_change_a_comment(personas, statement):
    task = task_make()
    comment = comments.comment_post(actor=personas["reviewer"].user, task=task, body="as written")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, [comment.pk] if "%s" in statement else None)
    assert CommentVersion.objects.get(comment=comment).body == "as written"


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_the_orm_cannot_rewrite_a_comment_either(personas):
    comment = comments.comment_post(actor=personas["reviewer"].user, task=task_make(), body="kept")
    with pytest.raises(DatabaseError), transaction.atomic():
        CommentVersion.objects.filter(comment=comment).update(body="forged")
    with pytest.raises(DatabaseError), transaction.atomic():
        Comment.objects.filter(pk=comment.pk).delete()
    assert CommentVersion.objects.get(comment=comment).body == "kept"


def test_simultaneous_edits_each_get_their_own_version(personas):
    """Both editors start together (a barrier); the row lock queues them, so neither is lost or refused."""
    import threading

    from django.db import connections

    author = personas["reviewer"].user
    comment = comments.comment_post(actor=author, task=task_make(), body="v1")
    barrier = threading.Barrier(2)
    results: list[object] = []

    def edit(text: str) -> None:
        try:
            barrier.wait(timeout=scaled(10))
            results.append(comments.comment_edit(actor=author, comment=comment, body=text).version)
        except Exception as exc:  # reported by the assertion below
            results.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=edit, args=(f"edit {i}",)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=scaled(30))
    assert sorted(r for r in results if isinstance(r, int)) == [2, 3], results
    bodies = set(CommentVersion.objects.filter(comment=comment, version__gt=1).values_list("body", flat=True))
    assert bodies == {"edit 0", "edit 1"}
